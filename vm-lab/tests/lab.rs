//! Real labs under TCG (or KVM where a probe proves it works). Two tests share the boots:
//! the in-process 3-node lab (mesh, agent addresses, SSH, partition, pause, disk across a
//! kill + restart), and a CLI-driven lab (PXE node, isolation from a concurrent lab on the same
//! multicast group, SIGKILL of its supervisor leaves no QEMU behind).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vm_lab::lab::LabState;
use vm_lab::namespace::{alive, pids_mentioning};
use vm_lab::{Error, Lab, LabOptions, LabSpec};

fn opts() -> LabOptions {
    LabOptions {
        keep_on_failure: true,
        ..LabOptions::default()
    }
}

/// Bound for "eventually" checks: the lab's boot timeout (scaled ×4 under TCG).
fn patience(lab: &Lab) -> Duration {
    lab.nodes()[0].timeouts().boot
}

fn log_init() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_test_writer()
        .try_init();
}

/// Both test labs add the same user file to the image (so they share one cached image).
const EXTRA_FILE: &str = "tests/fixtures/lab-hello";

const THREE_NODES: &str = r#"
name: e2e3
image:
  files:
    - src: tests/fixtures/lab-hello
      dst: /usr/local/bin/lab-hello
      mode: 0o755
nodes:
  - name: node01
    mac: "52:54:00:00:01:01"
    address: 192.168.100.11/24
  - name: node02
    mac: "52:54:00:00:01:02"
    address: 192.168.100.12/24
    disk_gib: 100
  - name: node03
    mac: "52:54:00:00:01:03"
    address: 192.168.100.13/24
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_mesh_agent_ssh_partition_pause_and_disk_restart() {
    log_init();
    let lab = Lab::up_with(LabSpec::from_yaml(THREE_NODES).unwrap(), opts())
        .await
        .unwrap_or_else(|e| panic!("lab up: {e}"));
    let names = ["node01", "node02", "node03"];

    // Every node reaches every other over the multicast L2 (by address and by /etc/hosts name).
    for a in names {
        for b in names {
            if a != b {
                let n = lab.node(a).unwrap();
                n.wait_until_succeeds(
                    &format!("ping -c1 -W2 {}", lab.node(b).unwrap().ip()),
                    patience(&lab),
                )
                .await
                .unwrap_or_else(|e| panic!("{a} -> {b}: {e}"));
                n.succeed(&format!("ping -c1 -W2 {b}")).await.unwrap();
            }
        }
    }

    // The guest agent reports the configured address and MAC on eth0.
    for n in lab.nodes() {
        let ifs = n.interfaces().await.unwrap();
        let eth0 = ifs
            .iter()
            .find(|i| i.name == "eth0")
            .unwrap_or_else(|| panic!("{ifs:?}"));
        assert_eq!(eth0.mac.as_deref(), Some(n.spec().mac.to_string().as_str()));
        assert!(
            eth0.addresses.contains(&n.spec().address.to_string()),
            "{}: {ifs:?}",
            n.name()
        );
    }

    // The user's own file made it into the image, executable.
    let hello = std::fs::read_to_string(EXTRA_FILE).unwrap();
    assert!(hello.contains("hello-from-image"));
    assert_eq!(
        lab.node("node02")
            .unwrap()
            .succeed("lab-hello")
            .await
            .unwrap(),
        "hello-from-image\n"
    );

    // System ssh with the lab key, through the lab namespace.
    for n in lab.nodes() {
        let out = n.ssh("hostname").await.unwrap();
        assert_eq!(out.stdout.trim(), n.name(), "{out:?}");
    }

    // Commands: exit codes and errors that name the node.
    let n1 = lab.node("node01").unwrap();
    let out = n1.exec("echo out; echo err >&2; exit 3").await.unwrap();
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (3, "out\n", "err\n")
    );
    match n1.succeed("exit 4").await {
        Err(Error::CommandFailed { node, code, .. }) => {
            assert_eq!((node.as_str(), code), ("node01", 4))
        }
        other => panic!("{other:?}"),
    }
    n1.write_file("/tmp/hello", b"bytes\x00\xff").await.unwrap();
    assert_eq!(n1.read_file("/tmp/hello").await.unwrap(), b"bytes\x00\xff");

    // Link down isolates node03 in both directions; the others still talk; link up heals.
    let n3 = lab.node("node03").unwrap();
    n3.link_down().await.unwrap();
    n1.fail("ping -c2 -W1 192.168.100.13").await.unwrap();
    n3.fail("ping -c2 -W1 192.168.100.11").await.unwrap();
    n1.succeed("ping -c1 -W2 192.168.100.12").await.unwrap();
    n3.link_up().await.unwrap();
    n1.wait_until_succeeds("ping -c1 -W1 192.168.100.13", patience(&lab))
        .await
        .unwrap();
    n3.wait_until_succeeds("ping -c1 -W1 192.168.100.11", patience(&lab))
        .await
        .unwrap();

    // Pause freezes node02 (no answers), resume thaws it.
    let n2 = lab.node("node02").unwrap();
    n2.pause().await.unwrap();
    assert_eq!(n2.run_state().await.unwrap(), "paused");
    n1.fail("ping -c2 -W1 192.168.100.12").await.unwrap();
    n2.resume().await.unwrap();
    assert_eq!(n2.run_state().await.unwrap(), "running");
    n1.wait_until_succeeds("ping -c1 -W1 192.168.100.12", patience(&lab))
        .await
        .unwrap();
    let events = std::fs::read_to_string(&n2.paths().events).unwrap();
    assert!(
        events.contains("\"STOP\"") && events.contains("\"RESUME\""),
        "{events}"
    );

    // A timeout names the node and carries its last serial lines.
    match n1
        .wait_for_serial("NEVER-PRINTED", Duration::from_secs(1))
        .await
    {
        Err(Error::Timeout { node, serial, .. }) => {
            assert_eq!(node, "node01");
            assert!(serial.contains("VMLAB-READY host=node01"), "{serial}");
        }
        other => panic!("{other:?}"),
    }

    // A file on the disk survives kill + restart; the tmpfs root does not.
    n2.succeed("test -b /dev/vda && mkfs.ext4 -q -F /dev/vda && mount /dev/vda /data && echo payload-7f3 > /data/marker && echo gone > /root/ephemeral && sync")
        .await
        .unwrap();
    let old_pid = n2.qemu_pid().await.unwrap();
    n2.kill().await.unwrap();
    assert!(!n2.is_running().await);
    assert!(!alive(old_pid));
    n2.start().await.unwrap();
    n2.wait_ready().await.unwrap();
    assert_ne!(n2.qemu_pid().await.unwrap(), old_pid);
    assert_eq!(
        n2.succeed("mount /dev/vda /data && cat /data/marker")
            .await
            .unwrap(),
        "payload-7f3\n"
    );
    n2.fail("test -e /root/ephemeral").await.unwrap();
    // Same MAC and address after the restart.
    n1.wait_until_succeeds("ping -c1 -W1 node02", patience(&lab))
        .await
        .unwrap();

    // Orderly power-off through the guest agent: the guest shuts down, QEMU exits by itself.
    n3.shutdown(patience(&lab)).await.unwrap();
    assert!(!n3.is_running().await);
    let events = std::fs::read_to_string(&n3.paths().events).unwrap();
    assert!(events.contains("\"SHUTDOWN\""), "{events}");

    let dir = lab.run_dir().to_path_buf();
    lab.down().await.unwrap();
    assert!(!dir.exists());
    assert!(pids_mentioning(&dir).is_empty());
}

const CLI_LAB: &str = r#"
name: e2ecli
image:
  files:
    - src: MANIFEST_DIR/tests/fixtures/lab-hello
      dst: /usr/local/bin/lab-hello
      mode: 0o755
network:
  mcast_group: 239.77.0.1
  mcast_port: 47001
nodes:
  - name: pxe01
    mac: "52:54:00:00:02:01"
    address: 192.168.100.21/24
    boot: pxe
  - name: node02
    mac: "52:54:00:00:02:02"
    address: 192.168.100.22/24
"#;

/// The same multicast group, port and subnet as CLI_LAB: only the namespaces keep them apart.
const NEIGHBOUR_LAB: &str = r#"
name: e2enbr
image:
  files:
    - src: tests/fixtures/lab-hello
      dst: /usr/local/bin/lab-hello
      mode: 0o755
network:
  mcast_group: 239.77.0.1
  mcast_port: 47001
nodes:
  - name: nbr01
    mac: "52:54:00:00:03:01"
    address: 192.168.100.23/24
"#;

fn vm_lab(root: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vm-lab"))
        .arg("--run-root")
        .arg(root)
        .args(args)
        .output()
        .expect("run vm-lab")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_lab_pxe_isolation_and_sigkill_leaves_nothing() {
    log_init();
    let tmp = tempfile::tempdir().unwrap();
    let root: PathBuf = tmp.path().join("run");
    let spec_path = tmp.path().join("lab.yaml");
    std::fs::write(
        &spec_path,
        CLI_LAB.replace("MANIFEST_DIR", env!("CARGO_MANIFEST_DIR")),
    )
    .unwrap();

    // `vm-lab up` (supervisor in the background) and an in-process neighbour at the same time.
    let up = {
        let root = root.clone();
        let spec = spec_path.clone();
        tokio::task::spawn_blocking(move || vm_lab(&root, &["up", spec.to_str().unwrap()]))
    };
    let neighbour = Lab::up_with(LabSpec::from_yaml(NEIGHBOUR_LAB).unwrap(), opts())
        .await
        .unwrap_or_else(|e| panic!("neighbour lab: {e}"));
    let up = up.await.unwrap();
    assert!(up.status.success(), "{}", text(&up));

    let status = vm_lab(&root, &["status"]);
    let st = text(&status);
    assert!(
        status.status.success() && st.contains("e2ecli [running]"),
        "{st}"
    );

    // The PXE node reaches the same ready state as a direct-boot node.
    let logs = vm_lab(&root, &["logs", "pxe01"]);
    assert!(
        text(&logs).contains("VMLAB-READY host=pxe01"),
        "{}",
        text(&logs)
    );
    let argv = text(&vm_lab(&root, &["logs", "pxe01", "--what", "argv"]));
    assert!(
        argv.contains("bootfile=pxe01.ipxe") && !argv.contains("-kernel"),
        "{argv}"
    );
    let ex = vm_lab(
        &root,
        &["exec", "pxe01", "--", "hostname; ip -o -4 addr show eth0"],
    );
    let ex_t = text(&ex);
    assert!(
        ex.status.success() && ex_t.contains("pxe01") && ex_t.contains("192.168.100.21/24"),
        "{ex_t}"
    );
    let ex = vm_lab(
        &root,
        &["exec", "pxe01", "--", "ping -c1 -W2 192.168.100.22"],
    );
    assert!(ex.status.success(), "{}", text(&ex));
    let ex = vm_lab(&root, &["exec", "node02", "--", "exit 5"]);
    assert_eq!(ex.status.code(), Some(5), "{}", text(&ex));
    let ssh = vm_lab(&root, &["ssh", "node02", "--", "hostname"]);
    assert_eq!(
        String::from_utf8_lossy(&ssh.stdout).trim(),
        "node02",
        "{}",
        text(&ssh)
    );

    // Two labs at once, same group:port and subnet: neither sees the other.
    let nbr = neighbour.node("nbr01").unwrap();
    nbr.fail("ping -c2 -W1 192.168.100.21").await.unwrap();
    nbr.fail("ping -c2 -W1 192.168.100.22").await.unwrap();
    let ex = vm_lab(
        &root,
        &["exec", "pxe01", "--", "ping -c2 -W1 192.168.100.23"],
    );
    assert_eq!(ex.status.code(), Some(1), "{}", text(&ex));

    // SIGKILL the supervisor: every QEMU of that lab goes away with it.
    let run_dir = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("lab.json").exists())
        .unwrap();
    let state = LabState::load(&run_dir).unwrap();
    let qemu_pids: Vec<u32> = state
        .nodes
        .iter()
        .map(|n| {
            std::fs::read_to_string(n.dir.join("pid"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(qemu_pids.iter().all(|p| alive(*p)));
    assert!(!pids_mentioning(&run_dir).is_empty());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(state.driver_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let start = Instant::now();
    while (qemu_pids.iter().any(|p| alive(*p)) || !pids_mentioning(&run_dir).is_empty())
        && start.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left: Vec<u32> = qemu_pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(left.is_empty(), "QEMU outlived its driver: {left:?}");
    assert!(
        pids_mentioning(&run_dir).is_empty(),
        "{:?}",
        pids_mentioning(&run_dir)
    );
    assert!(!alive(state.ns_init_pid) && !alive(state.holder_pid));

    // The neighbour is unaffected; `down` cleans up the stale run dir.
    nbr.succeed("true").await.unwrap();
    let down = vm_lab(&root, &["down", "--lab", "e2ecli"]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(!run_dir.exists());
    neighbour.down().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lab_that_cannot_start_leaves_no_run_dir_or_process() {
    log_init();
    let tmp = tempfile::tempdir().unwrap();
    let long_arg = format!("x={}", "y".repeat(2100));
    let spec = format!(
        "{}\n    kernel_args: [\"{long_arg}\"]\n",
        NEIGHBOUR_LAB.trim_end()
    );
    let opts = LabOptions {
        run_root: Some(tmp.path().to_path_buf()),
        ..LabOptions::default()
    };
    match Lab::start(LabSpec::from_yaml(&spec).unwrap(), opts).await {
        Err(Error::Args(msg)) => assert!(
            msg.contains("nbr01") && msg.contains("command line"),
            "{msg}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    assert!(pids_mentioning(tmp.path()).is_empty());
}
