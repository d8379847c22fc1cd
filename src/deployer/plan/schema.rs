//! The deployer's requests against the target release's API schema: what PVE would refuse
//! with `400 Parameter verification failed.`, found before anything is sent.

use std::collections::BTreeMap;

use fake_proxmox_schema::{ApiSchema, PveVersion, RawValue};

use crate::deployer::pve::Request;

/// The schema of the release a site runs, or why there is none to check against.
pub fn schema_for(version: Option<(u32, u32)>) -> Result<&'static ApiSchema, String> {
    let Some((major, minor)) = version else {
        return Err("its PVE release is unknown (GET /version gave none)".into());
    };
    format!("{major}.{minor}")
        .parse::<PveVersion>()
        .map(ApiSchema::get)
        .map_err(|_| {
            let known: Vec<&str> = PveVersion::ALL.iter().map(|v| v.as_str()).collect();
            format!(
                "PVE {major}.{minor} is a release whose API schema this deployer does not carry (known: {})",
                known.join(", ")
            )
        })
}

/// One parameter PVE would refuse, with PVE's own message (as a 400's `errors` map holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub parameter: String,
    pub message: String,
}

/// What `schema` refuses in `request`. PVE validates the path's parameters together with the
/// request's own, so both are checked.
pub fn refusals(schema: &ApiSchema, request: &Request<'_>) -> Vec<Refusal> {
    let mut params: BTreeMap<String, RawValue> = request
        .params
        .iter()
        .map(|(k, v)| (k.to_string(), RawValue::Text(v.clone())))
        .collect();
    for (k, v) in &request.path_params {
        params.insert(k.to_string(), RawValue::Text(v.clone()));
    }
    match schema.validate(request.method.as_str(), request.template, &params) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .into_iter()
            .map(|(parameter, message)| Refusal {
                parameter,
                message: message.trim_end().to_string(),
            })
            .collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Refusal, refusals, schema_for};
    use crate::deployer::pipeline::{VmRequestInputs, vm_requests};
    use crate::deployer::pve::Request;
    use crate::deployer::validate::{ImageSpec, StaticIp, ValidSpec};

    fn spec() -> ValidSpec {
        ValidSpec {
            kind: crate::deployer::guest::GuestKind::Vm,
            name: "web-01".into(),
            site: "site-1".into(),
            node: "ml110-01".into(),
            cores: 2,
            memory_mib: 2048,
            disk_gib: 20,
            storage: "local-lvm".into(),
            bridge: "vmbr0".into(),
            image: ImageSpec::Name {
                name: "u.qcow2".into(),
            },
            user_data: None,
            ip: None,
            ssh_keys: vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE0 admin@example".into()],
        }
    }

    fn requests(spec: &ValidSpec) -> Vec<Request<'static>> {
        vm_requests(&VmRequestInputs {
            spec,
            vmid: 104,
            listed_storages: vec!["local".into()],
            import_from: Some("local:import/u.qcow2"),
            snippet: Some("local:snippets/web-01-user.yaml"),
            ci_user: "admin",
            create: true,
            start: true,
        })
    }

    fn refused(version: (u32, u32), spec: &ValidSpec) -> Vec<(String, Refusal)> {
        let schema = schema_for(Some(version)).unwrap();
        requests(spec)
            .iter()
            .flat_map(|r| refusals(schema, r).into_iter().map(|f| (r.label(), f)))
            .collect()
    }

    #[test]
    fn a_fresh_rollout_passes_every_known_release_that_imports() {
        for v in [(8, 4), (9, 1)] {
            assert_eq!(refused(v, &spec()), vec![], "PVE {v:?}");
        }
    }

    #[test]
    fn every_mutating_call_of_a_fresh_rollout_is_listed() {
        let labels: Vec<String> = requests(&spec())
            .iter()
            .filter(|r| r.mutates())
            .map(Request::label)
            .collect();
        assert_eq!(
            labels,
            [
                "POST /nodes/{node}/qemu",
                "PUT /nodes/{node}/qemu/{vmid}/resize",
                "POST /nodes/{node}/qemu/{vmid}/config",
                "POST /nodes/{node}/qemu/{vmid}/status/start",
            ]
        );
    }

    #[test]
    fn an_address_pve_cannot_parse_is_refused_with_pves_text() {
        let mut s = spec();
        s.ip = Some(StaticIp {
            address: "10.0.0.5".parse().unwrap(),
            prefix: 4,
            gateway: None,
        });
        let found = refused((9, 1), &s);
        // The create and the cloud-init update both carry it.
        assert_eq!(found.len(), 2, "{found:#?}");
        let (label, r) = &found[0];
        assert_eq!(label, "POST /nodes/{node}/qemu");
        assert_eq!(r.parameter, "ipconfig0");
        assert!(
            r.message
                .contains("value does not look like a valid ipv4 network configuration"),
            "{r:?}"
        );
    }

    #[test]
    fn pve_7_1_has_no_import_from() {
        let found = refused((7, 1), &spec());
        assert!(
            found.iter().any(|(l, r)| l == "POST /nodes/{node}/qemu"
                && r.parameter.starts_with("scsi0")
                && r.message.contains("import-from")),
            "{found:#?}"
        );
    }

    #[test]
    fn releases_the_schema_does_not_know_are_named_not_guessed() {
        assert!(schema_for(Some((8, 4))).is_ok());
        let e = schema_for(Some((8, 3))).err().unwrap();
        assert!(
            e.contains("PVE 8.3") && e.contains("known: 7.1, 7.4, 8.4, 9.1"),
            "{e}"
        );
        assert!(schema_for(None).is_err());
    }
}
