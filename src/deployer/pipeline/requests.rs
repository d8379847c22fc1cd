//! Every request the pipeline sends for one VM, in its order, built by the builders the
//! pipeline's steps call ([`Request`]'s constructors, [`create_params`],
//! [`cloud_init_params`], [`resize_size`]). `plan` validates this list against the target
//! release's schema; a test compares it with what a real run sends.

use super::rules::{cloud_init_params, create_params, resize_size};
use crate::deployer::pve::Request;
use crate::deployer::validate::ValidSpec;

/// What the pipeline would know of a VM when it builds its requests.
#[derive(Debug, Clone)]
pub struct VmRequestInputs<'a> {
    pub spec: &'a ValidSpec,
    /// The VMID it is created under or adopted with (`plan` cannot know a fresh one: PVE's
    /// `nextid` hands it out at create time, always within PVE's own range).
    pub vmid: u32,
    /// The storages whose content the image step lists.
    pub listed_storages: Vec<String>,
    /// The `import-from` source; `None` leaves the create out (nothing to build it from).
    pub import_from: Option<&'a str>,
    pub snippet: Option<&'a str>,
    pub ci_user: &'a str,
    /// Whether the VM is created (false: an existing one is adopted).
    pub create: bool,
    pub start: bool,
}

/// The requests of one VM's pipeline run that finds nothing already done: every read whose
/// parameters come from the manifest and every mutating call.
pub fn vm_requests(i: &VmRequestInputs<'_>) -> Vec<Request<'static>> {
    let spec = i.spec;
    let node = spec.node.as_str();
    let mut out = vec![
        Request::node_status(node),
        Request::network(node),
        Request::storages(node),
        Request::vm_resources(),
        Request::node_guests(spec.kind, node),
    ];
    if i.create {
        out.extend(
            i.listed_storages
                .iter()
                .map(|s| Request::storage_content(node, s)),
        );
        if let Some(from) = i.import_from {
            out.push(Request::next_id());
            out.push(Request::create_vm(
                node,
                &create_params(spec, i.vmid, from, i.snippet, i.ci_user),
            ));
        }
    }
    out.push(Request::vm_config(node, i.vmid));
    out.push(Request::resize(
        node,
        i.vmid,
        "scsi0",
        &resize_size(spec.disk_gib),
    ));
    // Sent when the VM has no cloud-init drive yet (an adopted VM made elsewhere).
    out.push(Request::update_config(
        node,
        i.vmid,
        &cloud_init_params(spec, i.ci_user),
    ));
    if i.start {
        out.push(Request::vm_current(node, i.vmid));
        out.push(Request::start_vm(node, i.vmid));
        out.push(Request::agent_interfaces(node, i.vmid));
    }
    out
}
