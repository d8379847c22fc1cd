//! cloud-init inside the simulated guest: at a boot from an image that has cloud-init, the
//! cloud-init drive's user-data is applied once per instance (the `instance-id` PVE writes
//! into the meta-data changes whenever the user or network data does): the hostname, the
//! default user's and other users' SSH keys, `write_files`, then in the final stage the
//! packages and `runcmd`. What was applied is kept on the guest ([`CloudInitRun`]) and in
//! its files (`/var/lib/cloud/instance/user-data.txt`, `/var/log/cloud-init-output.log`,
//! `authorized_keys`, `/etc/hostname`), so a test can claim the user-data reached the guest.
//!
//! The guest agent follows the image: it answers after the boot delay when the image has it
//! installed; when the user-data installs `qemu-guest-agent` and a command starts it, once the
//! package installs are done (an apt run's time: [`APT_UPDATE_SECS`] and
//! [`SECS_PER_PACKAGE`] each); installed but not started, from the next boot on (Debian's and
//! Ubuntu's unit is started by udev at boot, not by the package's install).
//! Deviations: packages install only when the VM has an address (a DHCP lease or a static
//! `ip=`); no mirror is consulted, so every package name installs.

use std::collections::BTreeMap;

use super::cloud_config::{CloudInitRun, Format, UserData, parse};
use super::guest_os::GuestOs;
use crate::storage::image_facts::ImageFacts;

/// `apt-get update` before the first package install (or when asked for).
pub const APT_UPDATE_SECS: f64 = 8.0;
/// One package's download and install.
pub const SECS_PER_PACKAGE: f64 = 4.0;
/// `package_upgrade: true` (PVE's generated user-data asks for it unless `ciupgrade=0`).
pub const UPGRADE_SECS: f64 = 30.0;

/// The agent's package, as Debian, Ubuntu and Fedora name it.
const AGENT_PACKAGE: &str = "qemu-guest-agent";

/// One boot of a simulated guest.
pub struct Boot<'a> {
    pub facts: &'a ImageFacts,
    /// The cloud-init drive's user-data, its source and instance id; `None` without a drive.
    pub seed: Option<&'a Seed>,
    /// The VM has an address (packages can be fetched).
    pub network: bool,
    pub now: f64,
    pub boot_delay: f64,
}

/// What PVE put on the cloud-init drive.
#[derive(Clone, Debug, PartialEq)]
pub struct Seed {
    pub user_data: String,
    pub source: String,
    pub instance_id: String,
}

/// What a boot did about the agent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BootOutcome {
    /// Seconds after the boot began when the agent answers; `None`: not this boot.
    pub agent_after: Option<f64>,
    /// cloud-init installed the agent's package (the boot disk has it from now on).
    pub installed_agent: bool,
}

fn starts_agent(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let names_agent = words
        .iter()
        .any(|w| w.trim_end_matches(".service") == AGENT_PACKAGE);
    let systemctl = words.contains(&"systemctl")
        && (words.contains(&"start") || words.contains(&"restart") || words.contains(&"--now"));
    let service =
        words.contains(&"service") && (words.contains(&"start") || words.contains(&"restart"));
    names_agent && (systemctl || service)
}

fn installs_agent(cmd: &str) -> bool {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let manager = ["apt", "apt-get", "dnf", "yum", "zypper"]
        .iter()
        .any(|m| words.contains(m));
    manager && words.contains(&"install") && words.contains(&AGENT_PACKAGE)
}

/// The user cloud-init's `users: [default]` makes when the user-data names none.
fn image_default_user(facts: &ImageFacts) -> &'static str {
    match facts.os.as_deref().unwrap_or("") {
        os if os.starts_with("debian") => "debian",
        os if os.starts_with("fedora") => "fedora",
        os if os.starts_with("ubuntu") || os.is_empty() => "ubuntu",
        _ => "cloud-user",
    }
}

fn home_of(user: &str) -> String {
    if user == "root" {
        "/root".into()
    } else {
        format!("/home/{user}")
    }
}

impl GuestOs {
    fn write_text(&mut self, path: &str, text: &str) {
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.mkdir_all(if dir.is_empty() { "/" } else { dir });
        }
        self.files
            .insert(path.to_string(), text.as_bytes().to_vec());
    }

    /// The guest boots: cloud-init applies a new instance's user-data; the outcome says
    /// when the agent answers.
    pub fn boot(&mut self, b: &Boot<'_>) -> BootOutcome {
        let image_agent = b.facts.guest_agent;
        let mut outcome = BootOutcome {
            agent_after: image_agent.then_some(b.boot_delay),
            installed_agent: false,
        };
        let Some(seed) = b.seed.filter(|_| b.facts.cloud_init) else {
            return outcome;
        };
        if self
            .cloud_init
            .as_ref()
            .is_some_and(|r| r.instance_id == seed.instance_id)
        {
            return outcome;
        }
        let ud = parse(&seed.user_data);
        let run = self.apply_instance(b, seed, &ud);
        let agent_installed = run.packages.iter().any(|p| p == AGENT_PACKAGE)
            || (b.network && ud.runcmd.iter().any(|c| installs_agent(c)));
        if agent_installed && !image_agent {
            outcome.installed_agent = true;
            if ud.runcmd.iter().any(|c| starts_agent(c)) {
                outcome.agent_after = Some(run.finished_at - b.now);
            }
        }
        self.cloud_init = Some(run);
        outcome
    }

    fn apply_instance(&mut self, b: &Boot<'_>, seed: &Seed, ud: &UserData) -> CloudInitRun {
        let format = match ud.format {
            Some(Format::CloudConfig) => "cloud-config",
            Some(Format::Script) => "script",
            Some(Format::Empty) | None => "empty",
            Some(Format::Unhandled) => "unhandled",
        };
        let mut run = CloudInitRun {
            instance_id: seed.instance_id.clone(),
            source: seed.source.clone(),
            user_data: seed.user_data.clone(),
            format: format.into(),
            started_at: b.now,
            finished_at: b.now + b.boot_delay,
            ..CloudInitRun::default()
        };
        let mut log = vec![format!(
            "Cloud-init v. 24.4 running 'init' at boot. Instance {}.",
            seed.instance_id
        )];
        if ud.format == Some(Format::Unhandled) {
            log.push(
                "Unhandled non-multipart (text/x-not-multipart) userdata: applied nothing".into(),
            );
        }
        if let Some(e) = &ud.error {
            run.errors.push(e.clone());
            log.push(e.clone());
        }
        if let Some(h) = &ud.hostname {
            self.write_text("/etc/hostname", &format!("{h}\n"));
            run.hostname = Some(h.clone());
        }
        let default_user = ud
            .user
            .clone()
            .unwrap_or_else(|| image_default_user(b.facts).to_string());
        let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
        if !ud.ssh_keys.is_empty() {
            keys.insert(default_user, ud.ssh_keys.clone());
        }
        for (user, k) in &ud.users {
            keys.entry(user.clone())
                .or_default()
                .extend(k.iter().cloned());
        }
        for (user, k) in &keys {
            let path = format!("{}/.ssh/authorized_keys", home_of(user));
            self.write_text(&path, &(k.join("\n") + "\n"));
        }
        run.ssh_keys = keys;
        for (path, content) in &ud.write_files {
            self.write_text(path, content);
            run.files.push(path.clone());
        }
        let wants_apt = ud.package_update || ud.package_upgrade || !ud.packages.is_empty();
        let mut secs = b.boot_delay;
        if wants_apt && !b.network {
            let e = "Failed to install packages: apt-get update: Temporary failure resolving the mirror (no network)".to_string();
            log.push(e.clone());
            run.errors.push(e);
        } else if wants_apt {
            secs += APT_UPDATE_SECS;
            if ud.package_upgrade {
                secs += UPGRADE_SECS;
            }
            secs += SECS_PER_PACKAGE * ud.packages.len() as f64;
            for p in &ud.packages {
                log.push(format!("Setting up {p} ..."));
            }
            run.packages = ud.packages.clone();
        }
        for c in &ud.runcmd {
            log.push(format!("+ {c}"));
            if installs_agent(c) && b.network {
                secs += APT_UPDATE_SECS + SECS_PER_PACKAGE;
            }
        }
        run.commands = ud.runcmd.clone();
        run.finished_at = b.now + secs;
        log.push(format!(
            "Cloud-init v. 24.4 finished. Datasource DataSourceNoCloud. Up {secs:.2} seconds"
        ));
        self.write_text("/var/lib/cloud/instance/user-data.txt", &seed.user_data);
        self.write_text("/var/log/cloud-init-output.log", &(log.join("\n") + "\n"));
        run
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const SEED_UD: &str = "#cloud-config\nhostname: web\npackage_update: true\npackages:\n  - qemu-guest-agent\n  - curl\nruncmd:\n  - systemctl enable --now qemu-guest-agent\n";

    fn ubuntu() -> ImageFacts {
        ImageFacts {
            os: Some("ubuntu-22.04".into()),
            cloud_init: true,
            guest_agent: false,
        }
    }

    fn seed(ud: &str, id: &str) -> Seed {
        Seed {
            user_data: ud.into(),
            source: "cicustom user=local:snippets/web-user.yaml".into(),
            instance_id: id.into(),
        }
    }

    fn boot<'a>(facts: &'a ImageFacts, seed: Option<&'a Seed>, network: bool) -> Boot<'a> {
        Boot {
            facts,
            seed,
            network,
            now: 100.0,
            boot_delay: 25.0,
        }
    }

    #[test]
    fn user_data_that_installs_and_starts_the_agent_brings_it_up_after_the_installs() {
        let (f, s) = (ubuntu(), seed(SEED_UD, "i-1"));
        let mut g = GuestOs::default();
        let out = g.boot(&boot(&f, Some(&s), true));
        assert!(out.installed_agent);
        assert_eq!(
            out.agent_after,
            Some(25.0 + APT_UPDATE_SECS + 2.0 * SECS_PER_PACKAGE)
        );
        let run = g.cloud_init.clone().unwrap();
        assert_eq!(run.packages, ["qemu-guest-agent", "curl"]);
        assert_eq!(run.hostname.as_deref(), Some("web"));
        assert_eq!(
            g.files["/var/lib/cloud/instance/user-data.txt"],
            SEED_UD.as_bytes()
        );
        // The same instance on the next boot: nothing applied again.
        let again = g.boot(&boot(&f, Some(&s), true));
        assert!(!again.installed_agent);
    }

    #[test]
    fn pve_generated_user_data_leaves_an_image_without_the_agent_silent() {
        let f = ubuntu();
        let s = seed(
            "#cloud-config\nhostname: web\nuser: admin\nssh_authorized_keys:\n  - ssh-ed25519 AAAA k\npackage_upgrade: true\n",
            "i-2",
        );
        let mut g = GuestOs::default();
        let out = g.boot(&boot(&f, Some(&s), true));
        assert_eq!(out.agent_after, None);
        assert!(!out.installed_agent);
        assert_eq!(
            g.files["/home/admin/.ssh/authorized_keys"],
            b"ssh-ed25519 AAAA k\n"
        );
    }

    #[test]
    fn installed_but_not_started_waits_for_the_next_boot_and_no_network_installs_nothing() {
        let f = ubuntu();
        let s = seed("#cloud-config\npackages: [qemu-guest-agent]\n", "i-3");
        let mut g = GuestOs::default();
        let out = g.boot(&boot(&f, Some(&s), true));
        assert_eq!((out.agent_after, out.installed_agent), (None, true));
        let mut offline = GuestOs::default();
        let out = offline.boot(&boot(&f, Some(&s), false));
        assert_eq!((out.agent_after, out.installed_agent), (None, false));
        assert!(offline.cloud_init.unwrap().errors[0].contains("no network"));
    }

    #[test]
    fn an_image_with_the_agent_or_without_cloud_init() {
        let with_agent = ImageFacts {
            guest_agent: true,
            ..ubuntu()
        };
        let mut g = GuestOs::default();
        assert_eq!(
            g.boot(&boot(&with_agent, None, true)).agent_after,
            Some(25.0)
        );
        let no_ci = ImageFacts {
            cloud_init: false,
            ..ubuntu()
        };
        let s = seed(SEED_UD, "i-4");
        let mut g = GuestOs::default();
        assert_eq!(g.boot(&boot(&no_ci, Some(&s), true)).agent_after, None);
        assert!(g.cloud_init.is_none());
    }

    #[test]
    fn commands_that_start_or_install_the_agent() {
        assert!(starts_agent("systemctl enable --now qemu-guest-agent"));
        assert!(starts_agent("systemctl start qemu-guest-agent.service"));
        assert!(starts_agent("service qemu-guest-agent restart"));
        assert!(!starts_agent("systemctl enable qemu-guest-agent"));
        assert!(installs_agent("apt-get install -y qemu-guest-agent"));
        assert!(!installs_agent("apt-get remove qemu-guest-agent"));
    }
}
