//! Restoring a container from a vzdump backup (`POST /nodes/{node}/lxc` with `restore=1`):
//! the archive's config recovered and merged with the request's, its mount points made anew
//! at their sizes, and PVE's refusals.

use fake_proxmox::{ClockMode, Scenario};

use crate::common::*;
use crate::lxc::{NODE, ct, task};

const BACKUP: &str = "local:backup/vzdump-lxc-150-2025_01_01-02_00_00.tar.zst";
const NO_CONFIG: &str = "local:backup/vzdump-lxc-151-2025_01_01-02_00_00.tar.zst";

/// The embedded sites with two container backups on ml110-01's `local`: one whose archive
/// holds its config, one that holds none.
async fn with_backups() -> Fake {
    let template = "              - volname: vztmpl/debian-12-standard_12.7-1_amd64.tar.zst   # chosen: PVE's appliance template\n                size_bytes: 126628704\n";
    let backups = "              - volname: backup/vzdump-lxc-150-2025_01_01-02_00_00.tar.zst\n                size_bytes: 314572800\n                config: |\n                  arch: amd64\n                  cores: 2\n                  hostname: restored-cache\n                  memory: 1024\n                  mp0: local-lvm:vm-150-disk-1,mp=/data,size=2G\n                  net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth\n                  ostype: debian\n                  rootfs: local-lvm:vm-150-disk-0,size=6G\n                  swap: 512\n                  unprivileged: 1\n              - volname: backup/vzdump-lxc-151-2025_01_01-02_00_00.tar.zst\n                size_bytes: 104857600\n";
    let yaml = Scenario::default_yaml();
    assert!(
        yaml.contains(template),
        "the embedded scenario's template entry moved"
    );
    let yaml = yaml.replacen(template, &format!("{template}{backups}"), 1);
    let scenario = Scenario::from_yaml_str(&yaml).expect("the scenario parses");
    start_with(scenario, ClockMode::Stepped).await
}

fn restore<'a>(vmid: &'a str, archive: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("vmid", vmid),
        ("ostemplate", archive),
        ("restore", "1"),
        ("storage", "local-lvm"),
    ]
}

#[tokio::test]
async fn a_backup_restores_with_its_config_and_volumes_at_their_sizes() {
    let f = with_backups().await;
    let api = f.api("site-1");
    let done = task(&f, &api, "POST", &ct(""), &restore("300", BACKUP)).await;
    assert_eq!(done["type"], "vzrestore");
    assert_eq!(done["exitstatus"], "OK", "{done}");
    let log = task_log(&api, NODE, done["upid"].as_str().unwrap()).await;
    for line in [
        format!("recovering backed-up configuration from '{BACKUP}'"),
        format!("restoring '{BACKUP}' now.."),
        "merging backed-up and given configuration..".to_string(),
    ] {
        assert!(log.contains(&line), "{line:?} not in {log:#?}");
    }
    let c = api.get(&ct("/300/config")).await;
    let c = c.data();
    assert_eq!(c["hostname"], "restored-cache");
    assert_eq!(c["cores"], 2);
    assert_eq!(c["memory"], 1024);
    assert_eq!(c["rootfs"], "local-lvm:vm-300-disk-0,size=6G");
    assert_eq!(c["mp0"], "local-lvm:vm-300-disk-1,mp=/data,size=2G");
    assert_eq!(
        c["net0"],
        "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth"
    );
    assert_eq!(c["unprivileged"], 1);

    // `unique` gives the NIC a new address; what the request sets wins over the archive.
    let again = task(
        &f,
        &api,
        "POST",
        &ct(""),
        &[
            restore("301", BACKUP),
            vec![("unique", "1"), ("hostname", "second")],
        ]
        .concat(),
    )
    .await;
    assert_eq!(again["exitstatus"], "OK", "{again}");
    let c = api.get(&ct("/301/config")).await;
    assert_eq!(c.data()["hostname"], "second");
    let net0 = c.data()["net0"].as_str().unwrap().to_string();
    assert!(
        !net0.contains("BC:24:11:AA:BB:CC") && net0.contains("hwaddr=BC:24:11:"),
        "{net0}"
    );

    // The VMID is taken; an archive without a config fails the task and leaves nothing.
    let taken = api.post(&ct(""), &restore("300", BACKUP)).await;
    assert_eq!(
        taken.message(),
        "CT 300 already exists on node 'ml110-01'\n"
    );
    let empty = task(&f, &api, "POST", &ct(""), &restore("302", NO_CONFIG)).await;
    assert_eq!(
        empty["exitstatus"],
        "unable to restore CT 302 - ERROR: archive contains no configuration file"
    );
    assert_eq!(api.get(&ct("/302/config")).await.status, 500);
    // A template is not a backup.
    let wrong = api
        .post(
            &ct(""),
            &restore(
                "303",
                "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            ),
        )
        .await;
    assert_eq!(
        wrong.message(),
        "unable to use volume local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst - content type needs to be 'backup'\n"
    );
}
