//! `vm-lab image cloud`: the project's cloud image (a bootable disk standing in for
//! `ubuntu-22.04-cloud.img`), built or found in the cache; prints its path.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use vm_lab::image::cloud::{self, CloudImageRequest, CloudKernel};

#[derive(Subcommand)]
pub(crate) enum ImageKind {
    /// The cloud image: a raw disk that boots through the firmware and reads a NoCloud or
    /// config-drive cloud-init drive. Prints the image's path (stdout) and its facts (stderr).
    Cloud {
        /// Also copy the image here (sparse), e.g. into a storage's `import/` or `iso/` dir.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// The disk's virtual size in MiB.
        #[arg(long, default_value_t = CloudImageRequest::default().disk_mib)]
        disk_mib: u64,
        /// Boot Debian's generic kernel: every PVE disk bus and NIC model (LSI, SATA, e1000),
        /// about twice as slow to boot under TCG as the default cloud kernel.
        #[arg(long)]
        generic_kernel: bool,
        /// A Debian package to bake into the image besides its own (repeatable), e.g.
        /// `--package etcd-server`.
        #[arg(long = "package", value_name = "NAME")]
        packages: Vec<String>,
    },
}

pub(super) async fn cloud_image(
    out: Option<&Path>,
    disk_mib: u64,
    generic_kernel: bool,
    packages: Vec<String>,
) -> Result<ExitCode> {
    let cache = vm_lab::image::default_cache_dir();
    let kernel = if generic_kernel {
        CloudKernel::Generic
    } else {
        CloudKernel::Cloud
    };
    let req = CloudImageRequest {
        disk_mib,
        kernel,
        packages,
    };
    let img = tokio::task::spawn_blocking(move || cloud::build(&cache, &req)).await??;
    eprintln!(
        "kernel {} · initramfs {} bytes · disk {} MiB, {} MiB allocated · {} modules",
        img.kernel_release,
        img.initrd_bytes,
        img.disk_bytes / (1024 * 1024),
        img.allocated_bytes / (1024 * 1024),
        img.modules.len()
    );
    let path = match out {
        Some(dst) => {
            let st = std::process::Command::new("cp")
                .arg("--sparse=always")
                .arg(&img.path)
                .arg(dst)
                .status()
                .context("cp")?;
            anyhow::ensure!(
                st.success(),
                "cp {} {} failed",
                img.path.display(),
                dst.display()
            );
            dst.to_path_buf()
        }
        None => img.path,
    };
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}
