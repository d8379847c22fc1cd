//! vm-lab: a rootless QEMU lab driver for N-node clusters on a multicast-socket L2.
//!
//! ```no_run
//! # async fn demo() -> vm_lab::Result<()> {
//! let spec = vm_lab::LabSpec::from_file("examples/photoncloud-t036/lab.yaml".as_ref())?;
//! let lab = vm_lab::Lab::up(spec).await?;          // image built/cached, all nodes ready
//! let n1 = lab.node("node01")?;
//! n1.succeed("ping -c1 192.168.100.12").await?;   // guest agent exec
//! let out = n1.ssh("hostname").await?;              // system ssh with the lab key
//! assert_eq!(out.stdout.trim(), "node01");
//! lab.node("node03")?.link_down().await?;           // partition node03
//! lab.down().await?;                                // or just drop it
//! # Ok(()) }
//! ```
//!
//! # How the pieces fit
//! - [`spec`]: the YAML lab spec, validated (errors name the node).
//! - [`image`]: the netboot kernel + initramfs, made only from Debian packages (`apt-get
//!   download`, `dpkg-deb -x`), cached by a hash of its inputs.
//! - [`namespace`]: one user + network + PID namespace per lab (`unshare`, no root); QEMUs run
//!   inside via `nsenter`, so the multicast L2 (always `localaddr=127.0.0.1`) stays private and
//!   everything dies with the driver, even on SIGKILL.
//! - [`qemu_args`]: the QEMU command line, pure functions.
//! - [`accel`]: KVM only after a bounded probe boot; otherwise TCG (timeouts ×4).
//! - [`machine`]: a node's verbs over QMP and the guest agent (`qapi` crate) and SSH.
//! - [`lab`]: owns the namespace and the nodes; `Drop` tears everything down.
//! - [`guests`]: a namespace that hosts guests described by their hardware rather than as
//!   lab nodes (disks on their buses, NICs on named bridges with taps and a DHCP server,
//!   blocking QMP and agent verbs): what fake-proxmox's lab backend runs PVE's VMs on.
//! - [`containers`]: real Linux containers on a guest host, on the same bridges as its guests
//!   (own mount/UTS/IPC/PID/net namespaces inside the lab's, a veth per NIC); their root file
//!   system comes from [`image::template`], a `vztmpl`-style archive built from Debian packages.
//! - [`image::cloud`]: the project's cloud image, a disk that boots through the firmware and
//!   applies a NoCloud or config-drive cloud-init drive (a stand-in for a distribution's).
//!
//! # The guest
//! Each node boots the netboot image: kernel `-append` (or the iPXE script for PXE nodes)
//! carries `vmlab.hostname`, `vmlab.lan=MAC,IP/PREFIX`, `vmlab.mgmt=…` and `vmlab.hosts=…`;
//! the init sets hostname, `/etc/hosts` (every node's name), `eth0` (lab L2, the spec's
//! address) and `mgmt0` (10.0.2.15/24, QEMU user-mode network used for SSH forwarding and PXE),
//! starts `qemu-ga` and `dropbear` (root, key only), and prints `VMLAB-READY` on the serial
//! console. The root file system is the initramfs (tmpfs): nothing in it survives a restart.
//!
//! # Disks and restarts
//! A node with `disk_gib > 0` gets a sparse qcow2 disk in its run directory, attached as a
//! virtio-blk device: **`/dev/vda`** in the guest, blank at first (format it, e.g.
//! `mkfs.ext4 /dev/vda`, then `mount /dev/vda /data`). [`machine::Node::kill`] is a power
//! loss; [`machine::Node::start`] boots the node again **from the same netboot image with the
//! same disk and MACs attached** (whatever the guest had `sync`ed is still on `/dev/vda`);
//! [`machine::Node::restart`] does both and waits until ready. Provisioning that "installs to
//! disk" therefore writes to `/dev/vda` and reads it back after a restart.
//!
//! # SSH from the host
//! The host cannot route into the lab's namespace, so each node's management NIC forwards
//! `127.0.0.1:220N` *inside the namespace* to the guest's port 22, and the system `ssh` runs
//! inside the namespace through `nsenter` ([`machine::Node::ssh_command`], `vm-lab ssh NODE`).
//! The key is `<cache>/ssh/id_ed25519` (made once with `ssh-keygen`), baked into the image.

// A library reports through its return values and `tracing`, never by printing; the binary prints.
#![warn(clippy::print_stdout, clippy::print_stderr)]
// Every public item says what it is, its unit, and when it fails: the crate is used as a library.
#![warn(missing_docs)]

pub mod accel;
pub mod clock;
pub mod containers;
pub mod error;
pub mod guests;
pub mod image;
pub mod lab;
pub mod machine;
pub mod namespace;
pub mod netfault;
pub mod pace;
pub mod qemu_args;
pub mod qga;
pub mod qmp;
pub mod serial_stamps;
pub mod snapshot;
pub mod spec;

pub use accel::Accel;
pub use error::{Error, Result};
pub use lab::{Lab, LabOptions, LabState};
pub use machine::{ExecOutput, Interface, Node, Timeouts};
pub use spec::{AccelChoice, BootMode, LabSpec, NodeSpec};
