//! What a guest's console says about its boots: the lines the project's cloud image (a VM) and
//! vm-lab's container template (a container) print, read from the console log the target names
//! (a lab-backed fake's `…/guest` control route). [`ConsoleMark`] tells a later boot's text from
//! an earlier one's; [`wait_boot_report`] waits for what a boot did with the cluster's service;
//! [`ConsoleWatch`] timestamps every milestone to put the guest's side on the API's time axis.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::ClusterError;
use super::provision::{self, BOOT_FAILED_MARKER, BOOT_MARKER};
use super::transport::last_lines;

/// The lines one kind of guest prints on its console at every boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootMarkers {
    /// Its init runs.
    pub init: &'static str,
    /// Its boot is done: network configured, SSH up (and on the cloud image, its per-boot
    /// scripts ran).
    pub ready: &'static str,
    /// The prefix of its boot's failures.
    pub error: &'static str,
    /// Whether it still prints [`BootMarkers::ready`] after a failure (the cloud image does;
    /// the container template's init prints its errors instead of the ready line).
    pub ready_despite_errors: bool,
}

/// The project's cloud image (`vm-lab image cloud`).
pub const CLOUD_IMAGE: BootMarkers = BootMarkers {
    init: "CLOUDIMG-INIT",
    ready: "CLOUDIMG-READY",
    error: "CLOUDINIT-ERROR:",
    ready_despite_errors: true,
};

/// vm-lab's container template (`vm-lab image ct-template`).
pub const CONTAINER: BootMarkers = BootMarkers {
    init: "CT-INIT",
    ready: vm_lab::image::template::READY_MARKER,
    error: "CT-ERROR:",
    ready_despite_errors: false,
};

/// Waits until the console shows `markers.ready` (from its start), or (a guest that prints no
/// ready line after a failure) one of its failures.
pub async fn wait_console(
    name: &str,
    log: &Path,
    markers: &BootMarkers,
    timeout: Duration,
) -> Result<(), ClusterError> {
    // At the host's pace: a TCG guest on a slow or shared machine boots later.
    let timeout = vm_lab::pace::scaled(timeout);
    let start = Instant::now();
    let fail = |detail: String| ClusterError::Remote {
        node: name.to_owned(),
        step: "boot".into(),
        code: 1,
        detail,
    };
    loop {
        let text = read_from(log, 0);
        if text.contains(markers.ready) {
            return Ok(());
        }
        let errors = error_lines(&text, markers);
        if !markers.ready_despite_errors && !errors.is_empty() {
            return Err(fail(format!("its console says {}", errors.join(" | "))));
        }
        if start.elapsed() >= timeout {
            return Err(fail(format!(
                "no {} on its console within {} s; it ends: {}",
                markers.ready,
                timeout.as_secs(),
                last_lines(&text, 6)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The console's lines carrying `markers.error`, trimmed.
pub fn error_lines<'t>(text: &'t str, markers: &BootMarkers) -> Vec<&'t str> {
    text.lines()
        .filter(|l| l.contains(markers.error))
        .map(str::trim)
        .collect()
}

/// A guest-side milestone: when the harness first saw it on a VM's console, and since when the
/// VM had been on its way to it (the previous milestone of the same boot, or the moment the
/// boot's console appeared).
#[derive(Debug, Clone)]
pub struct Milestone {
    pub vm: String,
    pub what: &'static str,
    pub since: Instant,
    pub at: Instant,
}

/// What each boot prints on the project's cloud image and on the container template, in order,
/// and what it means.
pub const CONSOLE_MILESTONES: [(&str, &str); 6] = [
    (CLOUD_IMAGE.init, "booted (init runs)"),
    (CLOUD_IMAGE.ready, "cloud-init applied, SSH up"),
    (CONTAINER.init, "container init runs"),
    (CONTAINER.ready, "network configured, SSH up"),
    (BOOT_MARKER, "etcd started"),
    (provision::HEALTHY_MARKER, "etcd healthy"),
];

/// Which consoles a [`ConsoleWatch`] reads.
enum Consoles {
    /// These guests' logs, by name.
    Of(Vec<(String, PathBuf)>),
    /// Every `*/*/serial.log` under a lab backend's run root (`<host>/<node>-<vmid>/`), named by
    /// their guest directory (`pve-01-100`), as the guests appear.
    Under(PathBuf),
}

impl Consoles {
    fn list(&self) -> Vec<(String, PathBuf)> {
        match self {
            Consoles::Of(v) => v.clone(),
            Consoles::Under(root) => std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|host| {
                    std::fs::read_dir(host.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                })
                .map(|g| {
                    (
                        g.file_name().to_string_lossy().into_owned(),
                        g.path().join("serial.log"),
                    )
                })
                .filter(|(_, p)| p.is_file())
                .collect(),
        }
    }
}

/// Watches consoles in the background and timestamps every milestone of every boot
/// ([`CONSOLE_MILESTONES`]) as it appears, to put the guest's side on the same time axis as the
/// API's. Resolution: its poll interval (200 ms); what was there when it started is stamped then.
pub struct ConsoleWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: tokio::task::JoinHandle<Vec<Milestone>>,
}

/// What the watch knows of one console: the file of the current boot, when it appeared, the
/// occurrences of each marker seen, and the last milestone's time.
struct Seen {
    mark: ConsoleMark,
    counts: [usize; CONSOLE_MILESTONES.len()],
    last: Instant,
}

impl ConsoleWatch {
    /// Watches these consoles: (the guest's name, its console log).
    pub fn start(consoles: Vec<(String, PathBuf)>) -> Self {
        Self::spawn(Consoles::Of(consoles))
    }

    /// Watches every guest a lab backend runs under `root` (its state directory's `lab/`),
    /// from before the guests exist: milestones are named by guest directory (`<node>-<vmid>`).
    pub fn start_under(root: PathBuf) -> Self {
        Self::spawn(Consoles::Under(root))
    }

    fn spawn(consoles: Consoles) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = tokio::spawn(async move {
            let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
            let mut out = Vec::new();
            loop {
                let done = flag.load(std::sync::atomic::Ordering::Relaxed);
                for (vm, log) in consoles.list() {
                    let mark = ConsoleMark::of(&log);
                    let text = read_from(&log, 0);
                    let now = Instant::now();
                    let fresh = || Seen {
                        mark,
                        counts: [0; CONSOLE_MILESTONES.len()],
                        last: now,
                    };
                    let entry = seen.entry(vm.clone()).or_insert_with(fresh);
                    if entry.mark.inode != mark.inode || entry.mark.born != mark.born {
                        *entry = fresh();
                    }
                    for (i, (marker, what)) in CONSOLE_MILESTONES.iter().enumerate() {
                        let n = text.matches(marker).count();
                        for _ in entry.counts[i]..n {
                            out.push(Milestone {
                                vm: vm.clone(),
                                what,
                                since: entry.last,
                                at: now,
                            });
                            entry.last = now;
                        }
                        entry.counts[i] = entry.counts[i].max(n);
                    }
                }
                if done {
                    return out;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { stop, handle }
    }

    /// Stops watching (after one last look) and returns the milestones in the order seen.
    pub async fn finish(self) -> Vec<Milestone> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.await.unwrap_or_default()
    }
}

/// A place in a console log: the file (its inode and birth time, which tell a file made anew
/// even when the inode number is reused) and its length then. A guest's next QEMU may write a new
/// file (the lab backend makes a guest's run directory anew on every start), whose text all
/// counts as later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleMark {
    inode: u64,
    born: Option<std::time::SystemTime>,
    len: u64,
}

impl ConsoleMark {
    pub fn of(log: &Path) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(log)
            .map(|m| Self {
                inode: m.ino(),
                born: m.created().ok(),
                len: m.len(),
            })
            .unwrap_or_default()
    }

    /// Where in `log`, as it is now, the text after this mark begins.
    pub fn offset_in(self, log: &Path) -> u64 {
        let now = Self::of(log);
        if now.inode == self.inode && now.born == self.born && now.len >= self.len {
            self.len
        } else {
            0
        }
    }
}

/// What a boot did with the cluster's service, as its console told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootReport {
    /// The first-boot script started the service.
    Started,
    /// The boot is done (its ready line, or a container's failures) and nothing reported on
    /// the service; `errors` are the boot's failure lines.
    Booted { errors: Vec<String> },
}

/// What the boot after `mark` printed: the first-boot script's report, its failure (an error),
/// or a boot that finished without either.
pub async fn wait_boot_report(
    name: &str,
    log: &Path,
    mark: ConsoleMark,
    markers: &BootMarkers,
    timeout: Duration,
) -> Result<BootReport, ClusterError> {
    let timeout = vm_lab::pace::scaled(timeout);
    let start = Instant::now();
    let fail = |detail: String| ClusterError::Remote {
        node: name.to_owned(),
        step: "boot".into(),
        code: 1,
        detail,
    };
    loop {
        let text = read_from(log, mark.offset_in(log));
        if text.contains(BOOT_MARKER) {
            return Ok(BootReport::Started);
        }
        if let Some(l) = text.lines().find(|l| l.contains(BOOT_FAILED_MARKER)) {
            return Err(fail(l.trim().to_owned()));
        }
        let errors = error_lines(&text, markers);
        if text.contains(markers.ready) || (!markers.ready_despite_errors && !errors.is_empty()) {
            return Ok(BootReport::Booted {
                errors: errors.into_iter().map(str::to_owned).collect(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(fail(format!(
                "no report within {} s; its console ends: {}",
                timeout.as_secs(),
                last_lines(&text, 6)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The console log from byte `mark` on (empty when it cannot be read).
pub fn read_from(log: &Path, mark: u64) -> String {
    let bytes = std::fs::read(log).unwrap_or_default();
    let from = usize::try_from(mark).unwrap_or(usize::MAX).min(bytes.len());
    String::from_utf8_lossy(&bytes[from..]).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn log_with(text: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("serial.log");
        std::fs::write(&p, text).unwrap();
        (d, p)
    }

    async fn report(p: &Path, mark: ConsoleMark, m: &BootMarkers) -> BootReport {
        wait_boot_report("node01", p, mark, m, Duration::from_secs(1))
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_boot_report_counts_only_after_the_mark() {
        let before = format!("{BOOT_MARKER} (pid 1)\n");
        let (_d, p) = log_with(&before);
        let mark = ConsoleMark::of(&p);
        std::fs::write(&p, format!("{before}CLOUDIMG-READY host=node01\n")).unwrap();
        assert_eq!(
            report(&p, mark, &CLOUD_IMAGE).await,
            BootReport::Booted { errors: vec![] }
        );
        assert_eq!(
            report(&p, ConsoleMark::default(), &CLOUD_IMAGE).await,
            BootReport::Started
        );
    }

    #[tokio::test]
    async fn a_console_made_anew_by_the_next_boot_counts_from_its_start() {
        let (d, p) = log_with(&"SeaBIOS and a long first boot\n".repeat(50));
        let mark = ConsoleMark::of(&p);
        // The next QEMU writes a new, shorter file at the same path.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(
            d.path().join("serial.log"),
            format!("{BOOT_MARKER} (pid 7)\n"),
        )
        .unwrap();
        assert_eq!(report(&p, mark, &CLOUD_IMAGE).await, BootReport::Started);
    }

    #[tokio::test]
    async fn a_container_s_failures_end_its_boot_without_a_ready_line() {
        let (_d, p) =
            log_with("CT-INIT\nCT-ERROR: eth0: cannot route via gateway 192.168.100.254\n");
        assert_eq!(
            report(&p, ConsoleMark::default(), &CONTAINER).await,
            BootReport::Booted {
                errors: vec!["CT-ERROR: eth0: cannot route via gateway 192.168.100.254".into()]
            }
        );
        let e = wait_console("node03", &p, &CONTAINER, Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node03") && e.contains("cannot route via gateway"),
            "{e}"
        );
        // The cloud image goes on to its ready line after a failure: not done yet.
        let (_d, p) = log_with("CLOUDIMG-INIT\nCLOUDINIT-ERROR: bad user-data\n");
        let e = wait_boot_report(
            "node01",
            &p,
            ConsoleMark::default(),
            &CLOUD_IMAGE,
            Duration::from_millis(300),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("no report within"), "{e}");
    }

    #[tokio::test]
    async fn the_console_watch_stamps_each_boot_s_milestones_as_they_appear() {
        let (_d, p) = log_with("CLOUDIMG-INIT\n");
        let (_c, ct) = log_with("");
        let watch = ConsoleWatch::start(vec![
            ("node01".into(), p.clone()),
            ("node03".into(), ct.clone()),
        ]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(
            &p,
            format!("CLOUDIMG-INIT\nCLOUDIMG-READY host=node01\n{BOOT_MARKER} (pid 9)\n"),
        )
        .unwrap();
        std::fs::write(&ct, "CT-INIT\nCT-READY hostname=node03 addrs=x\n").unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The next boot writes a new file: its init counts again.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "CLOUDIMG-INIT\n").unwrap();
        let seen: Vec<(String, &str)> = watch
            .finish()
            .await
            .into_iter()
            .map(|m| (m.vm, m.what))
            .collect();
        let of = |vm: &str| -> Vec<&str> {
            seen.iter()
                .filter(|(v, _)| v == vm)
                .map(|(_, w)| *w)
                .collect()
        };
        assert_eq!(
            of("node01"),
            [
                "booted (init runs)",
                "cloud-init applied, SSH up",
                "etcd started",
                "booted (init runs)"
            ]
        );
        assert_eq!(
            of("node03"),
            ["container init runs", "network configured, SSH up"]
        );
    }

    #[tokio::test]
    async fn a_failed_boot_names_its_cause() {
        let (_d, p) = log_with(&format!(
            "cloudimg: per-boot\n{BOOT_FAILED_MARKER}: /cluster/secrets/ca.crt is missing\n"
        ));
        let err = wait_boot_report(
            "node02",
            &p,
            ConsoleMark::default(),
            &CLOUD_IMAGE,
            Duration::from_secs(1),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("node02") && err.contains("ca.crt is missing"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_silent_console_times_out_with_its_tail() {
        let (_d, p) = log_with("SeaBIOS\nBooting from Hard Disk...\n");
        let err = wait_boot_report(
            "node03",
            &p,
            ConsoleMark::default(),
            &CLOUD_IMAGE,
            Duration::from_millis(300),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("Booting from Hard Disk"), "{err}");
    }
}
