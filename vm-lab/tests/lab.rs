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
    clock_offset_s: -86400
"#;

/// The guest's clock offset from the host's must be `want`, give or take a few seconds (the
/// measurement itself takes an agent round trip).
async fn assert_offset(n: &vm_lab::Node, want: i64) {
    let got = vm_lab::clock::measure_offset(n).await.unwrap();
    assert!(
        (got - want).abs() <= 5,
        "{}: offset {got}, want {want}",
        n.name()
    );
}

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

    // Waits: ports, processes, files and console text, each on the lab's one retry loop.
    let short = Duration::from_secs(30);
    n1.wait_for_open_port(22, patience(&lab)).await.unwrap(); // dropbear
    n1.wait_for_closed_port(7777, short).await.unwrap();
    n1.wait_for_no_process("nc", short).await.unwrap();
    n1.succeed("(nc -l -p 7777 >/dev/null 2>&1 </dev/null &); true")
        .await
        .unwrap();
    n1.wait_for_open_port(7777, short).await.unwrap();
    let pids = n1.wait_for_process("nc", short).await.unwrap();
    assert!(!pids.is_empty());
    n1.succeed(&format!("kill {}", pids[0])).await.unwrap();
    n1.wait_for_closed_port(7777, short).await.unwrap();
    n1.wait_for_no_process("nc", short).await.unwrap();
    n1.succeed("(sleep 2; echo later > /tmp/later) >/dev/null 2>&1 </dev/null &")
        .await
        .unwrap();
    n1.fail("test -e /tmp/later").await.unwrap();
    n1.wait_for_file("/tmp/later", short).await.unwrap();
    n1.succeed("echo wait-probe-4711 > /dev/ttyS0")
        .await
        .unwrap();
    let line = n1
        .wait_for_console_text(r"wait-probe-\d+", short)
        .await
        .unwrap();
    assert!(line.contains("wait-probe-4711"), "{line}");
    match n1.wait_for_open_port(7778, Duration::from_secs(2)).await {
        Err(Error::Timeout {
            node, what, serial, ..
        }) => {
            assert_eq!(node, "node01");
            assert!(what.contains("7778"), "{what}");
            assert!(serial.contains("wait-probe-4711"), "{serial}");
        }
        other => panic!("{other:?}"),
    }

    net_faults_measured_in_the_guests(&lab).await;

    // Clock faults: node03 booted a day behind; node02 jumps two years ahead and back.
    assert_offset(lab.node("node03").unwrap(), -86_400).await;
    assert_offset(n1, 0).await;
    lab.set_clock_offset("node02", 2 * 365 * 86_400)
        .await
        .unwrap();
    assert_offset(lab.node("node02").unwrap(), 2 * 365 * 86_400).await;
    assert_eq!(lab.clock_offsets().unwrap()["node03"], -86_400);
    lab.set_clock_offset("node02", 0).await.unwrap();
    assert_offset(lab.node("node02").unwrap(), 0).await;

    whole_lab_snapshot_and_restore(&lab).await;

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

/// Ping summary as busybox prints it: (transmitted, received, min round trip in ms).
fn ping_stats(out: &str) -> (u32, u32, Option<f64>) {
    let mut sent = 0;
    let mut got = 0;
    let mut min = None;
    for l in out.lines() {
        if let Some((a, rest)) = l.split_once(" packets transmitted, ") {
            sent = a.trim().parse().unwrap_or(0);
            got = rest
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
        }
        if let Some((_, v)) = l.split_once(" = ") {
            min = v.split('/').next().and_then(|x| x.trim().parse().ok());
        }
    }
    (sent, got, min)
}

/// The guest kernel's count of ICMP echo requests it received (`/proc/net/snmp`).
async fn in_echos(n: &vm_lab::Node) -> u64 {
    let snmp = String::from_utf8(n.read_file("/proc/net/snmp").await.unwrap()).unwrap();
    let icmp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Icmp:")).collect();
    let names: Vec<&str> = icmp[0].split_whitespace().collect();
    let vals: Vec<&str> = icmp[1].split_whitespace().collect();
    let i = names.iter().position(|x| *x == "InEchos").unwrap();
    vals[i].parse().unwrap()
}

/// Every per-link fault, proven by what the guests themselves measure.
async fn net_faults_measured_in_the_guests(lab: &Lab) {
    let n1 = lab.node("node01").unwrap();
    let n2 = lab.node("node02").unwrap();
    let n3 = lab.node("node03").unwrap();

    // Delay on node01<->node02 only: each direction waits 300 ms, so no round trip is
    // shorter than 600 ms there, while node01<->node03 stays fast.
    lab.net_delay("node01", "node02", Duration::from_millis(300), None)
        .await
        .unwrap();
    let out = n1.succeed("ping -c3 -W3 192.168.100.12").await.unwrap();
    let (sent, got, min) = ping_stats(&out);
    assert_eq!((sent, got), (3, 3), "{out}");
    assert!(min.unwrap() >= 600.0, "{out}");
    let out = n1.succeed("ping -c3 -W3 192.168.100.13").await.unwrap();
    assert!(ping_stats(&out).2.unwrap() < 300.0, "{out}");
    assert_eq!(
        lab.net_faults().unwrap().get("node02", "node01").delay,
        Some(Duration::from_millis(300))
    );

    // Loss: half the packets each way between node01 and node03 (a quarter of the round
    // trips survive), so some of 20 pings are lost, and none on the healthy link.
    lab.net_heal().await.unwrap();
    let loss = vm_lab::netfault::LinkFault {
        loss_pct: Some(50.0),
        ..Default::default()
    };
    lab.net_shape("node01", "node03", loss).await.unwrap();
    let out = n1.exec("ping -c20 -i0.2 -W1 192.168.100.13").await.unwrap();
    let (sent, got, _) = ping_stats(&out.stdout);
    assert!(sent == 20 && got < 20, "{out:?}");
    let out = n1
        .succeed("ping -c5 -i0.2 -W2 192.168.100.12")
        .await
        .unwrap();
    assert_eq!(ping_stats(&out).1, 5, "{out}");

    // Partition node01 | node02,node03: nothing crosses; the majority still talks.
    lab.net_heal().await.unwrap();
    lab.net_partition(&["node01"], &["node02", "node03"])
        .await
        .unwrap();
    n1.fail("ping -c2 -W1 192.168.100.12").await.unwrap();
    n3.fail("ping -c2 -W1 192.168.100.11").await.unwrap();
    n2.succeed("ping -c1 -W2 192.168.100.13").await.unwrap();

    // Asymmetric: node01's packets no longer reach node02, node02's still reach node01.
    // Measured by each guest's own count of echo requests received.
    lab.net_heal().await.unwrap();
    lab.net_cut("node01", &["node02"]).await.unwrap();
    let (e1, e2) = (in_echos(n1).await, in_echos(n2).await);
    n2.fail("ping -c3 -W1 192.168.100.11").await.unwrap(); // the replies are lost
    n1.fail("ping -c3 -W1 192.168.100.12").await.unwrap();
    assert!(in_echos(n1).await >= e1 + 3, "node01 must hear node02");
    assert_eq!(in_echos(n2).await, e2, "node02 must not hear node01");
    n3.succeed("ping -c1 -W2 192.168.100.11").await.unwrap();

    lab.net_heal().await.unwrap();
    assert!(lab.net_faults().unwrap().list().is_empty());
    n1.wait_until_succeeds("ping -c1 -W1 192.168.100.12", patience(lab))
        .await
        .unwrap();
    n2.succeed("! /sbin/tc qdisc show dev eth0 | grep -q netem")
        .await
        .unwrap();
}

/// A snapshot brings back every node's memory (tmpfs files), a powered-off node, and the
/// network faults in force when it was taken; the guests' clocks are set to the host's.
async fn whole_lab_snapshot_and_restore(lab: &Lab) {
    let n1 = lab.node("node01").unwrap();
    let n3 = lab.node("node03").unwrap();
    n1.succeed("echo before > /tmp/snap").await.unwrap();
    n3.succeed("echo n3 > /tmp/snap3").await.unwrap();
    lab.net_delay("node01", "node03", Duration::from_millis(200), None)
        .await
        .unwrap();
    lab.set_clock_offset("node01", 3600).await.unwrap();
    let info = lab.snapshot("s1").await.unwrap();
    assert_eq!(info.nodes, ["node01", "node02", "node03"]);
    assert_eq!(lab.snapshots().len(), 1);

    n1.succeed("echo after > /tmp/snap; echo extra > /tmp/extra")
        .await
        .unwrap();
    lab.net_heal().await.unwrap();
    lab.set_clock_offset("node01", 0).await.unwrap();
    n3.kill().await.unwrap();

    lab.restore("s1").await.unwrap();
    assert_eq!(n1.succeed("cat /tmp/snap").await.unwrap(), "before\n");
    n1.fail("test -e /tmp/extra").await.unwrap();
    assert!(n3.is_running().await);
    assert_eq!(n3.run_state().await.unwrap(), "running");
    // node03 resumed where it was (its tmpfs file is back), not from a fresh boot.
    assert_eq!(n3.succeed("cat /tmp/snap3").await.unwrap(), "n3\n");
    assert_eq!(
        lab.net_faults().unwrap().get("node01", "node03").delay,
        Some(Duration::from_millis(200))
    );
    let out = n1.succeed("ping -c2 -W3 192.168.100.13").await.unwrap();
    assert!(ping_stats(&out).2.unwrap() >= 400.0, "{out}");
    // Every guest's clock is the host's plus its offset at the snapshot, not the snapshot's time.
    assert_offset(n1, 3600).await;
    assert_offset(lab.node("node02").unwrap(), 0).await;
    assert_offset(n3, -86_400).await;
    lab.set_clock_offset("node01", 0).await.unwrap();
    match lab.restore("nope").await {
        Err(Error::Lab(m)) => assert!(m.contains("no snapshot named"), "{m}"),
        other => panic!("{other:?}"),
    }
    lab.net_heal().await.unwrap();
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

    // Waits from the CLI; a timeout prints the node's last serial lines.
    let w = vm_lab(&root, &["wait", "node02", "port", "22", "--timeout", "60"]);
    assert!(w.status.success(), "{}", text(&w));
    let w = vm_lab(&root, &["wait", "node02", "console", r"READY host=node\d+"]);
    assert!(
        w.status.success() && text(&w).contains("VMLAB-READY host=node02"),
        "{}",
        text(&w)
    );
    let w = vm_lab(
        &root,
        &["wait", "node02", "file", "/nonexistent", "--timeout", "2"],
    );
    let wt = text(&w);
    assert!(
        !w.status.success() && wt.contains("timed out") && wt.contains("VMLAB-READY host=node02"),
        "{wt}"
    );

    // The serial console is a root shell: commands piped in, their answer awaited.
    let mut sh = Command::new(env!("CARGO_BIN_EXE_vm-lab"))
        .arg("--run-root")
        .arg(&root)
        .args([
            "shell",
            "node02",
            "--until",
            "shell-probe-42",
            "--timeout",
            "60",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = sh.stdin.take().unwrap();
        stdin
            .write_all(b"echo shell-probe-$((6*7)); hostname\n")
            .unwrap();
    }
    let out = sh.wait_with_output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("shell-probe-42"),
        "{}",
        text(&out)
    );

    // Network faults from the CLI, measured in the guests.
    let ping = ["exec", "pxe01", "--", "ping -c2 -W2 192.168.100.22"];
    let n = vm_lab(&root, &["net", "partition", "pxe01", "|", "node02"]);
    assert!(n.status.success(), "{}", text(&n));
    assert_eq!(vm_lab(&root, &ping).status.code(), Some(1));
    let show = text(&vm_lab(&root, &["net", "show"]));
    assert!(show.contains("pxe01 -> node02: loss 100%"), "{show}");
    assert!(vm_lab(&root, &["net", "heal"]).status.success());
    let ex = vm_lab(&root, &ping);
    assert!(ex.status.success(), "{}", text(&ex));
    let n = vm_lab(&root, &["net", "delay", "pxe01", "node02", "200ms"]);
    assert!(n.status.success(), "{}", text(&n));
    let ex = vm_lab(&root, &ping);
    let min = ping_stats(&String::from_utf8_lossy(&ex.stdout)).2;
    assert!(min.unwrap_or(0.0) >= 400.0, "{}", text(&ex));
    assert!(vm_lab(&root, &["net", "heal"]).status.success());

    // Clock faults from the CLI.
    let c = vm_lab(&root, &["clock", "node02", "-3d"]);
    assert!(c.status.success(), "{}", text(&c));
    let show = text(&vm_lab(&root, &["clock"]));
    let line = show.lines().find(|l| l.starts_with("node02")).unwrap_or("");
    let secs: i64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!((secs + 259_200).abs() <= 5, "{show}");
    assert!(vm_lab(&root, &["clock", "node02", "0"]).status.success());

    // Whole-lab snapshot and restore from the CLI.
    assert!(
        vm_lab(&root, &["exec", "node02", "--", "echo one > /tmp/s"])
            .status
            .success()
    );
    let sn = vm_lab(&root, &["snapshot", "base"]);
    assert!(sn.status.success(), "{}", text(&sn));
    assert!(text(&vm_lab(&root, &["snapshots"])).contains("base"));
    assert!(
        vm_lab(&root, &["exec", "node02", "--", "echo two > /tmp/s"])
            .status
            .success()
    );
    let rs = vm_lab(&root, &["restore", "base"]);
    assert!(rs.status.success(), "{}", text(&rs));
    let ex = vm_lab(&root, &["exec", "node02", "--", "cat /tmp/s"]);
    assert_eq!(
        String::from_utf8_lossy(&ex.stdout),
        "one\n",
        "{}",
        text(&ex)
    );

    // A node killed from the CLI comes back with `vm-lab start`.
    assert!(vm_lab(&root, &["fault", "node02", "kill"]).status.success());
    let st = vm_lab(&root, &["start", "node02"]);
    assert!(st.status.success(), "{}", text(&st));
    let ex = vm_lab(
        &root,
        &["exec", "node02", "--", "hostname; cat /tmp/s || echo fresh"],
    );
    assert_eq!(
        String::from_utf8_lossy(&ex.stdout),
        "node02\nfresh\n",
        "{}",
        text(&ex)
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

/// Set in the child process of the SIGTERM test: the run root its lab goes under.
const SIGTERM_CHILD_ENV: &str = "VM_LAB_TEST_SIGTERM_ROOT";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_removes_the_run_dir_of_an_in_process_lab() {
    if let Ok(root) = std::env::var(SIGTERM_CHILD_ENV) {
        // The child: own a lab until SIGTERM.
        vm_lab::lab::remove_run_dirs_on_sigterm().unwrap();
        let opts = LabOptions {
            run_root: Some(PathBuf::from(root)),
            ..LabOptions::default()
        };
        let _lab = Lab::start(LabSpec::from_yaml(NEIGHBOUR_LAB).unwrap(), opts)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(600)).await;
        panic!("the child lab was not stopped");
    }
    log_init();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("run");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigterm_removes_the_run_dir_of_an_in_process_lab",
            "--nocapture",
        ])
        .env(SIGTERM_CHILD_ENV, &root)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until its node's QEMU runs.
    let start = Instant::now();
    let pid_file = loop {
        let found = std::fs::read_dir(&root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("nbr01").join("pid"))
            .find(|p| p.exists());
        if let Some(p) = found {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the child lab did not start"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child exited early"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let qemu: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(qemu));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
    let start = Instant::now();
    while alive(qemu) && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(qemu), "QEMU outlived its driver");
    // The namespace's other processes die with it too, a moment later on a loaded machine.
    let start = Instant::now();
    while !pids_mentioning(&root).is_empty() && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pids_mentioning(&root), Vec::<u32>::new());
}
