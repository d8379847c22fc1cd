//! The site both benchmarks load: 1,000 VMs over 50 nodes, one root token.
//! Included by `load` and `handler` with `#[path]`; not a benchmark itself.

pub const NODES: usize = 50;
pub const VMS: u32 = 1000;
pub const FIRST_VMID: u32 = 100;
pub const TOKEN: &str = "PVEAPIToken=root@pam!bench=0b6f3c1e-2f4d-4b7a-9c8e-1d2e3f4a5b6c";

pub fn scenario_yaml() -> String {
    let mut y = String::from(
        "seed: 1\nsites:\n  - name: bench\n    version: \"9.1\"\n    cluster_name: bench\n    \
         users:\n      - userid: root@pam\n        password: bench\n    tokens:\n      \
         - tokenid: root@pam!bench\n        secret: 0b6f3c1e-2f4d-4b7a-9c8e-1d2e3f4a5b6c\n        \
         privsep: false\n    nodes:\n",
    );
    for n in 1..=NODES {
        y.push_str(&format!(
            "      - name: node{n:02}\n        cores: 64\n        threads: 128\n        \
             memory_bytes: 549755813888\n        bridges:\n          - name: vmbr0\n        \
             storages:\n          - name: local-lvm\n            type: lvmthin\n            \
             content: [images, rootdir]\n            total_bytes: 10995116277760\n            \
             speed_mib_s: 100000\n"
        ));
    }
    y
}

/// The node a benchmark VM lives on.
pub fn node_of(vmid: u32) -> String {
    format!("node{:02}", (vmid as usize % NODES) + 1)
}
