//! The requests the deployer makes, as values: method, PVE's path template, the template's
//! parameters and the request's own. The client sends them ([`PveClient::send`](super::PveClient::send))
//! and `plan` checks the very same values against the target release's schema, so what is
//! checked cannot drift from what is sent.

use reqwest::Method;

/// One API request, before it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: Method,
    /// PVE's path template, e.g. `/nodes/{node}/qemu/{vmid}/config`.
    pub template: &'static str,
    /// The values of the template's `{…}` segments.
    pub path_params: Vec<(&'static str, String)>,
    /// Form body (POST/PUT) or query string (GET/DELETE).
    pub params: Vec<(&'a str, String)>,
}

impl<'a> Request<'a> {
    pub(super) fn new(
        method: Method,
        template: &'static str,
        path_params: Vec<(&'static str, String)>,
    ) -> Self {
        Self {
            method,
            template,
            path_params,
            params: Vec::new(),
        }
    }

    pub(super) fn with(mut self, params: Vec<(&'a str, String)>) -> Self {
        self.params = params;
        self
    }

    /// The concrete path: the template with its segments filled in.
    pub fn path(&self) -> String {
        let mut path = self.template.to_string();
        for (name, value) in &self.path_params {
            path = path.replace(&format!("{{{name}}}"), value);
        }
        path
    }

    /// `POST /nodes/{node}/qemu`: how PVE's documentation and its errors name the call.
    pub fn label(&self) -> String {
        format!("{} {}", self.method, self.template)
    }

    /// Whether sending it can change anything.
    pub fn mutates(&self) -> bool {
        self.method != Method::GET
    }

    pub fn version() -> Self {
        Self::new(Method::GET, "/version", vec![])
    }

    pub fn nodes() -> Self {
        Self::new(Method::GET, "/nodes", vec![])
    }

    pub fn node_status(node: &str) -> Self {
        Self::new(Method::GET, "/nodes/{node}/status", node_param(node))
    }

    pub fn network(node: &str) -> Self {
        Self::new(Method::GET, "/nodes/{node}/network", node_param(node))
    }

    pub fn storages(node: &str) -> Self {
        Self::new(Method::GET, "/nodes/{node}/storage", node_param(node))
    }

    pub fn storage_content(node: &str, storage: &str) -> Self {
        Self::new(
            Method::GET,
            "/nodes/{node}/storage/{storage}/content",
            vec![("node", node.to_string()), ("storage", storage.to_string())],
        )
    }

    pub fn next_id() -> Self {
        Self::new(Method::GET, "/cluster/nextid", vec![])
    }

    pub fn vm_resources() -> Self {
        Self::new(Method::GET, "/cluster/resources", vec![]).with(vec![("type", "vm".into())])
    }

    pub fn create_vm(node: &str, params: &super::Params<'a>) -> Self {
        Self::new(Method::POST, "/nodes/{node}/qemu", node_param(node)).with(params.to_vec())
    }

    pub fn vm_config(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::GET,
            "/nodes/{node}/qemu/{vmid}/config",
            vm_params(node, vmid),
        )
    }

    /// The asynchronous config update (answers a UPID).
    pub fn update_config(node: &str, vmid: u32, params: &super::Params<'a>) -> Self {
        Self::new(
            Method::POST,
            "/nodes/{node}/qemu/{vmid}/config",
            vm_params(node, vmid),
        )
        .with(params.to_vec())
    }

    pub fn resize(node: &str, vmid: u32, disk: &str, size: &str) -> Self {
        Self::new(
            Method::PUT,
            "/nodes/{node}/qemu/{vmid}/resize",
            vm_params(node, vmid),
        )
        .with(vec![("disk", disk.to_string()), ("size", size.to_string())])
    }

    pub fn vm_current(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::GET,
            "/nodes/{node}/qemu/{vmid}/status/current",
            vm_params(node, vmid),
        )
    }

    pub fn start_vm(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::POST,
            "/nodes/{node}/qemu/{vmid}/status/start",
            vm_params(node, vmid),
        )
    }

    pub fn stop_vm(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::POST,
            "/nodes/{node}/qemu/{vmid}/status/stop",
            vm_params(node, vmid),
        )
    }

    /// `DELETE` with `purge=1` and `destroy-unreferenced-disks=1`: nothing of the VM stays behind.
    pub fn destroy_vm(node: &str, vmid: u32) -> Self {
        let mut params = vec![
            ("purge", "1".to_string()),
            ("destroy-unreferenced-disks", "1".to_string()),
        ];
        if crate::mutants::active(crate::mutants::Mutant::DestroyWithoutPurge) {
            params.remove(0);
        }
        Self::new(
            Method::DELETE,
            "/nodes/{node}/qemu/{vmid}",
            vm_params(node, vmid),
        )
        .with(params)
    }

    pub fn agent_interfaces(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::GET,
            "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces",
            vm_params(node, vmid),
        )
    }
}

pub(super) fn node_param(node: &str) -> Vec<(&'static str, String)> {
    vec![("node", node.to_string())]
}

pub(super) fn vm_params(node: &str, vmid: u32) -> Vec<(&'static str, String)> {
    vec![("node", node.to_string()), ("vmid", vmid.to_string())]
}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn paths_fill_the_template_and_labels_keep_it() {
        let r = Request::resize("ml110-01", 104, "scsi0", "20G");
        assert_eq!(r.path(), "/nodes/ml110-01/qemu/104/resize");
        assert_eq!(r.label(), "PUT /nodes/{node}/qemu/{vmid}/resize");
        assert_eq!(
            r.params,
            vec![("disk", "scsi0".to_string()), ("size", "20G".to_string())]
        );
        assert!(r.mutates());
        let c = Request::storage_content("r630-01", "local");
        assert_eq!(c.path(), "/nodes/r630-01/storage/local/content");
        assert!(!c.mutates());
    }
}
