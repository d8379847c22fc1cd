//! What pve-container's `PVE::LXC::Setup` writes into a container's root file system: at
//! create (`post_create_hook`: root's SSH keys, then the files of every start) and at every
//! start (`pre_start_hook`: `/etc/network/interfaces`, `/etc/hostname`, `/etc/hosts`,
//! `/etc/resolv.conf`). These are PVE rules, so they live here, as pure functions of the
//! config and what the root file system holds ([`RootFs`]); an executor that runs
//! containers for real applies the [`Change`]s they give.
//!
//! Covered: the Debian plugin (also taken by `devuan`), `unmanaged` (nothing is written), OS
//! detection at create (`/etc/os-release`, then the release files). Not covered: the other
//! distributions' plugins, `/etc/inittab` and systemd getty units (`setup_init`), the
//! timezone, root's password, `machine-id` and crontab randomisation.

mod names;
pub mod network;
pub mod sections;

use std::collections::BTreeMap;

pub use names::HostDns;

/// What the setup code reads of a container's root file system, by absolute path inside it.
pub trait RootFs {
    /// A regular file's content (`None`: none there, or unreadable).
    fn read(&self, path: &str) -> Option<String>;
    /// Whether a directory is there (a symlink to one counts).
    fn is_dir(&self, path: &str) -> bool;
}

/// One change to a root file system, by absolute path inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A directory and its parents (`mkdir -p`); `mode` for the last one.
    MakeDir {
        /// Absolute path inside the root file system.
        path: String,
        /// Permission bits (`0o755`).
        mode: u32,
    },
    /// A file's whole content.
    Write {
        /// Absolute path inside the root file system.
        path: String,
        /// The whole new content.
        content: String,
        /// Permission bits (`0o644`).
        mode: u32,
    },
}

/// Why the setup refused (PVE's text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

/// The distributions PVE's setup knows (`PVE::LXC::Setup`'s plugins).
const KNOWN_OS: &[&str] = &[
    "debian",
    "devuan",
    "ubuntu",
    "centos",
    "fedora",
    "opensuse",
    "archlinux",
    "alpine",
    "gentoo",
    "nixos",
    "openeuler",
    "unmanaged",
];

/// The `ID` of `/etc/os-release` (or `/usr/lib/os-release`), unquoted.
fn os_release_id(root: &dyn RootFs) -> Option<String> {
    let text = root
        .read("/etc/os-release")
        .or_else(|| root.read("/usr/lib/os-release"))?;
    text.lines().find_map(|l| {
        let v = l.trim().strip_prefix("ID=")?;
        Some(v.trim_matches(['"', '\'']).to_string())
    })
}

/// The OS type PVE detects in a freshly extracted root file system (`$autodetect_type`).
pub fn detect_ostype(root: &dyn RootFs) -> Result<String, SetupError> {
    if let Some(id) = os_release_id(root) {
        let alias = match id.as_str() {
            "opensuse-leap" | "opensuse-tumbleweed" | "opensuse-slowroll" | "sles" => {
                Some("opensuse")
            }
            "openEuler" => Some("openeuler"),
            "arch" => Some("archlinux"),
            "rocky" | "almalinux" => Some("centos"),
            _ => None,
        };
        if KNOWN_OS.contains(&id.as_str()) {
            return Ok(id);
        }
        if let Some(a) = alias {
            return Ok(a.to_string());
        }
        tracing::warn!("unknown ID '{id}' in /etc/os-release file, trying fallback detection");
    }
    let has = |p: &str| root.read(p).is_some();
    if root.read("/etc/lsb-release").is_some_and(|d| {
        d.lines()
            .any(|l| l.eq_ignore_ascii_case("DISTRIB_ID=Ubuntu"))
    }) {
        return Ok("ubuntu".into());
    }
    let by_file = [
        ("/etc/debian_version", "debian"),
        ("/etc/devuan_version", "devuan"),
        ("/etc/SuSE-brand", "opensuse"),
        ("/etc/SuSE-release", "opensuse"),
        ("/etc/fedora-release", "fedora"),
        ("/etc/centos-release", "centos"),
        ("/etc/redhat-release", "centos"),
        ("/etc/arch-release", "archlinux"),
        ("/etc/alpine-release", "alpine"),
        ("/etc/gentoo-release", "gentoo"),
    ];
    if let Some((_, os)) = by_file.iter().find(|(f, _)| has(f)) {
        return Ok((*os).to_string());
    }
    if root.is_dir("/nix/store") {
        return Ok("nixos".into());
    }
    if has("/etc/openEuler-release") {
        return Ok("openeuler".into());
    }
    if has("/etc/os-release") {
        return Err(SetupError("unable to detect OS distribution".into()));
    }
    tracing::warn!(
        "/etc/os-release file not found and autodetection failed, falling back to 'unmanaged'"
    );
    Ok("unmanaged".into())
}

/// `PVE::LXC::Setup::Debian->new`: the major release from `/etc/debian_version`.
fn debian_version(root: &dyn RootFs) -> Result<u32, SetupError> {
    let line = root
        .read("/etc/debian_version")
        .and_then(|t| t.lines().next().map(str::to_string))
        .ok_or_else(|| SetupError("unable to read version info".into()))?;
    let mapped = match line.as_str() {
        "stretch/sid" => "9.1",
        "buster/sid" => "10",
        "bullseye/sid" => "11",
        "bookworm/sid" | "kali-rolling" => "12",
        "trixie/sid" => "13",
        "forky/sid" => "14",
        "duke/sid" => "15",
        other => other,
    };
    let digits: String = mapped.chars().take_while(char::is_ascii_digit).collect();
    let version: u32 = digits
        .parse()
        .map_err(|_| SetupError(format!("unable to parse version info '{mapped}'")))?;
    if version < 4 {
        return Err(SetupError(format!(
            "Container Debian version '{version}' is too old"
        )));
    }
    Ok(version)
}

/// One run of the setup code over a root file system: what it wrote so far is what it
/// reads back.
pub struct Setup<'a> {
    config: &'a BTreeMap<String, String>,
    root: &'a dyn RootFs,
    host_dns: &'a HostDns,
    written: BTreeMap<String, String>,
    changes: Vec<Change>,
}

impl<'a> Setup<'a> {
    fn new(
        config: &'a BTreeMap<String, String>,
        root: &'a dyn RootFs,
        host_dns: &'a HostDns,
    ) -> Setup<'a> {
        Setup {
            config,
            root,
            host_dns,
            written: BTreeMap::new(),
            changes: Vec::new(),
        }
    }

    fn read(&self, path: &str) -> Option<String> {
        self.written
            .get(path)
            .cloned()
            .or_else(|| self.root.read(path))
    }

    /// `ct_is_file_ignored`: a `.pve-ignore.NAME` beside the file keeps PVE's hands off it.
    fn ignored(&self, path: &str) -> bool {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        self.read(&format!("{dir}/.pve-ignore.{name}")).is_some()
    }

    fn set_contents(&mut self, path: &str, content: String, mode: u32) {
        if self.ignored(path) {
            return;
        }
        self.written.insert(path.to_string(), content.clone());
        self.changes.push(Change::Write {
            path: path.to_string(),
            content,
            mode,
        });
    }

    fn make_dir(&mut self, path: &str, mode: u32) {
        self.changes.push(Change::MakeDir {
            path: path.to_string(),
            mode,
        });
    }

    /// The Debian plugin's part of `pre_start_hook`: `/fastboot`, the network, the names.
    fn debian_start(&mut self) -> Result<(), SetupError> {
        let version = debian_version(self.root)?;
        self.set_contents("/fastboot", String::new(), 0o644);
        let old = self.read("/etc/network/interfaces");
        if let Some(text) =
            network::interfaces_file(self.config, version, old.as_deref()).map_err(SetupError)?
        {
            self.make_dir("/etc/network", 0o755);
            self.set_contents("/etc/network/interfaces", text, 0o644);
        }
        self.set_hostname();
        self.set_dns();
        Ok(())
    }
}

/// The container's OS type as the config names it (`ostype`; `unmanaged` when unset).
fn ostype(config: &BTreeMap<String, String>) -> &str {
    config.get("ostype").map_or("unmanaged", String::as_str)
}

/// Run the setup of `config`'s OS type, if it is one this code knows.
fn run<'a>(
    config: &'a BTreeMap<String, String>,
    root: &'a dyn RootFs,
    host_dns: &'a HostDns,
    before: impl FnOnce(&mut Setup<'a>) -> Result<(), SetupError>,
) -> Result<Vec<Change>, SetupError> {
    let mut s = Setup::new(config, root, host_dns);
    match ostype(config) {
        "unmanaged" => return Ok(Vec::new()),
        "debian" | "devuan" => {
            before(&mut s)?;
            s.debian_start()?;
        }
        other => {
            return Err(SetupError(format!(
                "setting up a container of OS type '{other}' is not supported here \
                 (debian, devuan and unmanaged are)"
            )));
        }
    }
    Ok(s.changes)
}

/// `pre_start_hook`: what PVE writes into the root file system before every start.
pub fn pre_start(
    config: &BTreeMap<String, String>,
    root: &dyn RootFs,
    host_dns: &HostDns,
) -> Result<Vec<Change>, SetupError> {
    run(config, root, host_dns, |_| Ok(()))
}

/// `post_create_hook`: root's SSH keys, then what every start writes.
pub fn post_create(
    config: &BTreeMap<String, String>,
    root: &dyn RootFs,
    host_dns: &HostDns,
    ssh_keys: Option<&str>,
) -> Result<Vec<Change>, SetupError> {
    run(config, root, host_dns, |s| match ssh_keys {
        Some(k) if !k.is_empty() => s.set_root_keys(k),
        _ => Ok(()),
    })
}

#[cfg(test)]
#[path = "setup_tests.rs"]
mod tests;
