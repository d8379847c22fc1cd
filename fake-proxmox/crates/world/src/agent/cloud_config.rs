//! User-data as cloud-init reads it, reduced to what the simulated guest acts on: the
//! hostname, the default user and its SSH keys, packages, commands, files.
//!
//! cloud-init tells user-data apart by its first line: `#cloud-config` is YAML config,
//! `#!` a script run once per instance; anything else is not handled (cloud-init logs
//! "Unhandled non-multipart (text/x-not-multipart) userdata" and applies nothing from it).
//! MIME multipart and `#include` are not read here (deviation: they apply nothing).

use serde_norway::Value;

/// What kind of user-data a text is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    CloudConfig,
    Script,
    Empty,
    /// Neither: cloud-init ignores it.
    Unhandled,
}

/// The parts of user-data the simulated guest applies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserData {
    pub format: Option<Format>,
    /// Why a `#cloud-config` document could not be read (cloud-init then applies none of it).
    pub error: Option<String>,
    pub hostname: Option<String>,
    /// The default user's name (`user:`), when set.
    pub user: Option<String>,
    /// Keys for the default user (`ssh_authorized_keys:`).
    pub ssh_keys: Vec<String>,
    /// Users from `users:` (other than `default`) with their keys.
    pub users: Vec<(String, Vec<String>)>,
    pub package_update: bool,
    pub package_upgrade: bool,
    pub packages: Vec<String>,
    /// `runcmd` entries as shell lines (list entries joined with spaces), or the script's
    /// lines for a `#!` script.
    pub runcmd: Vec<String>,
    /// `write_files`: path and content (plain text only).
    pub write_files: Vec<(String, String)>,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::Sequence(items)) => items.iter().filter_map(scalar).collect(),
        Some(v) => scalar(v).into_iter().collect(),
        None => Vec::new(),
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn truthy(v: Option<&Value>) -> bool {
    match v {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => matches!(s.to_ascii_lowercase().as_str(), "true" | "yes" | "1"),
        _ => false,
    }
}

/// `packages:` entries: a name, or `[name, version]`.
fn packages(v: Option<&Value>) -> Vec<String> {
    let Some(Value::Sequence(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|p| match p {
            Value::Sequence(pair) => pair.first().and_then(scalar),
            other => scalar(other),
        })
        .collect()
}

/// `runcmd:` entries: a shell line, or an argv list.
fn runcmd(v: Option<&Value>) -> Vec<String> {
    let Some(Value::Sequence(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|c| match c {
            Value::Sequence(argv) => {
                Some(argv.iter().filter_map(scalar).collect::<Vec<_>>().join(" "))
            }
            other => scalar(other),
        })
        .collect()
}

fn users(v: Option<&Value>) -> Vec<(String, Vec<String>)> {
    let Some(Value::Sequence(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|u| match u {
            Value::Mapping(m) => {
                let name = m.get("name").and_then(scalar)?;
                Some((name, strings(m.get("ssh_authorized_keys"))))
            }
            _ => None,
        })
        .collect()
}

fn write_files(v: Option<&Value>) -> Vec<(String, String)> {
    let Some(Value::Sequence(items)) = v else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|f| {
            let m = f.as_mapping()?;
            let path = m.get("path").and_then(scalar)?;
            let encoded = m
                .get("encoding")
                .and_then(scalar)
                .is_some_and(|e| e != "text/plain");
            let content = if encoded {
                String::new()
            } else {
                m.get("content").and_then(scalar).unwrap_or_default()
            };
            Some((path, content))
        })
        .collect()
}

/// Read user-data as cloud-init would.
pub fn parse(text: &str) -> UserData {
    let first = text.lines().next().unwrap_or("").trim_end();
    if text.trim().is_empty() {
        return UserData {
            format: Some(Format::Empty),
            ..UserData::default()
        };
    }
    if first.starts_with("#!") {
        return UserData {
            format: Some(Format::Script),
            runcmd: text
                .lines()
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_string)
                .collect(),
            ..UserData::default()
        };
    }
    if first != "#cloud-config" {
        return UserData {
            format: Some(Format::Unhandled),
            ..UserData::default()
        };
    }
    let doc: Value = match serde_norway::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return UserData {
                format: Some(Format::CloudConfig),
                error: Some(format!("Failed loading yaml blob. {e}")),
                ..UserData::default()
            };
        }
    };
    let Some(m) = doc.as_mapping() else {
        return UserData {
            format: Some(Format::CloudConfig),
            error: (!doc.is_null()).then(|| "cloud-config is not a mapping".to_string()),
            ..UserData::default()
        };
    };
    let user = match m.get("user") {
        Some(Value::Mapping(u)) => u.get("name").and_then(scalar),
        other => other.and_then(scalar),
    };
    UserData {
        format: Some(Format::CloudConfig),
        error: None,
        hostname: m.get("hostname").and_then(scalar),
        user,
        ssh_keys: strings(m.get("ssh_authorized_keys")),
        users: users(m.get("users")),
        package_update: truthy(m.get("package_update")) || truthy(m.get("apt_update")),
        package_upgrade: truthy(m.get("package_upgrade")) || truthy(m.get("apt_upgrade")),
        packages: packages(m.get("packages")),
        runcmd: runcmd(m.get("runcmd")),
        write_files: write_files(m.get("write_files")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_seed_cloud_config_installs_and_starts_the_agent() {
        let u = parse(
            "#cloud-config\nhostname: basic-vm\npackage_update: true\npackages:\n  - qemu-guest-agent\n  - curl\nruncmd:\n  - systemctl enable --now qemu-guest-agent\n",
        );
        assert_eq!(u.format, Some(Format::CloudConfig));
        assert_eq!(u.hostname.as_deref(), Some("basic-vm"));
        assert!(u.package_update);
        assert_eq!(u.packages, ["qemu-guest-agent", "curl"]);
        assert_eq!(u.runcmd, ["systemctl enable --now qemu-guest-agent"]);
    }

    #[test]
    fn argv_commands_versioned_packages_users_and_files() {
        let u = parse(
            "#cloud-config\nuser: admin\nssh_authorized_keys: [ssh-ed25519 AAAA a@b]\nusers:\n  - default\n  - name: ops\n    ssh_authorized_keys: [ssh-rsa BBBB o@p]\npackages:\n  - [nginx, 1.18]\nruncmd:\n  - [systemctl, start, nginx]\nwrite_files:\n  - path: /etc/motd\n    content: hello\n",
        );
        assert_eq!(u.user.as_deref(), Some("admin"));
        assert_eq!(u.ssh_keys, ["ssh-ed25519 AAAA a@b"]);
        assert_eq!(
            u.users,
            [("ops".to_string(), vec!["ssh-rsa BBBB o@p".to_string()])]
        );
        assert_eq!(u.packages, ["nginx"]);
        assert_eq!(u.runcmd, ["systemctl start nginx"]);
        assert_eq!(
            u.write_files,
            [("/etc/motd".to_string(), "hello".to_string())]
        );
    }

    #[test]
    fn scripts_unhandled_text_and_broken_yaml() {
        let s = parse("#!/bin/sh\napt-get install -y qemu-guest-agent\n# note\n");
        assert_eq!(s.format, Some(Format::Script));
        assert_eq!(s.runcmd, ["apt-get install -y qemu-guest-agent"]);
        assert_eq!(parse("packages: [x]\n").format, Some(Format::Unhandled));
        assert_eq!(parse("").format, Some(Format::Empty));
        let bad = parse("#cloud-config\npackages: [x\n");
        assert!(bad.error.unwrap().starts_with("Failed loading yaml blob."));
        assert!(bad.packages.is_empty());
    }
}
