//! Choosing the accelerator. `/dev/kvm` can exist, open, create VMs — and then hang the guest
//! kernel forever (nested hosts without vmx/svm). So KVM is used only after a probe boot prints a
//! kernel marker within a bounded time; the verdict is cached per host kernel and QEMU version.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::spec::AccelChoice;

/// How long the probe waits for the kernel's first words under KVM.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(12);
const PROBE_MARKERS: [&str; 2] = ["Linux version", "Decompressing Linux"];

/// The accelerator a lab actually runs under, once [`resolve`] has decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualisation through `/dev/kvm`, used only after a probe boot succeeded.
    Kvm,
    /// QEMU's software emulator; default timeouts are multiplied by [`Accel::timeout_scale`].
    Tcg,
}

impl Accel {
    /// Factor applied to every default timeout: emulation is several times slower.
    pub fn timeout_scale(self) -> u32 {
        match self {
            Accel::Kvm => 1,
            Accel::Tcg => 4,
        }
    }

    /// `kvm` or `tcg`, as QEMU's `-accel` and the lab's state file spell it.
    pub fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ProbeCache {
    key: String,
    kvm_works: bool,
    detail: String,
}

/// Resolve the accelerator for a lab. `kernel` is any bzImage (the lab's own) for the probe.
/// `Kvm` fails fast with the probe's finding; `Auto` falls back to TCG.
pub async fn resolve(choice: AccelChoice, kernel: &Path, cache_dir: &Path) -> Result<Accel> {
    match choice {
        AccelChoice::Tcg => Ok(Accel::Tcg),
        AccelChoice::Kvm => match kvm_verdict(kernel, cache_dir).await? {
            (true, _) => Ok(Accel::Kvm),
            (false, detail) => Err(Error::Accel(format!(
                "--accel kvm was requested but KVM is not usable here: {detail}; use --accel tcg or auto"
            ))),
        },
        AccelChoice::Auto => {
            let (ok, detail) = kvm_verdict(kernel, cache_dir).await?;
            if ok {
                tracing::info!("accel: kvm ({detail})");
                Ok(Accel::Kvm)
            } else {
                tracing::info!("accel: tcg, because {detail}");
                Ok(Accel::Tcg)
            }
        }
    }
}

/// (works, why) — from the cache when the host kernel and QEMU are unchanged.
async fn kvm_verdict(kernel: &Path, cache_dir: &Path) -> Result<(bool, String)> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return Ok((false, format!("/dev/kvm cannot be opened ({e})")));
    }
    let key = probe_key().await;
    verdict_cached(cache_dir, &key, || probe_boot(kernel, cache_dir)).await
}

/// The verdict cached for `key` in `cache_dir`, else `probe`'s, cached. One probe at a time
/// per cache: the labs a test run starts at once on a fresh machine would each spend up to
/// PROBE_TIMEOUT booting the same probe; the others wait for the first one's verdict.
async fn verdict_cached<F, Fut>(cache_dir: &Path, key: &str, probe: F) -> Result<(bool, String)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<(bool, String)>>,
{
    let cache_file = cache_dir.join("accel-probe.json");
    if let Some(cached) = cached_verdict(&cache_file, key) {
        return Ok(cached);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| Error::io(cache_dir, e))?;
    let lock_path = cache_dir.join("accel-probe.lock");
    let _lock = tokio::task::spawn_blocking(move || crate::image::lock(&lock_path))
        .await
        .map_err(|e| Error::Accel(format!("waiting for the probe lock: {e}")))??;
    if let Some(cached) = cached_verdict(&cache_file, key) {
        return Ok(cached);
    }
    let (works, detail) = probe().await?;
    let entry = ProbeCache {
        key: key.to_string(),
        kvm_works: works,
        detail: detail.clone(),
    };
    let text = serde_json::to_string_pretty(&entry).map_err(|e| Error::Accel(e.to_string()))?;
    // Whole or not at all: a lab outside the lock may read the file while it is written.
    let tmp = cache_dir.join(format!("accel-probe.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &cache_file).map_err(|e| Error::io(&cache_file, e))?;
    Ok((works, detail))
}

/// The cached verdict for `key` (this host kernel and QEMU), if one is there.
fn cached_verdict(cache_file: &Path, key: &str) -> Option<(bool, String)> {
    let text = std::fs::read_to_string(cache_file).ok()?;
    let c = serde_json::from_str::<ProbeCache>(&text).ok()?;
    (c.key == key).then(|| (c.kvm_works, format!("{} (cached)", c.detail)))
}

async fn probe_key() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let qemu = tokio::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .await
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    format!("{}|{}", release.trim(), qemu.trim())
}

/// Boot `kernel` under KVM with no devices and watch the serial log for the kernel's first
/// words. The probe QEMU is always killed.
async fn probe_boot(kernel: &Path, scratch: &Path) -> Result<(bool, String)> {
    std::fs::create_dir_all(scratch).map_err(|e| Error::io(scratch, e))?;
    let log = scratch.join(format!("accel-probe-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let mut child = tokio::process::Command::new("qemu-system-x86_64")
        .args(probe_argv(kernel, &log))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::tool("qemu-system-x86_64", e.to_string()))?;
    let start = Instant::now();
    let verdict = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if PROBE_MARKERS.iter().any(|m| text.contains(m)) {
            break (
                true,
                format!(
                    "a probe boot printed the kernel banner in {:.1?}",
                    start.elapsed()
                ),
            );
        }
        if let Ok(Some(status)) = child.try_wait() {
            break (false, format!("the probe QEMU exited early ({status})"));
        }
        if start.elapsed() > PROBE_TIMEOUT {
            break (
                false,
                format!(
                    "a probe boot printed nothing within {PROBE_TIMEOUT:?} (KVM initialises but the guest hangs)"
                ),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = child.kill().await;
    let _ = std::fs::remove_file(&log);
    Ok(verdict)
}

/// The probe's QEMU arguments: a KVM guest with only `kernel`, 256 MiB and its serial console
/// written to `log`, which [`PROBE_TIMEOUT`] bounds waiting on.
pub fn probe_argv(kernel: &Path, log: &Path) -> Vec<String> {
    vec![
        "-accel".into(),
        "kvm".into(),
        "-machine".into(),
        "q35".into(),
        "-cpu".into(),
        "host".into(),
        "-m".into(),
        "256".into(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-serial".into(),
        format!("file:{}", log.display()),
        "-kernel".into(),
        kernel.display().to_string(),
        "-append".into(),
        "console=ttyS0 earlyprintk=serial,ttyS0 panic=-1".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_scales_timeouts() {
        assert!(Accel::Tcg.timeout_scale() > Accel::Kvm.timeout_scale());
    }

    /// Labs starting at once on a fresh cache probe once: the rest wait for the verdict and
    /// read it; a later call with another host key (a new kernel or QEMU) probes again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_labs_share_one_probe() {
        let dir = tempfile::tempdir().expect("a temporary dir");
        let probes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let calls = (0..4).map(|_| {
            let (dir, probes) = (dir.path().to_path_buf(), probes.clone());
            tokio::spawn(async move {
                verdict_cached(&dir, "kernel-a|qemu-1", || async {
                    probes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok((false, "the probe hung".to_string()))
                })
                .await
            })
        });
        let verdicts: Vec<_> = futures_join_all(calls).await;
        assert_eq!(probes.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(verdicts.iter().all(|(works, _)| !works));
        let cached = verdicts
            .iter()
            .filter(|(_, d)| d.ends_with("(cached)"))
            .count();
        assert_eq!(cached, 3, "{verdicts:?}");

        let again = verdict_cached(dir.path(), "kernel-b|qemu-1", || async {
            probes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok((true, "booted".to_string()))
        })
        .await
        .expect("the second key's probe verdict");
        assert_eq!(again, (true, "booted".to_string()));
        assert_eq!(probes.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    async fn futures_join_all(
        calls: impl Iterator<Item = tokio::task::JoinHandle<Result<(bool, String)>>>,
    ) -> Vec<(bool, String)> {
        let mut out = Vec::new();
        for c in calls.collect::<Vec<_>>() {
            out.push(c.await.expect("the call ran").expect("a verdict"));
        }
        out
    }

    #[test]
    fn probe_uses_kvm_and_serial_file() {
        let v = probe_argv(Path::new("/k"), Path::new("/l"));
        let j = v.join(" ");
        assert!(j.contains("-accel kvm"));
        assert!(j.contains("-serial file:/l"));
        assert!(j.contains("earlyprintk=serial"));
    }

    #[tokio::test]
    async fn forced_tcg_needs_no_probe() {
        let a = resolve(
            AccelChoice::Tcg,
            Path::new("/nonexistent"),
            Path::new("/nonexistent"),
        )
        .await
        .expect("tcg");
        assert_eq!(a, Accel::Tcg);
    }
}
