//! The container template: a `vztmpl`-style `.tar.gz` root file system made only from Debian
//! packages (busybox-static with its applet links, dropbear, any requested packages with their
//! shared libraries), with a busybox-sh `/sbin/init` (`init.sh`) that configures the container
//! the way PVE leaves its files (`/etc/hostname`, `/etc/hosts`, `/etc/network/interfaces`,
//! `/root/.ssh/authorized_keys`), starts dropbear and prints `CT-READY …` on the console.
//! Cached by a hash of its inputs, like the cloud image.

mod archive;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cpio::Tree;
use crate::error::{Error, Result};

pub use archive::unpack;

/// The line init prints once the network is configured and dropbear runs.
pub const READY_MARKER: &str = "CT-READY";
/// The prefix of the lines init prints when a file it needs is malformed.
pub const ERROR_MARKER: &str = "CT-ERROR";
/// Packages every template carries.
pub const BASE_PACKAGES: [&str; 2] = ["busybox-static", "dropbear-bin"];
/// Bump when the builder's output changes for the same inputs.
const BUILDER_VERSION: &str = "vm-lab-ct-template-1";
const INIT_SCRIPT: &str = include_str!("init.sh");
const UDHCPC_SCRIPT: &str = include_str!("../cloud/udhcpc.sh");
const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
/// `*`: no password can match, yet the account is not locked (dropbear refuses `!` even for keys).
const SHADOW: &str = "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n";
const GROUP: &str = "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n";
const SHELLS: &str = "/bin/sh\n/bin/ash\n";
const PROFILE: &str = "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n";
const INTERFACES: &str = "auto lo\niface lo inet loopback\n";
/// PVE picks its Debian setup from this file (and, at 10 or later, writes `address A/P`).
const DEBIAN_VERSION: &str = "12.0\n";
const OS_RELEASE: &str = "PRETTY_NAME=\"vm-lab container template (Debian 12 packages)\"\n\
NAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n";
/// busybox applets not linked: the template has its own init.
const SKIPPED_APPLETS: [&str; 2] = ["init", "linuxrc"];

/// What goes into a template besides the base (busybox, dropbear, init).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRequest {
    /// Extra Debian packages whose programs land on PATH, e.g. `etcd-server`.
    pub packages: Vec<String>,
}

/// A built template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// The `.tar.gz` in the cache, named by the hash of its inputs.
    pub path: PathBuf,
    /// Package name → version of everything it was made from.
    pub packages: BTreeMap<String, String>,
    /// Size of the archive in bytes.
    pub bytes: u64,
}

/// Build the template (or reuse the cached one). Blocking: packages are fetched with
/// `apt-get download` the first time. Fails with [`Error::Spec`] for a package name Debian
/// would not accept, [`Error::Image`] or [`Error::Tool`] when a package cannot be had.
pub fn build(cache: &Path, req: &TemplateRequest) -> Result<Template> {
    for p in &req.packages {
        if !valid_package_name(p) {
            return Err(Error::Spec(format!("{p:?} is not a Debian package name")));
        }
    }
    std::fs::create_dir_all(cache).map_err(|e| Error::io(cache, e))?;
    let _lock = super::lock(&cache.join("template.lock"))?;
    let mut roots: Vec<String> = BASE_PACKAGES.iter().map(|s| s.to_string()).collect();
    for p in &req.packages {
        if !roots.contains(p) {
            roots.push(p.clone());
        }
    }
    let resolved = super::resolve(cache, &roots, None)?;
    let hash = input_hash(&resolved.versions, &roots);
    let out_dir = cache.join("templates").join(&hash[..16]);
    let manifest_path = out_dir.join("manifest.json");
    if let Ok(text) = std::fs::read_to_string(&manifest_path)
        && let Ok(t) = serde_json::from_str::<Template>(&text)
        && t.path.is_file()
    {
        return Ok(t);
    }
    tracing::info!("building container template {}", &hash[..16]);
    let mut tree = Tree::new();
    base_tree(&mut tree);
    let unpacked = super::assemble_programs(cache, &resolved, &roots, &mut tree)?;
    let busybox = unpacked
        .get("busybox-static")
        .map(|d| d.join("bin/busybox"))
        .ok_or_else(|| Error::Image("busybox-static was not unpacked".into()))?;
    link_applets(&mut tree, &applets(&busybox)?);

    let tmp = cache
        .join("templates")
        .join(format!(".tmp-{}-{}", &hash[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let file_name = format!("vm-lab-ct_{}_amd64.tar.gz", &hash[..12]);
    archive::write_tar_gz(&tree, &tmp.join(&file_name))?;
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::rename(&tmp, &out_dir).map_err(|e| Error::io(&out_dir, e))?;
    let path = out_dir.join(file_name);
    let t = Template {
        bytes: std::fs::metadata(&path)
            .map_err(|e| Error::io(&path, e))?
            .len(),
        path,
        packages: resolved.versions,
    };
    let text = serde_json::to_string_pretty(&t).map_err(|e| Error::Image(e.to_string()))?;
    std::fs::write(&manifest_path, text).map_err(|e| Error::io(&manifest_path, e))?;
    Ok(t)
}

/// Debian's package name rule: lower-case letters, digits, `+`, `-`, `.`; at least two
/// characters, starting with a letter or digit.
fn valid_package_name(name: &str) -> bool {
    name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.'))
}

fn input_hash(versions: &BTreeMap<String, String>, roots: &[String]) -> String {
    let mut h = Sha256::new();
    h.update(BUILDER_VERSION);
    for s in [
        INIT_SCRIPT,
        UDHCPC_SCRIPT,
        PASSWD,
        SHADOW,
        GROUP,
        SHELLS,
        PROFILE,
        INTERFACES,
        DEBIAN_VERSION,
        OS_RELEASE,
    ] {
        h.update(s);
        h.update([0]);
    }
    h.update(roots.join(","));
    for (n, v) in versions {
        h.update(format!("{n}={v}\n"));
    }
    hex::encode(h.finalize())
}

/// Everything besides the packages' programs and libraries.
fn base_tree(tree: &mut Tree) {
    for d in [
        "/bin",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
        "/usr/local/bin",
        "/usr/local/sbin",
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/var/log",
        "/var/lib",
        "/mnt",
        "/home",
        "/etc/network",
        "/usr/share/udhcpc",
    ] {
        tree.dir(d, 0o755);
    }
    tree.dir("/tmp", 0o1777);
    tree.dir("/var/tmp", 0o1777);
    tree.dir("/root", 0o700);
    tree.dir("/root/.ssh", 0o700);
    tree.dir("/etc/dropbear", 0o700);
    tree.symlink("/var/run", "/run");
    tree.file("/sbin/init", 0o755, INIT_SCRIPT.as_bytes().to_vec());
    tree.file(
        "/usr/share/udhcpc/default.script",
        0o755,
        UDHCPC_SCRIPT.as_bytes().to_vec(),
    );
    for (path, mode, text) in [
        ("/etc/passwd", 0o644, PASSWD),
        ("/etc/shadow", 0o640, SHADOW),
        ("/etc/group", 0o644, GROUP),
        ("/etc/shells", 0o644, SHELLS),
        ("/etc/profile", 0o644, PROFILE),
        ("/etc/network/interfaces", 0o644, INTERFACES),
        ("/etc/debian_version", 0o644, DEBIAN_VERSION),
        ("/etc/os-release", 0o644, OS_RELEASE),
        ("/etc/resolv.conf", 0o644, ""),
    ] {
        tree.file(path, mode, text.as_bytes().to_vec());
    }
}

/// busybox's applets as paths (`bin/sh`, `usr/bin/awk`, …), from `busybox --list-full`.
fn applets(busybox: &Path) -> Result<Vec<String>> {
    let out = std::process::Command::new(busybox)
        .arg("--list-full")
        .output()
        .map_err(|e| Error::tool("busybox", format!("{}: {e}", busybox.display())))?;
    if !out.status.success() {
        return Err(Error::tool(
            "busybox",
            format!("--list-full exited with {}", out.status),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// A link to `/bin/busybox` for every applet whose path holds no real program.
fn link_applets(tree: &mut Tree, applets: &[String]) {
    for a in applets {
        let path = format!("/{}", a.trim_start_matches('/'));
        let name = path.rsplit('/').next().unwrap_or_default();
        if path == "/bin/busybox" || SKIPPED_APPLETS.contains(&name) || tree.contains(&path) {
            continue;
        }
        tree.symlink(&path, "/bin/busybox");
    }
}

#[cfg(test)]
mod tests {
    use super::super::cpio::Entry;
    use super::*;

    #[test]
    fn package_names_follow_debian_rules() {
        assert!(valid_package_name("etcd-server"));
        assert!(valid_package_name("libstdc++6"));
        assert!(!valid_package_name("Etcd"));
        assert!(!valid_package_name("x"));
        assert!(!valid_package_name("a b"));
        assert!(!valid_package_name("-rf"));
    }

    #[test]
    fn applets_link_to_busybox_except_init_and_real_programs() {
        let mut t = Tree::new();
        base_tree(&mut t);
        t.file("/usr/bin/dbclient", 0o755, b"ELF".to_vec());
        let list: Vec<String> = ["bin/sh", "sbin/init", "usr/bin/dbclient", "sbin/ip"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        link_applets(&mut t, &list);
        assert_eq!(
            t.get("/bin/sh"),
            Some(&Entry::Symlink {
                target: "/bin/busybox".into()
            })
        );
        assert!(t.contains("/sbin/ip"));
        assert!(matches!(t.get("/sbin/init"), Some(Entry::File { .. })));
        assert!(matches!(
            t.get("/usr/bin/dbclient"),
            Some(Entry::File { .. })
        ));
    }

    #[test]
    fn the_hash_follows_versions_and_roots() {
        let mut v = BTreeMap::new();
        v.insert("busybox-static".to_string(), "1".to_string());
        let roots = vec!["busybox-static".to_string()];
        let a = input_hash(&v, &roots);
        assert_eq!(a, input_hash(&v, &roots));
        assert_ne!(a, input_hash(&v, &["etcd-server".to_string()]));
        v.insert("busybox-static".to_string(), "2".to_string());
        assert_ne!(a, input_hash(&v, &roots));
    }
}
