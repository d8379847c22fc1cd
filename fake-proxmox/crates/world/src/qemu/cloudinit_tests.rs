#![allow(clippy::unwrap_used)]

use super::*;
use crate::qemu::model::Power;

fn vm(pairs: &[(&str, &str)]) -> Vm {
    let config = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut vm = Vm::stopped(100, "pve", config, None);
    vm.power = Power::Running;
    vm.cloudinit = Section::new();
    vm
}

fn host() -> HostDns {
    HostDns {
        search: None,
        nameservers: vec!["192.0.2.1".into()],
    }
}

#[test]
fn a_changed_value_is_recorded_once_and_a_revert_clears_it() {
    let mut ci = Section::new();
    record_change(&mut ci, "ciuser", Some("a"), Some("b"));
    assert_eq!(ci["ciuser"], "a");
    record_change(&mut ci, "ciuser", Some("b"), Some("c"));
    assert_eq!(ci["ciuser"], "a", "the image still holds the first value");
    record_change(&mut ci, "ciuser", Some("c"), Some("a"));
    assert!(ci.is_empty(), "back to the image's value: {ci:?}");
}

#[test]
fn added_and_deleted_values_are_tracked() {
    let mut ci = Section::new();
    record_change(&mut ci, "sshkeys", None, Some("k"));
    record_change(&mut ci, "ipconfig0", None, Some("ip=dhcp"));
    assert_eq!(ci["added"], "ipconfig0,sshkeys");
    record_change(&mut ci, "sshkeys", Some("k"), None);
    assert_eq!(
        ci["added"], "ipconfig0",
        "an added then deleted value leaves no trace"
    );
    record_change(&mut ci, "nameserver", Some("1.1.1.1"), None);
    assert_eq!(ci["nameserver"], "1.1.1.1");
    record_change(&mut ci, "memory", Some("1"), Some("2"));
    assert!(!ci.contains_key("memory"), "not a cloud-init key");
}

#[test]
fn pending_list_reports_image_and_config_values() {
    let mut v = vm(&[
        ("ciuser", "new"),
        ("cipassword", "secret"),
        ("searchdomain", "example.org"),
        ("ipconfig0", "ip=dhcp"),
        ("ciupgrade", "0"),
    ]);
    record_change(&mut v.cloudinit, "ciuser", Some("old"), Some("new"));
    record_change(&mut v.cloudinit, "ipconfig0", None, Some("ip=dhcp"));
    record_change(&mut v.cloudinit, "nameserver", Some("9.9.9.9"), None);
    let list = pending_list(&v);
    let items = list.as_array().unwrap();
    assert_eq!(items[0], json!({"key": "ipconfig0", "pending": "ip=dhcp"}));
    assert!(items.contains(&json!({"key": "ciuser", "value": "old", "pending": "new"})));
    assert!(items.contains(&json!({"key": "cipassword", "value": "**********"})));
    assert!(items.contains(&json!({"key": "searchdomain", "value": "example.org"})));
    assert!(items.contains(&json!({"key": "nameserver", "delete": 1})));
    assert!(
        !items.iter().any(|i| i["key"] == "ciupgrade"),
        "PVE skips false values: {list}"
    );
}

#[test]
fn user_data_matches_pve_layout() {
    let v = vm(&[
        ("name", "web-1"),
        ("searchdomain", "example.org"),
        ("ciuser", "ubuntu"),
        ("sshkeys", "ssh-ed25519%20AAAA%20a%40b%0A%0Assh-rsa%20BBBB"),
    ]);
    assert_eq!(
        dump(&v, DumpType::User, &host()),
        "#cloud-config\nhostname: web-1\nmanage_etc_hosts: true\nfqdn: web-1.example.org\n\
         user: ubuntu\nssh_authorized_keys:\n  - ssh-ed25519 AAAA a@b\n  - ssh-rsa BBBB\n\
         chpasswd:\n  expire: False\nusers:\n  - default\npackage_upgrade: true\n"
    );
    let root = vm(&[("name", "db.lan"), ("ciuser", "root"), ("ciupgrade", "0")]);
    assert_eq!(
        dump(&root, DumpType::User, &host()),
        "#cloud-config\nhostname: db\nmanage_etc_hosts: true\nfqdn: db.lan\n\
         user: root\ndisable_root: False\nchpasswd:\n  expire: False\n"
    );
}

#[test]
fn nocloud_network_lists_configured_nics_and_dns() {
    let v = vm(&[
        ("net0", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"),
        ("net1", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
        ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1,ip6=auto"),
    ]);
    assert_eq!(
        dump(&v, DumpType::Network, &host()),
        "version: 1\nconfig:\n    - type: physical\n      name: eth0\n      \
         mac_address: 'bc:24:11:aa:bb:cc'\n      subnets:\n      - type: static\n        \
         address: '10.0.0.5'\n        netmask: '255.255.255.0'\n        gateway: '10.0.0.1'\n      \
         - type: ipv6_slaac\n    - type: nameserver\n      address:\n      - '192.0.2.1'\n"
    );
}

#[test]
fn configdrive2_for_windows_and_meta_ids_follow_the_content() {
    let v = vm(&[
        ("ostype", "win11"),
        ("net0", "e1000=BC:24:11:AA:BB:CC,bridge=vmbr0"),
        ("ipconfig0", "ip=dhcp"),
        ("nameserver", "1.1.1.1 8.8.8.8"),
    ]);
    assert_eq!(
        dump(&v, DumpType::Network, &host()),
        "auto lo\niface lo inet loopback\n\n        dns_nameservers 1.1.1.1 8.8.8.8\n\
         auto eth0\niface eth0 inet dhcp\n"
    );
    let meta = dump(&v, DumpType::Meta, &host());
    assert!(meta.starts_with("{\n     \"uuid\": \""), "{meta}");
    let mut renamed = v.clone();
    renamed.config.insert("name".into(), "other".into());
    assert_ne!(meta, dump(&renamed, DumpType::Meta, &host()));
    let linux = vm(&[("name", "a")]);
    let m = dump(&linux, DumpType::Meta, &host());
    assert!(
        m.starts_with("instance-id: ") && m.len() == "instance-id: ".len() + 41,
        "{m}"
    );
}

#[test]
fn netmasks_from_prefix_lengths() {
    assert_eq!(split_ip4("10.1.2.3/8").1, "255.0.0.0");
    assert_eq!(split_ip4("10.1.2.3/32").1, "255.255.255.255");
    assert_eq!(split_ip4("10.1.2.3/0").1, "0.0.0.0");
    assert_eq!(split_ip4("10.1.2.3/23").1, "255.255.254.0");
}
