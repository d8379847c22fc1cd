//! `rehearse --backend lab`'s rollout, in process: the deployer makes seed 002's three
//! PhotonCloud nodes through the PVE API of a lab-backed fake, each VM boots the project's
//! cloud image as a real QEMU guest and applies its cloud-init drive: node01 and node02 the
//! static addresses their manifests ask for, node03 (changed here to ask for none) a lease
//! from vmbr0's real DHCP server. The address the deployer reports is the one the guest
//! applied (its console says so), and the SSH key the manifests carry logs in as the
//! cloud-init user. Nothing outlives the fake.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use fake_proxmox::{ClockMode, FakeProxmox};
use provision_harness::deployer::plan::Verdict;
use provision_harness::rehearse::{RehearseOptions, cloud_image_qcow2, lab_rollout, run_against};
use vm_lab::namespace::{alive, pids_mentioning};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_photoncloud_nodes_deploy_onto_real_guests_with_the_addresses_they_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let image = tokio::task::spawn_blocking(move || cloud_image_qcow2(&dir))
        .await
        .unwrap()
        .expect("the cloud image builds");
    let mut rollout = lab_rollout(&image).unwrap();
    let key = tmp.path().join("id_ed25519");
    let keygen = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen runs");
    assert!(keygen.success());
    let pubkey = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    for m in &mut rollout.manifests.vms {
        let fp = &mut m.vm.spec.for_provider;
        fp.ssh_keys = vec![pubkey.trim().to_string()];
        if fp.name == "node03" {
            fp.ip_address = None;
            fp.gateway = None;
        }
    }
    let mut options = RehearseOptions::lab();
    // A guest that has no address by then will not get one.
    options.deploy.pipeline.ip_wait = Duration::from_secs(300);
    let state = tmp.path().join("state");
    let mut lab = options.lab.clone();
    lab.state_dir = Some(state.clone());
    let fake = FakeProxmox::builder()
        .scenario(rollout.scenario.clone())
        .tls(true)
        .auth_failure_delay(false)
        .clock(ClockMode::Scaled {
            factor: options.clock_factor,
        })
        .lab_options(lab)
        .start()
        .await
        .expect("the lab-backed fake starts");

    let report = run_against(
        &fake,
        rollout.label,
        rollout.manifests,
        rollout.provider,
        &options,
    )
    .await
    .expect("the rollout runs");
    assert_ne!(report.plan.verdict, Verdict::WouldFail, "{:?}", report.plan);
    let deploy = &report.deploy;
    assert!(deploy.all_ready(), "{deploy:#?}");
    let names: BTreeSet<&str> = deploy.vms.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["node01", "node02", "node03"]));

    let ctl = fake.site("lab").expect("the lab site").control();
    let pool = (
        Ipv4Addr::new(192, 168, 100, 100),
        Ipv4Addr::new(192, 168, 100, 199),
    );
    let mut ips = BTreeSet::new();
    for vm in &deploy.vms {
        let vmid = vm.vmid.expect("a VMID");
        let ip: Ipv4Addr = vm
            .ip
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "{} has no IPv4 address: {vm:?}\nits console:\n{}",
                    vm.name,
                    serial_log(&state, vmid)
                )
            });
        let asked: Option<Ipv4Addr> = match vm.name.as_str() {
            "node01" => Some(Ipv4Addr::new(192, 168, 100, 11)),
            "node02" => Some(Ipv4Addr::new(192, 168, 100, 12)),
            _ => None,
        };
        match asked {
            Some(a) => assert_eq!(ip, a, "{}: the manifest's address", vm.name),
            None => assert!(
                (pool.0..=pool.1).contains(&ip),
                "{}: {ip} is not from vmbr0's DHCP pool",
                vm.name
            ),
        }
        ips.insert(ip);
        let access = ctl
            .guest_access(&vm.node, vmid, "admin", &key)
            .await
            .expect("the guest's access");
        assert_eq!(access.address, ip.to_string(), "{}", vm.name);
        let mut ssh = std::process::Command::new(&access.ssh[0]);
        ssh.args(&access.ssh[1..]).arg("hostname; id -un");
        let out = tokio::task::spawn_blocking(move || ssh.output().expect("ssh runs"))
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .collect::<Vec<_>>(),
            [vm.name.as_str(), "admin"],
            "{}: in over SSH with the manifest's key: {}",
            vm.name,
            String::from_utf8_lossy(&out.stderr)
        );
        let serial =
            std::fs::read_to_string(access.serial_log.as_deref().expect("a serial log")).unwrap();
        let ready = serial
            .lines()
            .find(|l| l.contains("CLOUDIMG-READY"))
            .unwrap_or_else(|| panic!("{} never printed CLOUDIMG-READY:\n{serial}", vm.name));
        assert!(
            ready.contains(&format!("host={} ", vm.name)),
            "{}: the guest applied its hostname: {ready}",
            vm.name
        );
        // A static address is on the console when the guest is ready; a lease comes later
        // (and SSH above reached the guest at it).
        if asked.is_some() {
            assert!(
                ready.contains(&format!("eth0={ip}/24")),
                "{}: the guest applied the manifest's address: {ready}",
                vm.name
            );
        }
    }
    assert_eq!(ips.len(), 3, "three distinct addresses: {ips:?}");

    let lab_pids = pids_mentioning(&state);
    assert!(
        lab_pids.iter().any(|p| alive(*p)),
        "the guests are real processes"
    );
    fake.shutdown().await;
    let end = Instant::now();
    while !pids_mentioning(&state).is_empty() && end.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(pids_mentioning(&state), Vec::<u32>::new());
}

/// The console of VM `vmid`'s guest (lab run dirs are `<state>/lab/<host>/<node>-<vmid>/`).
fn serial_log(state: &std::path::Path, vmid: u32) -> String {
    let suffix = format!("-{vmid}");
    let Ok(hosts) = std::fs::read_dir(state.join("lab")) else {
        return "(no lab run directory)".into();
    };
    for host in hosts.flatten() {
        for guest in std::fs::read_dir(host.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if guest.file_name().to_string_lossy().ends_with(&suffix) {
                return std::fs::read_to_string(guest.path().join("serial.log"))
                    .unwrap_or_else(|e| format!("(unreadable: {e})"));
            }
        }
    }
    "(no guest directory)".into()
}
