//! S5: provisioning a netbooted node over SSH — partition and format its disk, install the
//! cluster service, its config and certificates onto the disk, and enable the first-boot
//! automation. The node is then restarted from the same netboot image with its disk attached;
//! the image's boot hook finds the disk (ext2 label [`DISK_LABEL`]), mounts it and runs
//! `boot.sh` from it, which starts etcd from the disk.
//!
//! Everything a node needs is checked ([`config::check_node`]) before the node is touched.

use std::fs;
use std::time::Duration;

use super::config::{self, HOSTS_FILE, NodeConfig, SECRETS_DIR, StageOptions, StagedCluster};
use super::error::ClusterError;
use super::etcd::{self, RaftTiming, sh_quote};
use super::tls::{self, CERT_MODE, ClusterTls, KEY_MODE, TlsFileNames};
use super::topology::{ClusterSpec, GuestLayout};
use super::transport::NodeShell;
use crate::mutants::{self, Mutant};

/// The file-system label the boot hook looks for.
pub const DISK_LABEL: &str = "cluster";
pub use super::topology::BOOT_SCRIPT_FILE;
/// What `boot.sh` prints on the console once etcd is started (the lab waits for it).
pub const BOOT_MARKER: &str = "cluster-boot: etcd started";
/// What `boot.sh`'s watcher prints once the local member commits a proposal (the cluster has
/// quorum). Lets a plain QEMU run, with no driver, time boot-to-quorum from the console alone.
pub const HEALTHY_MARKER: &str = "cluster-boot: member healthy";
/// What `boot.sh` prints when it cannot start the service.
pub const BOOT_FAILED_MARKER: &str = "cluster-boot: FAILED";

/// Where on a node the cluster's files go, and what starts the service at boot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Onto {
    /// A partition made on the node's blank second disk, labelled [`DISK_LABEL`]; the netboot
    /// image's boot hook mounts it and runs `boot.sh` from it.
    #[default]
    BlankDisk,
    /// A directory on a cloud image's persistent file system (the project's image mounts its
    /// data partition at `/data`), bound at the layout's mount point. A cloud-init per-boot
    /// script ([`PER_BOOT_SCRIPT`]) runs `boot.sh` on every boot, as it would on a real cloud
    /// image; the boot disk itself is never partitioned.
    CloudImage { dir: String },
    /// A container's root file system, which PVE keeps across its restarts: the files go into
    /// the layout's mount point as a plain directory, and [`RC_LOCAL`] runs `boot.sh` on every
    /// boot (Debian's `rc-local.service` runs it; so does vm-lab's container template's init).
    ContainerRoot,
}

impl Onto {
    /// The project's cloud image: `/data/cluster`.
    pub fn cloud_image() -> Self {
        Onto::CloudImage {
            dir: "/data/cluster".to_owned(),
        }
    }
}

/// Where cloud-init runs scripts on every boot (its `scripts-per-boot` module).
pub const PER_BOOT_SCRIPT: &str = "/var/lib/cloud/scripts/per-boot/50-cluster.sh";

/// What a container runs at the end of every boot, once its network is up (Debian's
/// `rc-local.service`, when the file is executable).
pub const RC_LOCAL: &str = "/etc/rc.local";

/// How to provision.
#[derive(Debug, Clone)]
pub struct ProvisionOptions {
    pub onto: Onto,
    /// The node's disk as the guest sees it; `None` picks the first of `/dev/vda`, `/dev/sda`.
    /// Only for [`Onto::BlankDisk`].
    pub disk: Option<String>,
    /// Size of the cluster partition. The rest of the disk stays unallocated: formatting all of
    /// a 100 GB sparse disk under TCG would write gigabytes of inode tables for nothing.
    pub partition_mib: u32,
    pub timing: RaftTiming,
    pub step_timeout: Duration,
}

impl Default for ProvisionOptions {
    fn default() -> Self {
        Self {
            onto: Onto::BlankDisk,
            disk: None,
            partition_mib: 1024,
            timing: RaftTiming::for_host(),
            step_timeout: Duration::from_secs(120),
        }
    }
}

/// The script that prepares where the cluster's files go ([`Onto`]) and mounts it at the
/// layout's mount point. It copies `etcd`/`etcdctl` from the node's image onto the disk, so the
/// service boots from the disk afterwards.
pub fn disk_script(layout: &GuestLayout, opts: &ProvisionOptions) -> String {
    match &opts.onto {
        Onto::BlankDisk => blank_disk_script(layout, opts),
        Onto::CloudImage { dir } => cloud_dir_script(layout, dir),
        Onto::ContainerRoot => container_dir_script(layout),
    }
}

/// [`Onto::ContainerRoot`]: the mount point made as a directory of the container's root.
fn container_dir_script(layout: &GuestLayout) -> String {
    format!(
        r#"set -u
fail() {{ code=$1; shift; echo "provision: $*" >&2; exit "$code"; }}
MNT={mnt}
for b in etcd etcdctl; do command -v $b >/dev/null 2>&1 || fail 22 "$b is not in the container's template"; done
mkdir -p {bin} {etc} {secrets} "$MNT/log" {data} || fail 25 "cannot create directories under $MNT"
chmod 700 {secrets} {data}
cp "$(command -v etcd)" "$(command -v etcdctl)" {bin}/ || fail 26 "cannot copy etcd into $MNT"
sync
echo "provision: $MNT on the container's root file system"
"#,
        mnt = sh_quote(&layout.mount),
        bin = sh_quote(&layout.bin_dir()),
        etc = sh_quote(&layout.etc_dir()),
        secrets = sh_quote(&layout.secrets_dir()),
        data = sh_quote(&layout.data_dir()),
    )
}

/// [`Onto::CloudImage`]: a directory on the image's persistent file system, bound at the mount
/// point; the per-boot directory made for [`PER_BOOT_SCRIPT`].
fn cloud_dir_script(layout: &GuestLayout, dir: &str) -> String {
    let per_boot = PER_BOOT_SCRIPT.rsplit_once('/').map_or("", |(d, _)| d);
    format!(
        r#"set -u
fail() {{ code=$1; shift; echo "provision: $*" >&2; exit "$code"; }}
DIR={dir}
MNT={mnt}
mounted() {{ awk -v m="$1" '$2 == m {{ f = 1 }} END {{ exit !f }}' /proc/mounts; }}
PARENT=$(dirname "$DIR")
# The disk first: an image keeps its programs on it, so without it they are missing too, and
# the missing disk is the cause to name.
mounted "$PARENT" || fail 20 "$PARENT is not mounted: the image has no persistent file system there"
for b in etcd etcdctl; do command -v $b >/dev/null 2>&1 || fail 22 "$b is not in the node's image"; done
mkdir -p "$DIR" "$MNT" || fail 25 "cannot create $DIR"
mounted "$MNT" || mount -o bind "$DIR" "$MNT" || fail 24 "cannot bind $DIR on $MNT"
mkdir -p {bin} {etc} {secrets} "$MNT/log" {data} {per_boot} || fail 25 "cannot create directories on $MNT"
chmod 700 {secrets} {data}
cp "$(command -v etcd)" "$(command -v etcdctl)" {bin}/ || fail 26 "cannot copy etcd onto the disk"
sync
echo "provision: $DIR bound on $MNT"
"#,
        dir = sh_quote(dir),
        mnt = sh_quote(&layout.mount),
        bin = sh_quote(&layout.bin_dir()),
        etc = sh_quote(&layout.etc_dir()),
        secrets = sh_quote(&layout.secrets_dir()),
        data = sh_quote(&layout.data_dir()),
        per_boot = sh_quote(per_boot),
    )
}

/// [`Onto::BlankDisk`]: partition and format the node's blank disk.
fn blank_disk_script(layout: &GuestLayout, opts: &ProvisionOptions) -> String {
    let disk = match &opts.disk {
        Some(d) => format!("DISK={}", sh_quote(d)),
        None => {
            "DISK=\nfor d in /dev/vda /dev/sda; do [ -b \"$d\" ] && { DISK=$d; break; }; done\n\
                 [ -n \"$DISK\" ] || fail 20 \"no disk found (looked for /dev/vda, /dev/sda)\""
                .to_owned()
        }
    };
    format!(
        r#"set -u
fail() {{ code=$1; shift; echo "provision: $*" >&2; exit "$code"; }}
{disk}
[ -b "$DISK" ] || fail 20 "$DISK is not a block device"
MNT={mnt}
for b in etcd etcdctl mkfs.ext4; do command -v $b >/dev/null 2>&1 || fail 22 "$b is not in the netboot image"; done
modprobe ext4 >/dev/null 2>&1 || true
umount "$MNT" >/dev/null 2>&1 || true
# one primary partition for the cluster; the rest of the disk stays free
printf 'o\nn\np\n1\n\n+{size}M\nw\n' | fdisk "$DISK" >/dev/null 2>&1
case "$DISK" in *[0-9]) PART=${{DISK}}p1 ;; *) PART=${{DISK}}1 ;; esac
i=0
while [ ! -b "$PART" ] && [ $i -lt 50 ]; do i=$((i+1)); partprobe "$DISK" >/dev/null 2>&1; sleep 0.2; done
[ -b "$PART" ] || fail 21 "partition $PART did not appear after partitioning $DISK"
# ext4 for its journal: nodes lose power in the fault scenarios, and ext2 comes back corrupt
mkfs.ext4 -q -F -L {label} -J size=16 -E lazy_itable_init=1,lazy_journal_init=1 "$PART" >/dev/null \
  || fail 23 "mkfs.ext4 $PART failed"
mkdir -p "$MNT" && mount "$PART" "$MNT" || fail 24 "cannot mount $PART on $MNT"
mkdir -p {bin} {etc} {secrets} "$MNT/log" {data} || fail 25 "cannot create directories on $MNT"
chmod 700 {secrets} {data}
cp "$(command -v etcd)" "$(command -v etcdctl)" {bin}/ || fail 26 "cannot copy etcd onto the disk"
sync
echo "provision: $PART formatted and mounted on $MNT"
"#,
        mnt = sh_quote(&layout.mount),
        size = opts.partition_mib,
        label = DISK_LABEL,
        bin = sh_quote(&layout.bin_dir()),
        etc = sh_quote(&layout.etc_dir()),
        secrets = sh_quote(&layout.secrets_dir()),
        data = sh_quote(&layout.data_dir()),
    )
}

/// The first-boot automation, installed on the disk. Run by the image's boot hook on every
/// boot; the first one bootstraps the member, later ones rejoin with the data on the disk.
pub fn boot_script(cfg: &NodeConfig, layout: &GuestLayout, timing: RaftTiming) -> String {
    let args = etcd::etcd_args(cfg, timing)
        .iter()
        .map(|a| format!("  {} \\\n", sh_quote(a)))
        .collect::<String>();
    let mnt = sh_quote(&layout.mount);
    let checks = [&cfg.tls.ca_file, &cfg.tls.cert_file, &cfg.tls.key_file]
        .iter()
        .map(|f| {
            format!(
                "[ -r {q} ] || fail \"{f} is missing (named by cluster-config.json)\"\n",
                q = sh_quote(f)
            )
        })
        .collect::<String>();
    format!(
        r#"#!/bin/sh
# Cluster first-boot automation for {node}, installed by provision-harness.
set -u
# the console only where it is a device: where /dev is a bare tmpfs (vm-lab's containers), a
# redirection would make a plain file of that name and the report would reach no one
say() {{ {{ [ -c /dev/console ] && echo "$*" > /dev/console; }} 2>/dev/null || echo "$*"; }}
fail() {{ say "{failed}: $*"; exit 1; }}
HERE=$(cd "$(dirname "$0")" && pwd)
MNT={mnt}
# the config names paths under $MNT: make the disk appear there whatever the hook mounted it on
if [ "$HERE" != "$MNT" ]; then mkdir -p "$MNT" && mount -o bind "$HERE" "$MNT" || fail "cannot bind $HERE on $MNT"; fi
cp {etc}/{hosts} /etc/hosts || fail "no hosts mapping on the disk"
{checks}mkdir -p {data} "$MNT/log" && chmod 700 {data}
if [ -d {data}/member ]; then say "cluster-boot: {node} rejoins with the data on its disk"
else say "cluster-boot: {node} first boot, bootstrapping cluster {cluster}"; fi
setsid {bin}/etcd \
{args}  >> {log} 2>&1 < /dev/null &
echo $! > /run/etcd.pid 2>/dev/null || true
say "{marker} (pid $!)"
# watcher: report on the console when this member first sees a healthy (quorate) cluster
(
  i=0
  while [ $i -lt 900 ]; do
    if {health} >/dev/null 2>&1; then say "{healthy} after ${{i}} s"; exit 0; fi
    i=$((i+1)); sleep 1
  done
  say "cluster-boot: member not healthy after 900 s"
) < /dev/null > /dev/null 2>&1 &
"#,
        node = cfg.node_id,
        failed = BOOT_FAILED_MARKER,
        marker = BOOT_MARKER,
        healthy = HEALTHY_MARKER,
        health = etcd::etcdctl(cfg, layout, "endpoint health"),
        cluster = cfg.cluster_name,
        etc = sh_quote(&layout.etc_dir()),
        hosts = HOSTS_FILE,
        data = sh_quote(&cfg.data_dir),
        bin = sh_quote(&layout.bin_dir()),
        log = sh_quote(&layout.log_file()),
    )
}

/// S2's check: every node answers over SSH as itself (its hostname is its name), in parallel.
pub async fn check_hostnames<S: NodeShell>(
    shells: &[S],
    timeout: Duration,
) -> Result<(), ClusterError> {
    let checks = shells.iter().map(|s| async move {
        let out = s
            .run("hostname", timeout)
            .await?
            .check(s.node(), "hostname over SSH")?;
        if out.stdout.trim() != s.node() {
            return Err(ClusterError::Remote {
                node: s.node().to_owned(),
                step: "hostname over SSH".into(),
                code: 0,
                detail: format!("answered as {:?}", out.stdout.trim()),
            });
        }
        Ok(())
    });
    for r in futures::future::join_all(checks).await {
        r?;
    }
    Ok(())
}

/// S4: stages every node's config, hosts mapping and secrets under `dir`, checks them, and adds
/// each node's first-boot script, so a user's own provisioner can install it as is.
pub fn stage_with_boot_scripts(
    cluster: &ClusterSpec,
    layout: &GuestLayout,
    tls: &ClusterTls,
    dir: &std::path::Path,
    opts: StageOptions,
    timing: RaftTiming,
) -> Result<(StagedCluster, Vec<NodeConfig>), ClusterError> {
    let staged = config::stage(cluster, layout, tls, dir, opts)?;
    let configs = config::check_all(&staged)?;
    for cfg in &configs {
        let p = staged.node_dir(&cfg.node_id).join(BOOT_SCRIPT_FILE);
        tls::write_with_mode(&p, &boot_script(cfg, layout, timing), 0o755)?;
    }
    Ok((staged, configs))
}

/// One file to put on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallFile {
    pub remote: String,
    pub contents: Vec<u8>,
    pub mode: u32,
}

/// Every file S5 installs on one node (config, hosts, certificates, boot script, and the hook
/// that runs it at boot: cloud-init's per-boot script on a cloud image, `/etc/rc.local` in a
/// container), read from the staged directory after it passed its checks.
pub fn install_files(
    staged: &StagedCluster,
    cfg: &NodeConfig,
    opts: &ProvisionOptions,
) -> Result<Vec<InstallFile>, ClusterError> {
    let timing = opts.timing;
    let layout = &staged.layout;
    let dir = staged.node_dir(&cfg.node_id);
    let read = |p: std::path::PathBuf| fs::read(&p).map_err(|e| ClusterError::io(&p, e));
    let mut files = vec![
        InstallFile {
            remote: layout.config_file(),
            contents: read(dir.join(config::CONFIG_FILE))?,
            mode: 0o644,
        },
        InstallFile {
            remote: format!("{}/{HOSTS_FILE}", layout.etc_dir()),
            contents: read(dir.join(HOSTS_FILE))?,
            mode: 0o644,
        },
    ];
    for (path, mode) in [
        (&cfg.tls.ca_file, CERT_MODE),
        (&cfg.tls.cert_file, CERT_MODE),
        (&cfg.tls.key_file, KEY_MODE),
    ] {
        let base = path.rsplit('/').next().unwrap_or(path);
        let remote = if mutants::active(Mutant::CertsUnderWrongNames) {
            seed_original_name(path, base)
        } else {
            path.clone()
        };
        files.push(InstallFile {
            remote,
            contents: read(dir.join(SECRETS_DIR).join(base))?,
            mode,
        });
    }
    if mutants::active(Mutant::SkipsFirstBootScript) {
        return Ok(files);
    }
    files.push(InstallFile {
        remote: layout.boot_script(),
        contents: boot_script(cfg, layout, timing).into_bytes(),
        mode: 0o755,
    });
    let hook = |remote: &str, boot: String| {
        InstallFile {
        remote: remote.to_owned(),
        contents: format!(
            "#!/bin/sh\n# Starts the cluster member on every boot (installed by provision-harness).\nexec {boot}\n"
        )
        .into_bytes(),
        mode: 0o755,
    }
    };
    match &opts.onto {
        Onto::CloudImage { dir } => files.push(hook(
            PER_BOOT_SCRIPT,
            format!("{}/{BOOT_SCRIPT_FILE}", sh_quote(dir)),
        )),
        Onto::ContainerRoot => files.push(hook(RC_LOCAL, sh_quote(&layout.boot_script()))),
        Onto::BlankDisk => {}
    }
    Ok(files)
}

/// `path` with its file name `base` replaced by the seed's first name for it (the mutant
/// [`Mutant::CertsUnderWrongNames`]): `ca.crt` → `ca-cert.pem`, `*.key` → `key.pem`, other
/// certificates → `cert.pem`.
fn seed_original_name(path: &str, base: &str) -> String {
    let seed = TlsFileNames::seed_original();
    let name = if base == TlsFileNames::for_node("").ca {
        seed.ca
    } else if base.ends_with(".key") {
        seed.key
    } else {
        seed.cert
    };
    format!("{}{name}", path.strip_suffix(base).unwrap_or(""))
}

/// Provisions one node: checks its staged config, prepares its disk, installs every file and
/// verifies what landed on the disk. The caller restarts the node afterwards.
#[tracing::instrument(name = "provision node", skip_all, err(Display), fields(node = shell.node()))]
pub async fn provision_node<S: NodeShell>(
    staged: &StagedCluster,
    shell: &S,
    opts: &ProvisionOptions,
) -> Result<NodeConfig, ClusterError> {
    let node = staged.spec.node(shell.node())?.clone();
    let cfg = config::check_node(staged, &node)?;
    let t = opts.step_timeout;
    shell
        .run(&disk_script(&staged.layout, opts), t)
        .await?
        .check(
            &node.name,
            match opts.onto {
                Onto::BlankDisk => "partition and format the disk",
                Onto::CloudImage { .. } => "prepare the cluster directory on the disk",
                Onto::ContainerRoot => "prepare the cluster directory in the container",
            },
        )?;
    let files = install_files(staged, &cfg, opts)?;
    for f in &files {
        shell.write_file(&f.remote, &f.contents, f.mode, t).await?;
    }
    // Read back what the first boot will read: names and modes as the config expects.
    let listing = files
        .iter()
        .map(|f| format!("stat -c '%a %n' {}", sh_quote(&f.remote)))
        .collect::<Vec<_>>()
        .join(" && ");
    let out = shell
        .run(&format!("{listing} && sync"), t)
        .await?
        .check(&node.name, "verify the installed files")?;
    for f in &files {
        let want = format!("{:o} {}", f.mode, f.remote);
        if !out.stdout.lines().any(|l| l.trim() == want) {
            return Err(ClusterError::Remote {
                node: node.name.clone(),
                step: "verify the installed files".into(),
                code: 0,
                detail: format!(
                    "expected \"{want}\", the node reports: {}",
                    out.stdout.trim()
                ),
            });
        }
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Mutex;

    use super::*;
    use crate::cluster::config::{StageOptions, stage};
    use crate::cluster::tls;
    use crate::cluster::topology::ClusterSpec;
    use crate::cluster::transport::CommandOutput;

    /// Records what the provisioner does and answers like a node would.
    struct FakeNode {
        name: String,
        scripts: Mutex<Vec<String>>,
        files: Mutex<Vec<(String, Vec<u8>, u32)>>,
        fail_disk: bool,
    }

    impl FakeNode {
        fn new(name: &str) -> Self {
            Self {
                name: name.into(),
                scripts: Mutex::default(),
                files: Mutex::default(),
                fail_disk: false,
            }
        }
    }

    impl NodeShell for FakeNode {
        fn node(&self) -> &str {
            &self.name
        }
        async fn run(&self, script: &str, _t: Duration) -> Result<CommandOutput, ClusterError> {
            self.scripts.lock().unwrap().push(script.to_owned());
            if script.contains("mkfs.ext4") && self.fail_disk {
                return Ok(CommandOutput {
                    code: 21,
                    stderr: "provision: partition /dev/vda1 did not appear".into(),
                    ..Default::default()
                });
            }
            let stdout = if script.starts_with("stat") {
                self.files
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(p, _, m)| format!("{m:o} {p}\n"))
                    .collect()
            } else {
                String::new()
            };
            Ok(CommandOutput {
                code: 0,
                stdout,
                stderr: String::new(),
            })
        }
        async fn write_file(
            &self,
            path: &str,
            contents: &[u8],
            mode: u32,
            _t: Duration,
        ) -> Result<(), ClusterError> {
            self.files
                .lock()
                .unwrap()
                .push((path.into(), contents.to_vec(), mode));
            Ok(())
        }
    }

    fn staged(opts: StageOptions) -> (tempfile::TempDir, StagedCluster) {
        let spec = ClusterSpec::seed_t036();
        let t = tls::generate(&spec).unwrap();
        let d = tempfile::tempdir().unwrap();
        let s = stage(&spec, &GuestLayout::default(), &t, d.path(), opts).unwrap();
        (d, s)
    }

    #[tokio::test]
    async fn provisions_disk_then_files_with_the_expected_names_and_modes() {
        let (_d, s) = staged(StageOptions::default());
        let node = FakeNode::new("node02");
        let cfg = provision_node(&s, &node, &ProvisionOptions::default())
            .await
            .unwrap();
        assert_eq!(cfg.node_id, "node02");
        let scripts = node.scripts.lock().unwrap();
        assert!(
            scripts[0].contains("mkfs.ext4 -q -F -L cluster"),
            "{}",
            scripts[0]
        );
        let files = node.files.lock().unwrap();
        let modes: Vec<(String, u32)> = files.iter().map(|(p, _, m)| (p.clone(), *m)).collect();
        assert_eq!(
            modes,
            vec![
                ("/cluster/etc/cluster-config.json".into(), 0o644),
                ("/cluster/etc/hosts".into(), 0o644),
                ("/cluster/secrets/ca.crt".into(), 0o644),
                ("/cluster/secrets/node02.crt".into(), 0o644),
                ("/cluster/secrets/node02.key".into(), 0o400),
                ("/cluster/boot.sh".into(), 0o755),
            ]
        );
        let hosts = String::from_utf8(files[1].1.clone()).unwrap();
        assert!(hosts.contains("192.168.100.13 node03"), "{hosts}");
        let boot = String::from_utf8(files[5].1.clone()).unwrap();
        assert!(boot.contains("--name=node02"), "{boot}");
        assert!(boot.contains(BOOT_MARKER));
    }

    /// The remote paths a provisioning run installed on `node`.
    async fn installed(mutant: Option<crate::mutants::Mutant>) -> Vec<String> {
        let (_d, s) = staged(StageOptions::default());
        let node = FakeNode::new("node01");
        crate::mutants::run_as(mutant, None, async {
            provision_node(&s, &node, &ProvisionOptions::default())
                .await
                .unwrap()
        })
        .await;
        let files = node.files.lock().unwrap();
        files.iter().map(|(p, _, _)| p.clone()).collect()
    }

    #[tokio::test]
    async fn lab_mutants_change_only_what_they_name_and_only_in_their_run() {
        let real = installed(None).await;
        assert!(real.contains(&"/cluster/boot.sh".to_owned()), "{real:?}");
        let no_boot = installed(Some(Mutant::SkipsFirstBootScript)).await;
        assert_eq!(no_boot, real[..real.len() - 1], "{no_boot:?}");
        let misnamed = installed(Some(Mutant::CertsUnderWrongNames)).await;
        assert_eq!(
            misnamed[2..5],
            [
                "/cluster/secrets/ca-cert.pem",
                "/cluster/secrets/cert.pem",
                "/cluster/secrets/key.pem"
            ],
            "{misnamed:?}"
        );
        assert_eq!(misnamed[..2], real[..2]);
        assert_eq!(misnamed[5..], real[5..]);
        assert_eq!(installed(None).await, real);
    }

    #[tokio::test]
    async fn misnamed_certificates_stop_before_the_node_is_touched() {
        let (_d, s) = staged(StageOptions {
            seed_original_cert_names: true,
            ..Default::default()
        });
        let node = FakeNode::new("node01");
        let e = provision_node(&s, &node, &ProvisionOptions::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("node01: TLS files: ") && e.contains("ca.crt does not exist"),
            "{e}"
        );
        assert!(node.scripts.lock().unwrap().is_empty());
        assert!(node.files.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failing_disk_step_names_node_and_step() {
        let (_d, s) = staged(StageOptions::default());
        let mut node = FakeNode::new("node03");
        node.fail_disk = true;
        let e = provision_node(&s, &node, &ProvisionOptions::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("node03: step partition and format the disk failed (exit 21)"),
            "{e}"
        );
        assert!(node.files.lock().unwrap().is_empty());
    }

    #[test]
    fn boot_script_checks_the_files_the_config_names_and_binds_the_mount() {
        let spec = ClusterSpec::seed_t036();
        let cfg = config::node_config(&spec, &GuestLayout::default(), &spec.nodes[0]);
        let b = boot_script(&cfg, &GuestLayout::default(), RaftTiming::default());
        assert!(b.starts_with("#!/bin/sh\n"));
        assert!(
            b.contains("[ -r /cluster/secrets/node01.key ] || fail"),
            "{b}"
        );
        assert!(b.contains("cp /cluster/etc/hosts /etc/hosts"), "{b}");
        assert!(b.contains("mount -o bind"), "{b}");
        assert!(
            b.contains("setsid /cluster/bin/etcd \\\n  --name=node01 \\\n"),
            "{b}"
        );
    }

    #[test]
    fn disk_script_uses_the_given_disk_and_partition_size() {
        let s = disk_script(
            &GuestLayout::default(),
            &ProvisionOptions {
                disk: Some("/dev/nvme0n1".into()),
                partition_mib: 256,
                ..Default::default()
            },
        );
        assert!(s.contains("DISK=/dev/nvme0n1"), "{s}");
        assert!(s.contains("+256M"), "{s}");
        assert!(s.contains("*[0-9]) PART=${DISK}p1"), "{s}");
    }
}
