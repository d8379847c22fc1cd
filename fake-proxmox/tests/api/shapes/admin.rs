//! The shapes test's part for what deployers manage beside VMs: users, groups, roles,
//! ACLs, realms, pools and a node's version.

use super::{Call, NODE};
use crate::common::*;

/// A group, a user in it with a token, a custom role, ACLs, a pool with VM 100 and a
/// storage, and a realm that enforces TFA.
pub async fn populate(api: &Api) {
    for (method, path, form) in [
        (
            "POST",
            "/access/groups",
            vec![("groupid", "ops"), ("comment", "Operators")],
        ),
        (
            "POST",
            "/access/users",
            vec![
                ("userid", "deployer@pve"),
                ("password", "deployer-pw"),
                ("groups", "ops"),
                ("email", "d@example.com"),
                ("comment", "CI"),
            ],
        ),
        // Without a token: PVE sends `"tokens": null` for it.
        ("POST", "/access/users", vec![("userid", "viewer@pve")]),
        (
            "POST",
            "/access/users/deployer@pve/token/ci",
            vec![("comment", "pipeline")],
        ),
        (
            "POST",
            "/access/roles",
            vec![("roleid", "Deployer"), ("privs", "VM.Audit,VM.Allocate")],
        ),
        (
            "PUT",
            "/access/acl",
            vec![("path", "/vms"), ("roles", "PVEVMUser"), ("groups", "ops")],
        ),
        (
            "PUT",
            "/access/acl",
            vec![
                ("path", "/pool/prod"),
                ("roles", "Deployer"),
                ("tokens", "deployer@pve!ci"),
            ],
        ),
        (
            "POST",
            "/pools",
            vec![("poolid", "prod"), ("comment", "Production")],
        ),
        // `PUT /pools/{poolid}`: every release has it (`PUT /pools` came with 8.x).
        (
            "PUT",
            "/pools/prod",
            vec![("vms", "100"), ("storage", "local")],
        ),
        ("PUT", "/access/domains/pve", vec![("tfa", "type=oath")]),
    ] {
        let r = api.send(method, path, &form).await;
        assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    }
}

/// One call per access, pool and node-version GET.
pub fn calls() -> Vec<Call> {
    let q = |k: &'static str, val: &str| vec![(k, val.to_string())];
    vec![
        ("/access/users", "/access/users".into(), vec![]),
        ("/access/users", "/access/users".into(), q("full", "1")),
        (
            "/access/users/{userid}",
            "/access/users/deployer@pve".into(),
            vec![],
        ),
        (
            "/access/users/{userid}",
            "/access/users/viewer@pve".into(),
            vec![],
        ),
        (
            "/access/users/{userid}",
            "/access/users/root@pam".into(),
            vec![],
        ),
        (
            "/access/users/{userid}/tfa",
            "/access/users/deployer@pve/tfa".into(),
            vec![],
        ),
        ("/access/groups", "/access/groups".into(), vec![]),
        (
            "/access/groups/{groupid}",
            "/access/groups/ops".into(),
            vec![],
        ),
        ("/access/roles", "/access/roles".into(), vec![]),
        (
            "/access/roles/{roleid}",
            "/access/roles/Deployer".into(),
            vec![],
        ),
        (
            "/access/roles/{roleid}",
            "/access/roles/PVEVMAdmin".into(),
            vec![],
        ),
        ("/access/acl", "/access/acl".into(), vec![]),
        ("/access/domains", "/access/domains".into(), vec![]),
        ("/pools", "/pools".into(), vec![]),
        ("/pools", "/pools".into(), q("poolid", "prod")),
        ("/pools/{poolid}", "/pools/prod".into(), vec![]),
        (
            "/nodes/{node}/version",
            format!("/nodes/{NODE}/version"),
            vec![],
        ),
    ]
}
