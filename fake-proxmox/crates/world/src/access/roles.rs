//! PVE 9.1's privileges and its built-in ("special") roles, derived as pve-access-control's
//! `create_roles` derives them: privileges grouped per category into root-only, admin, user
//! and audit; `PVE<Cat>Admin` and `PVEAdmin` get admin+user+audit, `PVE<Cat>User` user+audit
//! (for categories with user privileges), `PVEAuditor` every audit privilege, plus
//! `Administrator` (all), `NoAccess` (none) and `PVETemplateUser`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// (category, root-only, admin, user, audit) — `AccessControl.pm` `$privgroups`.
type Group = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const PRIVGROUPS: &[Group] = &[
    (
        "VM",
        &[],
        &[
            "VM.Config.Disk",
            "VM.Config.CPU",
            "VM.Config.Memory",
            "VM.Config.Network",
            "VM.Config.HWType",
            "VM.Config.Options",
            "VM.Allocate",
            "VM.Clone",
            "VM.GuestAgent.Unrestricted",
            "VM.Migrate",
            "VM.Replicate",
            "VM.Snapshot",
            "VM.Snapshot.Rollback",
        ],
        &[
            "VM.Config.CDROM",
            "VM.Config.Cloudinit",
            "VM.Console",
            "VM.Backup",
            "VM.GuestAgent.FileRead",
            "VM.GuestAgent.FileSystemMgmt",
            "VM.GuestAgent.FileWrite",
            "VM.PowerMgmt",
        ],
        &["VM.Audit", "VM.GuestAgent.Audit"],
    ),
    (
        "Sys",
        &[
            "Sys.PowerMgmt",
            "Sys.Modify",
            "Sys.Incoming",
            "Sys.AccessNetwork",
        ],
        &["Sys.Console", "Sys.Syslog"],
        &[],
        &["Sys.Audit"],
    ),
    (
        "Datastore",
        &[],
        &["Datastore.Allocate", "Datastore.AllocateTemplate"],
        &["Datastore.AllocateSpace"],
        &["Datastore.Audit"],
    ),
    (
        "SDN",
        &[],
        &["SDN.Allocate", "SDN.Audit"],
        &["SDN.Use"],
        &["SDN.Audit"],
    ),
    (
        "User",
        &["Realm.Allocate"],
        &["User.Modify", "Group.Allocate", "Realm.AllocateUser"],
        &[],
        &[],
    ),
    (
        "Pool",
        &[],
        &["Pool.Allocate"],
        &["Pool.Audit"],
        &["Pool.Audit"],
    ),
    (
        "Mapping",
        &[],
        &["Mapping.Modify"],
        &["Mapping.Use"],
        &["Mapping.Audit"],
    ),
];

/// Every valid privilege (the categories' and `Permissions.Modify`), sorted.
pub static ALL_PRIVS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut all: BTreeSet<&'static str> = BTreeSet::from(["Permissions.Modify"]);
    for (_, root, admin, user, audit) in PRIVGROUPS {
        for list in [*root, *admin, *user, *audit] {
            all.extend(list.iter().copied());
        }
    }
    all.into_iter().collect()
});

/// A set of privilege names (`VM.Audit`, `Datastore.Allocate`, ...).
pub type PrivSet = BTreeSet<&'static str>;

/// The built-in roles and their privileges.
pub static BUILTIN: LazyLock<BTreeMap<String, PrivSet>> = LazyLock::new(|| {
    let mut roles: BTreeMap<String, PrivSet> = BTreeMap::new();
    roles.insert("NoAccess".into(), PrivSet::new());
    roles.insert("Administrator".into(), ALL_PRIVS.iter().copied().collect());
    roles.insert("PVEAuditor".into(), PrivSet::new());
    for (cat, _, admin, user, audit) in PRIVGROUPS {
        for p in admin.iter().chain(*user).chain(*audit) {
            roles.entry(format!("PVE{cat}Admin")).or_default().insert(p);
            roles.entry("PVEAdmin".into()).or_default().insert(p);
        }
        if !user.is_empty() {
            for p in user.iter().chain(*audit) {
                roles.entry(format!("PVE{cat}User")).or_default().insert(p);
            }
        }
        roles
            .entry("PVEAuditor".into())
            .or_default()
            .extend(audit.iter().copied());
    }
    // Only Administrator, root@pam and PVEMappingAdmin may modify mappings.
    if let Some(admin) = roles.get_mut("PVEAdmin") {
        admin.remove("Mapping.Modify");
    }
    roles.insert(
        "PVETemplateUser".into(),
        PrivSet::from(["VM.Clone", "VM.Audit"]),
    );
    roles
});

/// The privileges of a built-in role.
pub fn builtin(role: &str) -> Option<&'static PrivSet> {
    BUILTIN.get(role)
}

/// `role_is_special`: a built-in role, which cannot be changed or deleted.
pub fn is_special(role: &str) -> bool {
    BUILTIN.contains_key(role)
}

/// The privilege's canonical name, if PVE knows it.
pub fn known_priv(name: &str) -> Option<&'static str> {
    ALL_PRIVS.iter().copied().find(|p| *p == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_roles_are_pve_9_1s() {
        assert_eq!(ALL_PRIVS.len(), 47);
        let names: Vec<&str> = BUILTIN.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "Administrator",
                "NoAccess",
                "PVEAdmin",
                "PVEAuditor",
                "PVEDatastoreAdmin",
                "PVEDatastoreUser",
                "PVEMappingAdmin",
                "PVEMappingUser",
                "PVEPoolAdmin",
                "PVEPoolUser",
                "PVESDNAdmin",
                "PVESDNUser",
                "PVESysAdmin",
                "PVETemplateUser",
                "PVEUserAdmin",
                "PVEVMAdmin",
                "PVEVMUser",
            ]
        );
        let vm_user = builtin("PVEVMUser").map(|s| s.len());
        assert_eq!(vm_user, Some(10));
        assert!(!builtin("PVEAdmin").is_some_and(|s| s.contains("Mapping.Modify")));
        assert!(builtin("PVEMappingAdmin").is_some_and(|s| s.contains("Mapping.Modify")));
        assert!(!builtin("PVEAdmin").is_some_and(|s| s.contains("Sys.Modify")));
        assert_eq!(
            builtin("PVEAuditor").map(|s| s.iter().copied().collect::<Vec<_>>()),
            Some(vec![
                "Datastore.Audit",
                "Mapping.Audit",
                "Pool.Audit",
                "SDN.Audit",
                "Sys.Audit",
                "VM.Audit",
                "VM.GuestAgent.Audit",
            ])
        );
    }
}
