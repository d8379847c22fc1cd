//! `vm-lab image cloud`: the project's cloud image (a bootable disk standing in for
//! `ubuntu-22.04-cloud.img`), built or found in the cache; prints its path. `vm-lab image
//! ct-template`: the container template (a `vztmpl` `.tar.gz`), likewise.

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
    /// The container template: a `vztmpl`-style `.tar.gz` root file system (busybox,
    /// dropbear, an init that reads what PVE writes). Prints the archive's path (stdout) and
    /// its facts (stderr).
    CtTemplate {
        /// Also copy the archive here, e.g. into a storage's `template/cache/` dir.
        #[arg(long)]
        out: Option<std::path::PathBuf>,
        /// A Debian package whose programs the template carries besides its own
        /// (repeatable), e.g. `--package etcd-server`.
        #[arg(long = "package", value_name = "NAME")]
        packages: Vec<String>,
    },
}

pub(super) async fn ct_template(out: Option<&Path>, packages: Vec<String>) -> Result<ExitCode> {
    let cache = vm_lab::image::default_cache_dir();
    let req = vm_lab::image::template::TemplateRequest { packages };
    let t =
        tokio::task::spawn_blocking(move || vm_lab::image::template::build(&cache, &req)).await??;
    eprintln!(
        "container template · {} bytes · {} packages",
        t.bytes,
        t.packages.len()
    );
    let path = match out {
        Some(dst) => {
            std::fs::copy(&t.path, dst)
                .with_context(|| format!("copying {} to {}", t.path.display(), dst.display()))?;
            dst.to_path_buf()
        }
        None => t.path,
    };
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
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
