//! Shared by the container tests: the fake-proxmox image they run, built from this checkout.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The image the container tests run: `$FAKE_PROXMOX_IMAGE` as given (it must exist), or
/// `fake-proxmox:dev` (re)built by `fake-proxmox/container/build.sh` from the `fake-proxmox`
/// binary next to this test executable (cargo puts it there when the workspace is tested), so
/// the image always holds the code under test. Panics with the reason when Docker is missing:
/// these tests must fail, not skip, on a machine without Docker.
pub fn image() -> (String, String) {
    if let Ok(given) = std::env::var("FAKE_PROXMOX_IMAGE") {
        let ok = docker(&["image", "inspect", "--format", "{{.Id}}", &given]).is_ok();
        assert!(
            ok,
            "FAKE_PROXMOX_IMAGE={given}: no such image in the local Docker engine"
        );
        let (n, t) = given.rsplit_once(':').unwrap_or((&given, "latest"));
        return (n.to_string(), t.to_string());
    }
    let script = repo().join("fake-proxmox/container/build.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).args(["--tag", "fake-proxmox:dev"]);
    if let Some(bin) = sibling_binary() {
        cmd.arg("--binary").arg(bin);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "building the fake-proxmox image failed (Docker is required for this test):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
    ("fake-proxmox".into(), "dev".into())
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>/fake-proxmox`, when the test executable (`target/<profile>/deps/…`) has one
/// beside its directory.
fn sibling_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let bin = profile_dir.join("fake-proxmox");
    bin.is_file().then_some(bin)
}

/// Runs `docker ARGS`; stdout on success, stderr (with the command) on failure.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run docker (is it installed?): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Where tests keep artifacts (reports, screenshots): cargo's per-target temp dir under target/.
pub fn artifacts() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}
