//! The calls that differ between a VM (`/nodes/{node}/qemu`) and a container
//! (`/nodes/{node}/lxc`): each takes the guest's kind, so the deployer's kind-neutral paths
//! (adopt, start, status, destroy) make the right one.

use reqwest::Method;

use super::api::{ClusterResource, NodeGuest, VmConfig, VmCurrent};
use super::request::{Request, node_param, vm_params};
use super::{PveClient, PveError};
use crate::deployer::guest::GuestKind;

impl<'a> Request<'a> {
    /// `GET /nodes/{node}/qemu` or `GET /nodes/{node}/lxc`: the node's guests of one kind.
    pub fn node_guests(kind: GuestKind, node: &str) -> Self {
        let template = match kind {
            GuestKind::Vm => "/nodes/{node}/qemu",
            GuestKind::Container => "/nodes/{node}/lxc",
        };
        Self::new(Method::GET, template, node_param(node))
    }

    /// `POST /nodes/{node}/lxc`
    pub fn create_ct(node: &str, params: &super::Params<'a>) -> Self {
        Self::new(Method::POST, "/nodes/{node}/lxc", node_param(node)).with(params.to_vec())
    }

    pub fn guest_config(kind: GuestKind, node: &str, vmid: u32) -> Self {
        match kind {
            GuestKind::Vm => Self::vm_config(node, vmid),
            GuestKind::Container => Self::new(
                Method::GET,
                "/nodes/{node}/lxc/{vmid}/config",
                vm_params(node, vmid),
            ),
        }
    }

    pub fn guest_current(kind: GuestKind, node: &str, vmid: u32) -> Self {
        match kind {
            GuestKind::Vm => Self::vm_current(node, vmid),
            GuestKind::Container => Self::new(
                Method::GET,
                "/nodes/{node}/lxc/{vmid}/status/current",
                vm_params(node, vmid),
            ),
        }
    }

    pub fn start_guest(kind: GuestKind, node: &str, vmid: u32) -> Self {
        match kind {
            GuestKind::Vm => Self::start_vm(node, vmid),
            GuestKind::Container => Self::new(
                Method::POST,
                "/nodes/{node}/lxc/{vmid}/status/start",
                vm_params(node, vmid),
            ),
        }
    }

    pub fn stop_guest(kind: GuestKind, node: &str, vmid: u32) -> Self {
        match kind {
            GuestKind::Vm => Self::stop_vm(node, vmid),
            GuestKind::Container => Self::new(
                Method::POST,
                "/nodes/{node}/lxc/{vmid}/status/stop",
                vm_params(node, vmid),
            ),
        }
    }

    /// `DELETE` with `purge=1` and `destroy-unreferenced-disks=1` (see `destroy_vm`).
    pub fn destroy_guest(kind: GuestKind, node: &str, vmid: u32) -> Self {
        match kind {
            GuestKind::Vm => Self::destroy_vm(node, vmid),
            GuestKind::Container => {
                let vm = Self::destroy_vm(node, vmid);
                Self::new(
                    Method::DELETE,
                    "/nodes/{node}/lxc/{vmid}",
                    vm_params(node, vmid),
                )
                .with(vm.params)
            }
        }
    }

    /// `GET /nodes/{node}/lxc/{vmid}/interfaces`: the container's addresses.
    pub fn ct_interfaces(node: &str, vmid: u32) -> Self {
        Self::new(
            Method::GET,
            "/nodes/{node}/lxc/{vmid}/interfaces",
            vm_params(node, vmid),
        )
    }
}

/// One entry of a container's `interfaces` (`ip --json a` inside it).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct CtInterface {
    pub name: String,
    #[serde(default)]
    pub inet: Option<String>,
}

/// The first IPv4 address of a container's interfaces that is not loopback or link-local.
pub fn ct_primary_ipv4(ifaces: &[CtInterface]) -> Option<String> {
    let wrong = crate::mutants::active(crate::mutants::Mutant::WrongIp);
    ifaces
        .iter()
        .filter(|i| wrong || i.name != "lo")
        .filter_map(|i| i.inet.as_deref())
        .map(|cidr| cidr.split('/').next().unwrap_or(cidr).to_string())
        .find(|ip| wrong || (!ip.starts_with("127.") && !ip.starts_with("169.254.")))
}

impl PveClient {
    pub async fn create_ct(
        &self,
        node: &str,
        params: &super::Params<'_>,
    ) -> Result<String, PveError> {
        self.send(&Request::create_ct(node, params)).await
    }

    /// The guests of `kind` on `node`, as `/cluster/resources` rows of that node: what a
    /// VM placed there needs to know of it, at the cost of the node's guests, not the site's.
    pub async fn node_guests(
        &self,
        kind: GuestKind,
        node: &str,
    ) -> Result<Vec<ClusterResource>, PveError> {
        let rows: Vec<NodeGuest> = self.send(&Request::node_guests(kind, node)).await?;
        Ok(rows
            .into_iter()
            .map(|g| g.into_resource(kind.family(), node))
            .collect())
    }

    pub async fn guest_config(
        &self,
        kind: GuestKind,
        node: &str,
        vmid: u32,
    ) -> Result<VmConfig, PveError> {
        self.send(&Request::guest_config(kind, node, vmid)).await
    }

    pub async fn guest_current(
        &self,
        kind: GuestKind,
        node: &str,
        vmid: u32,
    ) -> Result<VmCurrent, PveError> {
        self.send(&Request::guest_current(kind, node, vmid)).await
    }

    pub async fn start_guest(
        &self,
        kind: GuestKind,
        node: &str,
        vmid: u32,
    ) -> Result<String, PveError> {
        self.send(&Request::start_guest(kind, node, vmid)).await
    }

    pub async fn stop_guest(
        &self,
        kind: GuestKind,
        node: &str,
        vmid: u32,
    ) -> Result<String, PveError> {
        self.send(&Request::stop_guest(kind, node, vmid)).await
    }

    pub async fn destroy_guest(
        &self,
        kind: GuestKind,
        node: &str,
        vmid: u32,
    ) -> Result<String, PveError> {
        self.send(&Request::destroy_guest(kind, node, vmid)).await
    }

    /// A stopped container's interfaces are `null`: no addresses.
    pub async fn ct_interfaces(&self, node: &str, vmid: u32) -> Result<Vec<CtInterface>, PveError> {
        let v: Option<Vec<CtInterface>> = self.send(&Request::ct_interfaces(node, vmid)).await?;
        Ok(v.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_calls_use_the_lxc_family() {
        let r = Request::destroy_guest(GuestKind::Container, "n1", 300);
        assert_eq!(r.path(), "/nodes/n1/lxc/300");
        assert!(r.params.iter().any(|(k, v)| *k == "purge" && v == "1"));
        assert_eq!(
            Request::guest_current(GuestKind::Vm, "n1", 1).label(),
            "GET /nodes/{node}/qemu/{vmid}/status/current"
        );
        let ifs = vec![
            CtInterface {
                name: "lo".into(),
                inet: Some("127.0.0.1/8".into()),
            },
            CtInterface {
                name: "eth0".into(),
                inet: Some("192.168.11.100/24".into()),
            },
        ];
        assert_eq!(ct_primary_ipv4(&ifs).as_deref(), Some("192.168.11.100"));
    }
}
