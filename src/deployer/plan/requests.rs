//! The requests a rollout would send, built by the same functions the pipeline sends them with,
//! checked against the target's own API schema (its PVE release's) before any is sent. What PVE
//! would refuse with `400 Parameter verification failed.` becomes a plan error carrying PVE's
//! own text, so a bad value or a release gate (`import-from` before PVE 7.2, say) shows up in
//! the plan instead of half-way through a rollout.

use std::collections::BTreeMap;

use fake_proxmox_schema::{ApiSchema, ParamErrors, PveVersion, RawValue};

use crate::deployer::pipeline::{cloudinit_params, create_params, resize_size};
use crate::deployer::validate::ValidSpec;

/// The VMID the plan writes into requests: the real one comes from `nextid` when the VM is
/// created, and every valid id passes the schema alike.
pub const PLACEHOLDER_VMID: u32 = 100;

/// One request as the pipeline would send it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: &'static str,
    /// The schema's path template (`/nodes/{node}/qemu/{vmid}/resize`).
    pub template: &'static str,
    pub path_params: Vec<(&'static str, String)>,
    pub params: Vec<(&'static str, String)>,
}

impl Request {
    /// The path with its parameters filled in.
    pub fn path(&self) -> String {
        self.path_params
            .iter()
            .fold(self.template.to_string(), |p, (k, v)| {
                p.replace(&format!("{{{k}}}"), v)
            })
    }

    /// PVE's parameter errors for this request under `schema`, keyed by parameter.
    pub fn refusals(&self, schema: &ApiSchema) -> ParamErrors {
        let mut input: BTreeMap<String, RawValue> = BTreeMap::new();
        // PVE merges the path's parameters into the request's before checking them.
        for (k, v) in self.path_params.iter().chain(&self.params) {
            input.insert(k.to_string(), RawValue::Text(v.clone()));
        }
        schema
            .validate(self.method, self.template, &input)
            .err()
            .unwrap_or_default()
    }
}

/// Every request that changes something in a fresh rollout of one VM: the create (disk
/// imported from `import_from`, the cloud-init drive, `cicustom` when a snippet exists), the
/// disk resize, the cloud-init config an adopted VM without a drive would get, and the start.
pub fn fresh_rollout(
    spec: &ValidSpec,
    vmid: u32,
    import_from: &str,
    snippet: Option<&str>,
    ci_user: &str,
) -> Vec<Request> {
    let node = || ("node", spec.node.clone());
    let on_vm = || vec![node(), ("vmid", vmid.to_string())];
    let mut create = create_params(spec, vmid, import_from, snippet, ci_user);
    // `vmid` is part of the create's body, not of its path.
    create.retain(|(k, _)| *k != "vmid");
    vec![
        Request {
            method: "POST",
            template: "/nodes/{node}/qemu",
            path_params: vec![node(), ("vmid", vmid.to_string())],
            params: create,
        },
        Request {
            method: "PUT",
            template: "/nodes/{node}/qemu/{vmid}/resize",
            path_params: on_vm(),
            params: vec![
                ("disk", "scsi0".to_string()),
                ("size", resize_size(spec.disk_gib)),
            ],
        },
        Request {
            method: "POST",
            template: "/nodes/{node}/qemu/{vmid}/config",
            path_params: on_vm(),
            params: cloudinit_params(spec, ci_user),
        },
        Request {
            method: "POST",
            template: "/nodes/{node}/qemu/{vmid}/status/start",
            path_params: on_vm(),
            params: Vec::new(),
        },
    ]
}

/// The schema of the release a site reports (`GET /version`), when this build has it; no
/// other release is guessed at.
pub fn schema_of(release: Option<(u32, u32)>) -> Result<PveVersion, String> {
    let known = || {
        PveVersion::ALL
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some((major, minor)) = release else {
        return Err(format!(
            "its release is unknown (no answer from /version); the schemas known here are {}",
            known()
        ));
    };
    format!("{major}.{minor}").parse::<PveVersion>().map_err(|_| {
        format!(
            "PVE {major}.{minor} has no schema in this build (known: {}); its requests were not checked",
            known()
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::deployer::validate::ImageSpec;

    fn spec(name: &str) -> ValidSpec {
        ValidSpec {
            name: name.to_string(),
            site: "site-1".into(),
            node: "ml110-01".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: 20,
            storage: "local-lvm".into(),
            bridge: "vmbr0".into(),
            image: ImageSpec::Name {
                name: "ubuntu-22.04-cloud.img".into(),
            },
            user_data: None,
            ip: None,
            ssh_keys: Vec::new(),
        }
    }

    fn refusals(spec: &ValidSpec, v: PveVersion) -> Vec<(String, String, String)> {
        let schema = ApiSchema::get(v);
        fresh_rollout(
            spec,
            PLACEHOLDER_VMID,
            "local:import/ubuntu.qcow2",
            None,
            "admin",
        )
        .iter()
        .flat_map(|r| {
            r.refusals(schema)
                .into_iter()
                .map(|(k, m)| (format!("{} {}", r.method, r.template), k, m))
                .collect::<Vec<_>>()
        })
        .collect()
    }

    #[test]
    fn the_seed_shaped_rollout_passes_the_9_1_and_8_4_schemas() {
        assert_eq!(refusals(&spec("web-01"), PveVersion::V9_1), Vec::new());
        assert_eq!(refusals(&spec("web-01"), PveVersion::V8_4), Vec::new());
    }

    #[test]
    fn import_from_is_refused_before_7_2() {
        let r = refusals(&spec("web-01"), PveVersion::V7_1);
        assert!(
            r.iter().any(|(req, k, m)| req == "POST /nodes/{node}/qemu"
                && k == "scsi0"
                && m.contains("import-from")),
            "{r:?}"
        );
    }

    #[test]
    fn a_storage_id_pve_refuses_is_reported_with_pve_s_text() {
        // The deployer's own rule lets a storage id end in `-`; PVE's `pve-storage-id` does not.
        let mut bad = spec("web-01");
        bad.storage = "lvm-".into();
        let r = refusals(&bad, PveVersion::V9_1);
        assert!(
            r.iter().any(|(req, k, m)| req == "POST /nodes/{node}/qemu"
                && k == "scsi0"
                && m.contains("unable to parse volume ID 'lvm-:0'")),
            "{r:?}"
        );
    }

    #[test]
    fn paths_are_filled_and_releases_are_not_guessed() {
        let reqs = fresh_rollout(&spec("w"), 123, "local:import/x.qcow2", None, "admin");
        assert_eq!(reqs[1].path(), "/nodes/ml110-01/qemu/123/resize");
        assert_eq!(schema_of(Some((9, 1))), Ok(PveVersion::V9_1));
        assert!(schema_of(Some((8, 2))).unwrap_err().contains("no schema"));
        assert!(schema_of(None).is_err());
    }
}
