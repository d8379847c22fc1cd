//! What the lab-backend tests share: the project's cloud image as qcow2 (as Ubuntu ships its
//! cloud images) and an SSH key pair for `sshkeys`.

use std::path::{Path, PathBuf};
use std::process::Command;

use vm_lab::image::cloud::{CloudImageRequest, build};

/// Runs a host tool that must succeed; its stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a host tool");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The project's cloud image as qcow2 in `dir`, and an ed25519 key pair (`id_ed25519`,
/// `id_ed25519.pub`) beside it.
pub async fn image_and_key(dir: &Path) -> (PathBuf, PathBuf) {
    let img = tokio::task::spawn_blocking(|| {
        build(
            &vm_lab::image::default_cache_dir(),
            &CloudImageRequest::default(),
        )
    })
    .await
    .expect("the image build task")
    .expect("the cloud image builds");
    let qcow2 = dir.join("harness-cloud.qcow2");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-O", "qcow2"])
            .arg(&img.path)
            .arg(&qcow2),
    );
    let key = dir.join("id_ed25519");
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
    (qcow2, key)
}
