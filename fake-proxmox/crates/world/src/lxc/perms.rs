//! Who may set which container option: pve-container's `check_ct_modify_config_perm`
//! (`src/PVE/LXC.pm`) and `check_bridge_access`.

use std::collections::BTreeMap;

use super::model::{MountPoint, MountType, NetConf, is_mp_key, is_net_key, parse_features};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;

/// The options a request sets (`new`) or deletes (`delete`) on container `vmid`, whose
/// current config is `old` (none while creating).
pub struct ConfigChange<'a> {
    /// The container's id.
    pub vmid: u32,
    /// The pool the request names (`pool=`): its privileges count as well as the container's.
    pub pool: Option<&'a str>,
    /// The config before the change; `None` while creating.
    pub old: Option<&'a BTreeMap<String, String>>,
    /// Options set, with their new values.
    pub new: &'a [(String, String)],
    /// Options deleted.
    pub delete: &'a [String],
    /// Whether the container is (or becomes) unprivileged: only then may non-root change
    /// `features`.
    pub unprivileged: bool,
}

impl Site {
    /// `check_vm_perm`: the privilege on `/vms/{vmid}`, or on the pool when one is given.
    fn check_ct_perm(
        &self,
        req: &Request,
        vmid: u32,
        pool: Option<&str>,
        privilege: &str,
    ) -> Result<(), PveError> {
        if self
            .access
            .has(&req.who, &format!("/vms/{vmid}"), privilege)
        {
            return Ok(());
        }
        if let Some(pool) = pool
            && self
                .access
                .has(&req.who, &format!("/pool/{pool}"), privilege)
        {
            return Ok(());
        }
        Err(PveError::perm(Some(format!("/vms/{vmid}, {privilege}"))))
    }

    /// `check_bridge_access`: `SDN.Use` on the bridge's zone path (root needs nothing).
    fn check_bridge_access(&self, req: &Request, raw: &str) -> Result<(), PveError> {
        if req.who.userid == "root@pam" && req.who.tokenid.is_none() {
            return Ok(());
        }
        if let Some(bridge) = NetConf::parse(raw).bridge() {
            self.require(
                &req.who,
                &format!("/sdn/zones/localnetwork/{bridge}"),
                "SDN.Use",
            )?;
        }
        Ok(())
    }

    /// `check_ct_modify_config_perm`, option by option; `root@pam` may do everything.
    pub fn check_ct_modify_config_perm(
        &self,
        req: &Request,
        c: &ConfigChange<'_>,
    ) -> Result<(), PveError> {
        if req.who.userid == "root@pam" && req.who.tokenid.is_none() {
            return Ok(());
        }
        let sets = c.new.iter().map(|(k, v)| (k.as_str(), Some(v.as_str())));
        let deletes = c.delete.iter().map(|k| (k.as_str(), None));
        for (opt, value) in sets.chain(deletes) {
            let perm = |p: &str| self.check_ct_perm(req, c.vmid, c.pool, p);
            let old = c.old.and_then(|o| o.get(opt)).map(String::as_str);
            match opt {
                "cores" | "cpuunits" | "cpulimit" => perm("VM.Config.CPU")?,
                _ if is_mp_key(opt) => {
                    perm("VM.Config.Disk")?;
                    let Some(value) = value else { continue };
                    let m = MountPoint::parse(value);
                    if m.kind() != MountType::Volume {
                        let ty = if m.kind() == MountType::Bind {
                            "bind"
                        } else {
                            "device"
                        };
                        return Err(PveError::perm(Some(format!(
                            "mount point type {ty} is only allowed for root@pam"
                        ))));
                    }
                    if let Some((sid, _)) = m.new_disk() {
                        self.require(
                            &req.who,
                            &format!("/storage/{sid}"),
                            "Datastore.AllocateSpace",
                        )?;
                    }
                }
                "memory" | "swap" => perm("VM.Config.Memory")?,
                _ if is_net_key(opt) => {
                    perm("VM.Config.Network")?;
                    if let Some(o) = old {
                        self.check_bridge_access(req, o)?;
                    }
                    if let Some(v) = value {
                        self.check_bridge_access(req, v)?;
                    }
                }
                _ if opt.starts_with("dev") && opt[3..].bytes().all(|b| b.is_ascii_digit()) => {
                    return Err(PveError::perm(Some(
                        "configuring device passthrough is only allowed for root@pam".into(),
                    )));
                }
                "nameserver" | "searchdomain" | "hostname" => perm("VM.Config.Network")?,
                "features" => {
                    if !c.unprivileged {
                        return Err(PveError::perm(Some(
                            "changing feature flags for privileged container is only allowed for root@pam"
                                .into(),
                        )));
                    }
                    let (nesting, other) = features_changed(old, value);
                    if other {
                        return Err(PveError::perm(Some(
                            "changing feature flags (except nesting) is only allowed for root@pam"
                                .into(),
                        )));
                    }
                    if nesting {
                        perm("VM.Allocate")?;
                    }
                }
                "hookscript" => {
                    return Err(PveError::perm(Some(
                        "changing the hookscript is only allowed for root@pam".into(),
                    )));
                }
                // Tag rights (`assert_tag_permissions`) are not modelled: any tag is allowed.
                "tags" => {}
                _ => perm("VM.Config.Options")?,
            }
        }
        Ok(())
    }
}

/// Whether `nesting` changed, and whether any other feature did.
fn features_changed(old: Option<&str>, new: Option<&str>) -> (bool, bool) {
    let count = |f: &BTreeMap<String, String>| {
        if f.len() == 1 && f.contains_key("nesting") {
            (true, false)
        } else {
            (false, !f.is_empty())
        }
    };
    match (old.filter(|o| !o.is_empty()), new) {
        (_, None) => count(&parse_features(old.unwrap_or_default())),
        (None, Some(n)) => count(&parse_features(n)),
        (Some(o), Some(n)) => {
            let (o, n) = (parse_features(o), parse_features(n));
            let mut nesting = false;
            for k in o.keys().chain(n.keys()) {
                if o.get(k) != n.get(k) {
                    if k == "nesting" {
                        nesting = true;
                    } else {
                        return (nesting, true);
                    }
                }
            }
            (nesting, false)
        }
    }
}
