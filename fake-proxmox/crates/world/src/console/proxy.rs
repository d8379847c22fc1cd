//! Console proxies: PVE starts a `vncproxy` task that listens on the node's next free port
//! from 5900 and waits 10 s for the client (the websocket upgrade of `vncwebsocket`), failing
//! with `connection timed out` when none comes. The fake models the task, the port and the
//! tickets; nothing listens on the port (see docs/src/fake-proxmox/deviations.md).
//!
//! A container's consoles are pve-container's (`API2/LXC.pm` `vncproxy`, `termproxy`,
//! `vncwebsocket`, `spiceproxy`): the same tasks and tickets around `lxc-console`; a VNC
//! password only for a websocket, a ticket checked without looking for the container, and
//! SPICE through a `spiceterm` of its own (`run_spiceterm`) rather than QEMU's display.

use serde_json::{Value, json};

use super::tickets;
use crate::guest::GuestKind;
use crate::qemu::model::{Power, Vm, find_prop};
use crate::request::Request;
use crate::wire::PveError;
use crate::world::Site;
use crate::world::work::{TaskPlan, Work};

const FIRST_VNC_PORT: u16 = 5900;
const LAST_VNC_PORT: u16 = 5999;
/// How long the proxy waits for its client.
const ACCEPT_TIMEOUT: f64 = 10.0;
/// The first port QEMU's SPICE server takes on a node.
const FIRST_SPICE_PORT: u16 = 61000;
/// The last port `next_spice_port` hands out.
const LAST_SPICE_PORT: u16 = 61999;

/// Which proxy a request asks for.
#[derive(Clone, Copy, PartialEq)]
pub enum Kind {
    /// `vncproxy`: VNC to the VM's display.
    Vnc,
    /// `termproxy`: the VM's serial console.
    Term,
}

/// The serial port a VM's display is (`vga: serialN`), if it is one.
fn serial_display(vm: &Vm) -> Option<String> {
    let vga = vm.config.get("vga")?;
    let ty = find_prop(vga, "type", "type")?;
    (ty.starts_with("serial") && ty[6..].chars().all(|c| c.is_ascii_digit()) && ty.len() > 6)
        .then(|| ty.to_string())
}

/// A VM with a SPICE display (`vga: qxl*`).
fn spice(vm: &Vm) -> bool {
    vm.config
        .get("vga")
        .and_then(|g| find_prop(g, "type", "type"))
        .is_some_and(|t| t.starts_with("qxl"))
}

impl Site {
    /// The ports console tasks still running on `node` listen on.
    fn console_ports(&self, node: &str) -> Vec<u16> {
        self.tasks
            .iter()
            .filter(|t| t.node == node && t.running())
            .filter_map(|t| match t.work {
                Work::Console { port, .. } => Some(port),
                _ => None,
            })
            .collect()
    }

    /// `POST …/vncproxy` and `…/termproxy`: the task, the port and the ticket.
    pub fn console_proxy(&mut self, req: &Request, kind: Kind) -> Result<Value, PveError> {
        let node = req.node()?;
        let vmid = req.p.vmid()?;
        let websocket = req.p.flag("websocket");
        let wants_password = match req.guest_kind() {
            GuestKind::Qemu => {
                let vm = self.vm_on(&node, vmid)?;
                let serial = match kind {
                    Kind::Vnc => serial_display(vm),
                    Kind::Term => req.p.str("serial").or_else(|| serial_display(vm)),
                };
                kind == Kind::Vnc
                    && (req.p.flag("generate-password") || serial.is_none() || websocket)
            }
            // `vncterm` authenticates by the ticket, unless the client is a websocket.
            GuestKind::Lxc => {
                self.ct_on(&node, vmid)?;
                kind == Kind::Vnc && websocket
            }
        };
        let used = self.console_ports(&node);
        let port = (FIRST_VNC_PORT..=LAST_VNC_PORT)
            .find(|p| !used.contains(p))
            .ok_or_else(|| PveError::die("unable to find free vnc port\n"))?;
        let user = req.who.task_user();
        let path = format!("/vms/{vmid}");
        let mut ticket =
            tickets::assemble(&self.access, "PVEVNC", &user, &path, Some(port), req.now);
        let password = wants_password.then(|| tickets::vnc_password(&mut self.rng));
        if let Some(pw) = &password {
            ticket = format!("{pw}:{ticket}");
        }
        let mut plan = TaskPlan::new(
            "vncproxy",
            vmid.to_string(),
            &node,
            &user,
            Work::Console { vmid, port },
        );
        plan.duration = ACCEPT_TIMEOUT;
        plan.planned_error = Some("connection timed out".into());
        let upid = self.start_task(plan, req.now);
        let mut res = json!({
            "user": user,
            "ticket": ticket,
            "port": port,
            "upid": upid,
        });
        // Only a VNC proxy makes a password.
        if let Some(pw) = password {
            res["password"] = json!(pw);
        }
        Ok(res)
    }

    /// `GET …/vncwebsocket`: the ticket must be this user's for this guest and port; the
    /// client is then connected, so the proxy task ends well instead of timing out.
    /// qemu-server then loads the VM's config; pve-container does not look for the
    /// container.
    pub fn console_websocket(&mut self, req: &Request) -> Result<Value, PveError> {
        let node = req.node()?;
        let vmid = req.p.vmid()?;
        let port = req.p.req_int("port")?;
        let ticket = req.p.req_str("vncticket")?;
        let user = req.who.task_user();
        let path = format!("/vms/{vmid}");
        let port16 = u16::try_from(port).unwrap_or(0);
        if !tickets::verify(
            &self.access,
            "PVEVNC",
            &ticket,
            &user,
            &path,
            Some(port16),
            req.now,
        ) {
            return Err(PveError::die("permission denied - invalid PVEVNC ticket\n"));
        }
        if req.guest_kind() == GuestKind::Qemu {
            self.vm_on(&node, vmid)?;
        }
        let seq = self
            .tasks
            .iter()
            .find(|t| {
                t.node == node
                    && t.running()
                    && matches!(t.work, Work::Console { vmid: v, port: p } if v == vmid && p == port16)
            })
            .map(|t| t.upid.clone())
            .and_then(|upid| self.tasks.seq_of(&upid));
        if let Some(seq) = seq {
            self.tasks.update(seq, |t| t.planned_error = None);
        }
        Ok(json!({ "port": port.to_string() }))
    }

    /// `POST …/spiceproxy`: a running VM with a SPICE display (`vga: qxl*`); the
    /// remote-viewer settings PVE answers, with a one-use password.
    pub fn spice_proxy(&mut self, req: &Request) -> Result<Value, PveError> {
        if req.guest_kind() == GuestKind::Lxc {
            return self.ct_spice_proxy(req);
        }
        let node = req.node()?;
        let vmid = req.p.vmid()?;
        let vm = self.vm_on(&node, vmid)?;
        let title = match vm.config.get("name") {
            Some(n) => format!("VM {vmid} - {n}"),
            None => format!("VM {vmid}"),
        };
        if vm.power == Power::Stopped {
            return Err(PveError::die(format!("VM {vmid} not running\n")));
        }
        if !spice(vm) {
            return Err(PveError::die("no spice port\n"));
        }
        // QEMU's SPICE servers take ports in order of the running VMs on the node.
        let index = self
            .vms
            .values()
            .filter(|v| v.node == node && v.power != Power::Stopped && spice(v))
            .position(|v| v.vmid == vmid)
            .unwrap_or(0);
        let port = FIRST_SPICE_PORT + index as u16;
        Ok(self.remote_viewer_config(req, &node, vmid, &title, port))
    }

    /// `POST …/lxc/{vmid}/spiceproxy`: a running container; `run_spiceterm` starts a
    /// `spiceproxy` task (a `spiceterm` on the node's next free SPICE port, waiting 10 s for
    /// its client) and answers the remote-viewer settings, titled `CT <vmid>`.
    fn ct_spice_proxy(&mut self, req: &Request) -> Result<Value, PveError> {
        let node = req.node()?;
        let vmid = req.p.vmid()?;
        if !self.ct_on(&node, vmid)?.is_running() {
            return Err(PveError::die(format!("CT {vmid} not running\n")));
        }
        // QEMU's SPICE servers hold the first ports (see `spice_proxy`), consoles theirs.
        let spice_vms = self
            .vms
            .values()
            .filter(|v| v.node == node && v.power != Power::Stopped && spice(v))
            .count();
        let used = self.console_ports(&node);
        let port = (FIRST_SPICE_PORT + spice_vms as u16..=LAST_SPICE_PORT)
            .find(|p| !used.contains(p))
            .ok_or_else(|| PveError::die("unable to find free spice port\n"))?;
        let mut plan = TaskPlan::new(
            "spiceproxy",
            vmid.to_string(),
            &node,
            &req.who.task_user(),
            Work::Console { vmid, port },
        );
        plan.duration = ACCEPT_TIMEOUT;
        self.start_task(plan, req.now);
        Ok(self.remote_viewer_config(req, &node, vmid, &format!("CT {vmid}"), port))
    }

    /// `PVE::AccessControl::remote_viewer_config`: the settings of a `.vv` file for a SPICE
    /// client reaching `port` on `node` through the SPICE proxy, with a one-use password.
    fn remote_viewer_config(
        &self,
        req: &Request,
        node: &str,
        vmid: u32,
        title: &str,
        port: u16,
    ) -> Value {
        let proxy_host = req.p.str("proxy").unwrap_or_else(|| node.to_string());
        let proxy_host = if proxy_host.contains(':') && !proxy_host.starts_with('[') {
            format!("[{proxy_host}]")
        } else {
            proxy_host
        };
        let user = req.who.task_user();
        let stamp = format!("{:08X}", req.now.max(0.0) as u64);
        let password =
            hex::encode(&self.access.sign(&format!("{stamp}:{user}:{vmid}:{node}"))[..12]);
        let plain = format!("pvespiceproxy:{stamp}:{vmid}:{node}:{port}");
        let proxyticket = format!("{plain}::{}", self.access.sign(&plain));
        json!({
            "type": "spice",
            "title": title,
            "host": proxyticket,
            "proxy": format!("http://{proxy_host}:3128"),
            "tls-port": port,
            "host-subject": format!("OU=PVE Cluster Node,O=Proxmox Virtual Environment,CN={node}.local"),
            "password": password,
            "delete-this-file": 1,
            "secure-attention": "Ctrl+Alt+Ins",
            "toggle-fullscreen": "Shift+F11",
            "release-cursor": "Ctrl+Alt+R",
        })
    }
}
