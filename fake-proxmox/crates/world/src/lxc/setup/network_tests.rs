use super::*;

fn config(nets: &[(&str, &str)]) -> BTreeMap<String, String> {
    nets.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn file(nets: &[(&str, &str)], version: u32, old: Option<&str>) -> String {
    interfaces_file(&config(nets), version, old)
        .expect("the config parses")
        .expect("a NIC is configured")
}

#[test]
fn a_dhcp_nic_gets_a_dhcp_stanza_after_loopback() {
    assert_eq!(
        file(&[("net0", "name=eth0,bridge=vmbr0,ip=dhcp")], 12, None),
        "auto lo\niface lo inet loopback\niface lo inet6 loopback\n\nauto eth0\niface eth0 inet dhcp\n\n"
    );
}

#[test]
fn a_static_address_is_written_with_its_prefix_from_debian_10_on() {
    let nets = [(
        "net0",
        "name=eth0,bridge=vmbr0,ip=192.168.11.50/24,gw=192.168.11.1",
    )];
    assert!(file(&nets, 12, None).ends_with(
        "auto eth0\niface eth0 inet static\n\taddress 192.168.11.50/24\n\tgateway 192.168.11.1\n\n"
    ));
    // Older releases take the address and its netmask apart.
    assert_eq!(
        file(
            &[("net0", "name=eth0,ip=1.2.3.2/24,gw=1.2.3.1")],
            7,
            Some("auto lo\niface lo inet loopback\n")
        ),
        "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n\taddress 1.2.3.2\n\tnetmask 255.255.255.0\n\tgateway 1.2.3.1\n\n"
    );
}

#[test]
fn a_gateway_outside_the_subnet_gets_route_scripts() {
    let out = file(
        &[("net0", "name=eth0,ip=10.0.0.5/24,gw=10.9.0.1")],
        12,
        None,
    );
    assert!(
        out.ends_with(
            "iface eth0 inet static\n\taddress 10.0.0.5/24\n# --- BEGIN PVE ---\n\tpost-up ip route add 10.9.0.1 dev eth0\n\tpost-up ip route add default via 10.9.0.1 dev eth0\n\tpre-down ip route del default via 10.9.0.1 dev eth0\n\tpre-down ip route del 10.9.0.1 dev eth0\n# --- END PVE ---\n\n"
        ),
        "{out}"
    );
}

#[test]
fn ipv6_stanzas_follow_the_ipv4_one() {
    let out = file(
        &[("net0", "name=eth0,ip=dhcp,ip6=fd00::5/64,gw6=fd00::1")],
        12,
        None,
    );
    assert!(
        out.ends_with(
            "auto eth0\niface eth0 inet dhcp\n\niface eth0 inet6 static\n\taddress fd00::5/64\n\tgateway fd00::1\n\n"
        ),
        "{out}"
    );
    let auto = file(&[("net1", "name=eth1,ip6=auto")], 12, None);
    assert!(
        auto.ends_with("auto eth1\niface eth1 inet6 auto\n\n"),
        "{auto}"
    );
}

#[test]
fn the_users_options_other_interfaces_and_comments_stay() {
    let old = "# my network\nauto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n\taddress 10.1.1.1/24\n\tgateway 10.1.1.254\n\tmtu 9000\n\nauto eth9\niface eth9 inet manual\n";
    let out = file(&[("net0", "name=eth0,ip=dhcp")], 12, Some(old));
    assert_eq!(
        out,
        "# my network\nauto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n\nauto eth9\niface eth9 inet manual\n"
    );
    let out = file(&[("net0", "name=eth0,ip=10.2.2.2/24")], 12, Some(old));
    assert!(
        out.contains("iface eth0 inet static\n\taddress 10.2.2.2/24\n\tmtu 9000\n\n"),
        "{out}"
    );
}

#[test]
fn writing_the_file_again_changes_nothing() {
    for nets in [
        vec![("net0", "name=eth0,ip=dhcp")],
        vec![("net0", "name=eth0,ip=10.0.0.5/24,gw=10.9.0.1")],
        vec![
            ("net0", "name=eth0,ip=192.168.11.50/24,gw=192.168.11.1"),
            ("net1", "name=eth1,ip=dhcp,ip6=auto"),
        ],
    ] {
        let first = file(&nets, 12, None);
        assert_eq!(file(&nets, 12, Some(&first)), first, "{nets:?}");
    }
}

#[test]
fn old_route_scripts_go_when_the_gateway_moves_into_the_subnet() {
    let first = file(
        &[("net0", "name=eth0,ip=10.0.0.5/24,gw=10.9.0.1")],
        12,
        None,
    );
    let second = file(
        &[("net0", "name=eth0,ip=10.0.0.5/24,gw=10.0.0.1")],
        12,
        Some(&first),
    );
    assert!(!second.contains("post-up"), "{second}");
    assert!(second.contains("\tgateway 10.0.0.1\n"), "{second}");
}

#[test]
fn nics_without_a_name_or_address_leave_the_file_alone() {
    assert_eq!(
        interfaces_file(&config(&[("net0", "bridge=vmbr0,ip=dhcp")]), 12, None),
        Ok(None)
    );
    assert_eq!(
        interfaces_file(&config(&[("net0", "name=eth0,bridge=vmbr0")]), 12, None),
        Ok(None)
    );
}

#[test]
fn addresses_pve_cannot_parse_fail() {
    assert_eq!(
        interfaces_file(&config(&[("net0", "name=eth0,ip=10.0.0.5")]), 12, None),
        Err("unable to parse ipv4 address/mask".to_string())
    );
    assert_eq!(
        interfaces_file(&config(&[("net0", "name=eth0,ip=10.0.0.5/4")]), 12, None),
        Err("unable to parse ipv4 address/mask".to_string())
    );
    assert_eq!(
        interfaces_file(&config(&[("net0", "name=eth0,ip6=fd00::5")]), 12, None),
        Err("unable to parse ipv6 address/prefix".to_string())
    );
}
