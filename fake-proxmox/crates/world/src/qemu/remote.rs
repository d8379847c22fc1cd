//! Migration to another cluster (`POST …/remote_migrate`) and the endpoints the receiving
//! cluster offers for it (`POST …/mtunnel`, `GET …/mtunnelwebsocket`), after qemu-server's
//! `API2/Qemu.pm` (`remote_migrate_vm`, `mtunnel`, `mtunnelwebsocket`) and, for containers
//! (the path's family decides), pve-container's `API2/LXC.pm` (the same three: a `vzmtunnel`
//! task on `/run/pve/ct-<vmid>.mtunnel`, storages checked for `rootdir`, a running container
//! refused without `online` or `restart` before the endpoint is asked anything).
//!
//! The fake opens no connection to a remote endpoint: where PVE's API client would first
//! reach it, the call fails as a connection that cannot be made fails (see
//! [`connect_failure`]). Every check PVE makes before that point is made, in PVE's order.
//! `mtunnel` creates the placeholder config and the `qmtunnel` task as PVE does; with no
//! tunnel process, nothing ever connects to its socket, so the task ends as PVE's does after
//! its 300 s accept timeout, removing the placeholder.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::model::{Power, Vm, prop, split_props};
use super::op::{VmOp, unlocked};
use super::storage_map::parse_idmap;
use crate::console::tickets;
use crate::guest::GuestKind;
use crate::lxc::Ct;
use crate::request::Request;
use crate::schema::formats::split_list;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::Work;

/// How long the tunnel waits for its client (`run_with_timeout(300, accept)`).
const ACCEPT_TIMEOUT: f64 = 300.0;

/// The parts of a `proxmox-remote` property string the migration uses.
struct Remote {
    host: String,
    port: u16,
    fingerprint: Option<String>,
}

impl Remote {
    /// `parse_property_string('proxmox-remote', …)`: the schema has already checked it.
    fn parse(text: &str) -> Remote {
        let props = split_props(text, "host");
        Remote {
            host: prop(&props, "host").unwrap_or_default().to_string(),
            port: prop(&props, "port")
                .and_then(|p| p.parse().ok())
                .unwrap_or(8006),
            fingerprint: prop(&props, "fingerprint").map(str::to_string),
        }
    }
}

/// What `PVE::APIClient::LWP` raises when it cannot reach `host:port`: LWP's internal 500
/// response ("Can't connect to …"), stringified with its code. The fake reaches no one:
/// a name does not resolve (it has no resolver), an address has no route, and loopback
/// (where nothing of the fake's is reached either) refuses the connection.
pub fn connect_failure(host: &str, port: u16) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let why = match bare.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => "Connection refused",
        Ok(_) => "No route to host",
        Err(_) if bare == "localhost" => "Connection refused",
        Err(_) => "Name or service not known",
    };
    format!("500 Can't connect to {bare}:{port} ({why})\n")
}

/// The tunnel's socket, and the path its tickets are bound to (`"/socket/$socket"`,
/// normalised as `assemble_tunnel_ticket` does).
fn tunnel_socket(kind: GuestKind, vmid: u32) -> String {
    match kind {
        GuestKind::Qemu => format!("/run/qemu-server/{vmid}.mtunnel"),
        GuestKind::Lxc => format!("/run/pve/ct-{vmid}.mtunnel"),
    }
}

/// `normalize_path` of the ticket path: `None` (PVE: "invalid ticket path") for characters
/// outside `[[:alnum:]._/-]`.
fn ticket_path(socket: &str) -> Option<String> {
    let path = crate::access::model::normalize_path(&format!("/socket/{socket}"));
    path.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/'))
        .then_some(path)
}

impl Site {
    /// The node that answers the API (`/cluster/status` marks it `local`): the first by name.
    pub fn local_node(&self) -> Option<&str> {
        self.nodes.keys().next().map(String::as_str)
    }

    /// `POST …/remote_migrate`: PVE's checks up to the first call to the remote endpoint,
    /// which fails. Without a `fingerprint` that call (the endpoint's certificate info) comes
    /// right after the VM's lock is checked; with one, after the storage and bridge maps.
    pub fn remote_migrate(&self, req: &Request) -> Result<String, PveError> {
        if req.guest_kind() == GuestKind::Lxc {
            return self.remote_migrate_ct(req);
        }
        let op = VmOp::of(req)?;
        // The declared permission check comes before the handler loads the config.
        op.require(self, &["VM.Migrate"])?;
        let vm = self.vm_on(&op.node, op.vmid)?;
        unlocked(vm, false)?;
        let remote = Remote::parse(&req.p.req_str("target-endpoint")?);
        let unreachable = || PveError::die(connect_failure(&remote.host, remote.port));
        if remote.fingerprint.is_none() {
            return Err(unreachable());
        }
        if vm.power != Power::Stopped && !req.p.flag("online") {
            return Err(PveError::die("can't migrate running VM without --online\n"));
        }
        check_custom_cpu(vm)?;
        self.remote_maps(req)?;
        // `$api_client->get("/cluster/status")`, to learn the endpoint's node name.
        Err(unreachable())
    }

    /// pve-container's `remote_migrate_vm`: the container unlocked, not running unless
    /// `online` or `restart`, then the endpoint's certificate info (without a fingerprint),
    /// the maps, and the endpoint's `/cluster/status`.
    fn remote_migrate_ct(&self, req: &Request) -> Result<String, PveError> {
        let (node, vmid) = (req.node()?, req.vmid()?);
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Migrate")?;
        self.check_cfs_quorum()?;
        let ct = self.ct_on(&node, vmid)?;
        if let Some(l) = &ct.lock {
            return Err(PveError::die(format!("CT is locked ({l})\n")));
        }
        if ct.is_running() && !req.p.flag("online") && !req.p.flag("restart") {
            return Err(PveError::die(
                "can't migrate running container without --online or --restart\n",
            ));
        }
        let remote = Remote::parse(&req.p.req_str("target-endpoint")?);
        let unreachable = || PveError::die(connect_failure(&remote.host, remote.port));
        if remote.fingerprint.is_none() {
            return Err(unreachable());
        }
        self.remote_maps(req)?;
        Err(unreachable())
    }

    /// `target-storage` and `target-bridge` as `parse_idmap` reads them; an identity
    /// storage map is refused.
    fn remote_maps(&self, req: &Request) -> Result<(), PveError> {
        let storages = parse_idmap(&req.p.req_str("target-storage")?).map_err(|e| {
            PveError::param(
                "target-storage",
                format!("failed to parse storage map: {e}"),
            )
        })?;
        parse_idmap(&req.p.req_str("target-bridge")?).map_err(|e| {
            PveError::param("target-bridge", format!("failed to parse bridge map: {e}"))
        })?;
        if storages.identity {
            return Err(PveError::die(
                "remote migration requires explicit storage mapping!\n",
            ));
        }
        Ok(())
    }

    /// `POST …/mtunnel`: `VM.Allocate` on the VM and `Sys.Incoming` on `/`; the node must be
    /// this one; each named storage usable for VM images here and each bridge present; the
    /// cluster quorate; then the vmid is taken by an empty config locked `create` and the `qmtunnel` task waits
    /// for its client.
    pub fn mtunnel(&mut self, req: &Request) -> Result<Value, PveError> {
        let vmid = req.vmid()?;
        self.require(&req.who, &format!("/vms/{vmid}"), "VM.Allocate")?;
        self.require(&req.who, "/", "Sys.Incoming")?;
        let node = self.tunnel_node(req)?;
        let storages = req.p.str("storages").unwrap_or_default();
        for sid in split_list(&storages) {
            self.check_storage_access_migrate(req, sid, &node)?;
        }
        let bridges = req.p.str("bridges").unwrap_or_default();
        for bridge in split_list(&bridges) {
            // `read_bridge_mtu`: the interface must exist on this node.
            if self
                .nodes
                .get(&node)
                .and_then(|n| n.bridge(bridge))
                .is_none()
            {
                return Err(PveError::die(format!("bridge '{bridge}' does not exist\n")));
            }
        }
        self.check_cfs_quorum()?;
        let kind = req.guest_kind();
        if let Some(existing) = self.guest(vmid) {
            let core = existing.core();
            return Err(PveError::param(
                "vmid",
                format!(
                    "unable to create empty {} config - {} {vmid} already exists on node '{}'\n",
                    kind.label(),
                    core.kind.label(),
                    core.node
                ),
            ));
        }
        let (ttype, socket) = match kind {
            GuestKind::Qemu => {
                self.vms.insert(
                    vmid,
                    Vm::stopped(vmid, &node, Default::default(), Some("create")),
                );
                ("qmtunnel", tunnel_socket(kind, vmid))
            }
            GuestKind::Lxc => {
                self.cts.insert(
                    vmid,
                    Ct::stopped(vmid, &node, Default::default(), Some("create")),
                );
                ("vzmtunnel", tunnel_socket(kind, vmid))
            }
        };
        let user = req.task_user();
        let path = ticket_path(&socket).unwrap_or_default();
        let ticket = tickets::assemble(&self.access, "PVETUNNEL", &user, &path, None, req.now);
        let mut plan = crate::world::work::TaskPlan::new(
            ttype,
            vmid.to_string(),
            &node,
            &user,
            Work::Mtunnel { vmid },
        );
        plan.line(0.0, "mtunnel started");
        let t = ACCEPT_TIMEOUT;
        // `warn "… - $@\n"` with `$@` = "got timeout\n": the line, then an empty one.
        plan.line(t, "Failed to accept tunnel connection - got timeout");
        plan.line(t, "");
        plan.line(t, "Removing tunnel socket..");
        plan.line(t, "Removing temporary VM config..");
        plan.duration = t;
        plan.planned_error = Some("Exiting mtunnel".into());
        let upid = self.start_task(plan, req.now);
        Ok(json!({ "ticket": ticket, "upid": upid, "socket": socket }))
    }

    /// `GET …/mtunnelwebsocket`: any user, but the ticket must be the caller's, for this
    /// socket and fresh; the VM's config must be on this node. The answer names the socket
    /// pveproxy would forward a websocket to.
    pub fn mtunnel_websocket(&self, req: &Request) -> Result<Value, PveError> {
        let node = self.tunnel_node(req)?;
        let vmid = req.vmid()?;
        match req.guest_kind() {
            GuestKind::Qemu => self.vm_on(&node, vmid).map(|_| ())?,
            GuestKind::Lxc => self.ct_on(&node, vmid).map(|_| ())?,
        }
        let socket = req.p.req_str("socket")?;
        let ticket = req.p.req_str("ticket")?;
        let Some(path) = ticket_path(&socket) else {
            return Err(PveError::die("invalid ticket path\n"));
        };
        let user = req.task_user();
        if !tickets::verify(
            &self.access,
            "PVETUNNEL",
            &ticket,
            &user,
            &path,
            None,
            req.now,
        ) {
            return Err(PveError::new(
                401,
                "permission denied - invalid PVETUNNEL ticket\n",
            ));
        }
        Ok(json!({ "socket": socket }))
    }

    /// The tunnel routes run where the request arrives (no `proxyto`): the path's node must
    /// be `localhost` or this node's name.
    fn tunnel_node(&self, req: &Request) -> Result<String, PveError> {
        let node = req.node()?;
        let local = self.local_node().unwrap_or_default().to_string();
        if node != "localhost" && node != local {
            return Err(PveError::param(
                "node",
                format!("node needs to be 'localhost' or local hostname '{local}'"),
            ));
        }
        Ok(local)
    }

    /// `$check_storage_access_migrate`: enabled on the node, `Datastore.AllocateSpace`, and
    /// content `images` (`rootdir` for a container's path).
    pub(crate) fn check_storage_access_migrate(
        &self,
        req: &Request,
        sid: &str,
        node: &str,
    ) -> Result<(), PveError> {
        if !self.nodes.values().any(|n| n.storages.contains_key(sid)) {
            return Err(PveError::die(format!("storage '{sid}' does not exist\n")));
        }
        let Some(sto) = self.nodes.get(node).and_then(|n| n.storages.get(sid)) else {
            return Err(PveError::die(format!(
                "storage '{sid}' is not available on node '{node}'\n"
            )));
        };
        if !sto.enabled {
            return Err(PveError::die(format!("storage '{sid}' is disabled\n")));
        }
        self.require(
            &req.who,
            &format!("/storage/{sid}"),
            "Datastore.AllocateSpace",
        )?;
        let (content, refusal) = match req.guest_kind() {
            GuestKind::Qemu => (crate::storage::model::Content::Images, "vm images"),
            GuestKind::Lxc => (crate::storage::model::Content::Rootdir, "CT rootdirs"),
        };
        if !sto.content.contains(&content) {
            return Err(PveError::die(format!(
                "storage '{sid}' does not support {refusal}\n"
            )));
        }
        Ok(())
    }

    /// A `qmtunnel` task that ended without a client (or was stopped): the placeholder
    /// config goes (`destroy_vm`), unless something else took the VM over meanwhile.
    pub(crate) fn abort_mtunnel(&mut self, vmid: u32) {
        let placeholder = |g: &crate::guest::GuestCore| {
            g.lock.as_deref() == Some("create") && g.config.is_empty()
        };
        if self.vms.get(&vmid).is_some_and(|v| placeholder(v)) {
            self.vms.remove(&vmid);
        }
        if self.cts.get(&vmid).is_some_and(|c| placeholder(c)) {
            self.cts.remove(&vmid);
        }
    }
}

/// A custom CPU model (`cpu: custom-…`) is compared with the remote's, but first it must
/// exist here (`get_custom_model`), and the fake defines none.
fn check_custom_cpu(vm: &Vm) -> Result<(), PveError> {
    let Some(cpu) = vm.config.get("cpu") else {
        return Ok(());
    };
    let props = split_props(cpu, "cputype");
    match prop(&props, "cputype").and_then(|t| t.strip_prefix("custom-")) {
        Some(name) => Err(PveError::die(format!(
            "Custom cputype '{name}' not found\n"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_name_the_endpoint_and_the_reason() {
        assert_eq!(
            connect_failure("10.0.0.9", 8006),
            "500 Can't connect to 10.0.0.9:8006 (No route to host)\n"
        );
        assert_eq!(
            connect_failure("pve.example.com", 443),
            "500 Can't connect to pve.example.com:443 (Name or service not known)\n"
        );
        assert_eq!(
            connect_failure("127.0.0.2", 8006),
            "500 Can't connect to 127.0.0.2:8006 (Connection refused)\n"
        );
        assert_eq!(
            connect_failure("[::1]", 8006),
            "500 Can't connect to ::1:8006 (Connection refused)\n"
        );
    }

    #[test]
    fn remote_endpoint_defaults_to_port_8006() {
        let r = Remote::parse("apitoken=PVEAPIToken=a@pve!t=s=x,host=10.1.1.1");
        assert_eq!((r.host.as_str(), r.port), ("10.1.1.1", 8006));
        assert!(r.fingerprint.is_none());
        let r = Remote::parse("host=h,port=9006,apitoken=x,fingerprint=AB");
        assert_eq!((r.port, r.fingerprint.as_deref()), (9006, Some("AB")));
    }

    #[test]
    fn ticket_paths_are_normalised_and_checked() {
        assert_eq!(
            ticket_path("/run/qemu-server/100.mtunnel").as_deref(),
            Some("/socket/run/qemu-server/100.mtunnel")
        );
        assert_eq!(ticket_path("/run/x y"), None);
    }
}
