//! `ControlClient`: a typed client for the `/_fake/...` control plane.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::clock::ClockMode;
use crate::faults::FaultRule;
use crate::journal::JournalEntry;
use crate::tenants::{TenantInfo, TenantRequest, TenantSite};

/// Why a control-plane call failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No answer, or one that could not be read: connection refused, TLS failure, the
    /// 30 s timeout, or a success body that is not the JSON the call expects.
    #[error("control request failed: {0}")]
    Http(#[from] reqwest::Error),
    /// The control plane answered with a non-2xx status; `message` is its JSON `error`
    /// text (`"unknown error"` when the body has none).
    #[error("control plane answered {status}: {message}")]
    Refused {
        /// The HTTP status, e.g. 400 for a bad body, 401 without the right token, 404 for
        /// an unknown node, storage, snapshot or tenant, 409 for a conflict with the state.
        status: u16,
        /// The refusal's text, as the server wrote it.
        message: String,
    },
    /// A certificate given to the client could not be used.
    #[error("bad certificate: {0}")]
    Cert(String),
}

/// A typed client for the `/_fake/…` control plane of one fake listener (and so of the
/// world behind it). Every call is one HTTP request with a 30 s timeout; a non-2xx answer
/// becomes [`ControlError::Refused`]. Cheap to clone (the connection pool is shared).
#[derive(Clone, Debug)]
pub struct ControlClient {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer …` on every request.
    token: Option<String>,
}

impl ControlClient {
    /// `base_url` is the site URL (`https://127.0.0.1:PORT`); `cert_pem` the fake's
    /// certificate to trust, or `None` to accept any certificate (or for plain HTTP). A PEM
    /// that does not parse is not an error: the client then accepts any certificate too.
    pub fn new(base_url: &str, cert_pem: Option<&str>) -> ControlClient {
        let mut b = reqwest::Client::builder().timeout(Duration::from_secs(30));
        match cert_pem.map(|p| reqwest::Certificate::from_pem(p.as_bytes())) {
            Some(Ok(cert)) => b = b.tls_certs_only([cert]),
            _ => b = b.danger_accept_invalid_certs(true),
        }
        ControlClient {
            base: base_url.trim_end_matches('/').to_string(),
            http: b.build().unwrap_or_default(),
            token: None,
        }
    }

    /// The same client, sending `Authorization: Bearer TOKEN` on every request (a server
    /// started with `--control-token`, or a tenant's `control_token`).
    pub fn with_token(mut self, token: impl Into<String>) -> ControlClient {
        self.token = Some(token.into());
        self
    }

    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    fn url(&self, p: &str) -> String {
        format!("{}/_fake{p}", self.base)
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ControlError> {
        let resp = Self::checked(self.authed(req).send().await?).await?;
        Ok(resp.json().await?)
    }

    /// The response, or its refusal as an error.
    async fn checked(resp: reqwest::Response) -> Result<reqwest::Response, ControlError> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        let message = body["error"]
            .as_str()
            .unwrap_or("unknown error")
            .to_string();
        Err(ControlError::Refused {
            status: status.as_u16(),
            message,
        })
    }

    async fn post(&self, p: &str, body: Value) -> Result<Value, ControlError> {
        self.send(self.http.post(self.url(p)).json(&body)).await
    }

    async fn put(&self, p: &str, body: Value) -> Result<Value, ControlError> {
        self.send(self.http.put(self.url(p)).json(&body)).await
    }

    /// Back to the loaded scenario (`POST /_fake/reset`): the world is rebuilt from it at
    /// the clock's present, fault rules and the journal are cleared; snapshots and the clock
    /// mode are kept.
    pub async fn reset(&self) -> Result<(), ControlError> {
        self.post("/reset", json!({})).await.map(|_| ())
    }

    /// Replace the world with one built from scenario `yaml` (`POST /_fake/scenario`);
    /// faults and journal cleared as by [`reset`](Self::reset). Refused (400) when the YAML
    /// does not parse or its site names (in order) differ from the served ones: listeners
    /// are bound per site, so changing sites takes a restart.
    pub async fn load_scenario_yaml(&self, yaml: &str) -> Result<(), ControlError> {
        self.send::<Value>(self.http.post(self.url("/scenario")).body(yaml.to_string()))
            .await
            .map(|_| ())
    }

    /// Keep a copy of the whole world in memory (`POST /_fake/snapshot`), brought up to the
    /// clock's present first; its id (`"1"`, `"2"`, … counting up) is what
    /// [`restore`](Self::restore) takes. Faults, journal and clock are not part of it.
    pub async fn snapshot(&self) -> Result<String, ControlError> {
        let v = self.post("/snapshot", json!({})).await?;
        Ok(v["id"].as_str().unwrap_or_default().to_string())
    }

    /// Put back the world of snapshot `id` (`POST /_fake/restore/{id}`); the snapshot stays
    /// and can be restored again. Refused (404) for an unknown id.
    pub async fn restore(&self, id: &str) -> Result<(), ControlError> {
        self.post(&format!("/restore/{id}"), json!({}))
            .await
            .map(|_| ())
    }

    /// Switch the clock's mode (`PUT /_fake/clock`) from the present simulated time on:
    /// real, scaled by a factor, or stepped (time moves only by
    /// [`advance_clock`](Self::advance_clock)). Refused (400) for a scaled factor that is not
    /// finite and > 0.
    pub async fn set_clock(&self, mode: ClockMode) -> Result<(), ControlError> {
        self.put("/clock", json!(mode)).await.map(|_| ())
    }

    /// Advance the simulated clock by `by` (`POST /_fake/clock/advance`), in any clock mode;
    /// returns the new simulated time in UNIX seconds. The world is brought up to it before
    /// the answer, so tasks due in between have finished. `by` is always accepted (the
    /// server refuses only negative or non-finite seconds, which a `Duration` cannot be).
    pub async fn advance_clock(&self, by: Duration) -> Result<f64, ControlError> {
        let v = self
            .post("/clock/advance", json!({"seconds": by.as_secs_f64()}))
            .await?;
        Ok(v["now"].as_f64().unwrap_or_default())
    }

    /// Add a fault rule (`POST /_fake/faults`); returns its id (1, 2, … counting up; a
    /// reset or scenario load starts again at 1). Refused (400) when the rule has no effect
    /// (no status, latency or clock stop), a status outside 100..=999, a probability outside
    /// 0..=1, or a bad `path_pattern` glob.
    pub async fn add_fault(&self, rule: FaultRule) -> Result<u64, ControlError> {
        let v = self.post("/faults", json!(rule)).await?;
        Ok(v["id"].as_u64().unwrap_or_default())
    }

    /// The fault rules in force, in the order they were added, each with its id.
    pub async fn faults(&self) -> Result<Vec<FaultRule>, ControlError> {
        self.send(self.http.get(self.url("/faults"))).await
    }

    /// Remove every fault rule (`DELETE /_fake/faults`); ids keep counting up.
    pub async fn clear_faults(&self) -> Result<(), ControlError> {
        self.send::<Value>(self.http.delete(self.url("/faults")))
            .await
            .map(|_| ())
    }

    /// Take a node off the cluster network or back (`PUT /_fake/nodes/{node}/online`). An
    /// offline node shows as offline in `/nodes` and `/cluster/status`, and every API path
    /// through it answers 595 `No route to host`, as PVE's proxy does; its guests keep their
    /// state.
    /// Setting a powered-off node online boots it (and starts its `onboot` guests). Refused
    /// (404) for an unknown node.
    pub async fn set_node_online(&self, node: &str, online: bool) -> Result<(), ControlError> {
        self.put(&format!("/nodes/{node}/online"), json!({"online": online}))
            .await
            .map(|_| ())
    }

    /// Make a storage report no free space (used = total), or lift that
    /// (`PUT /_fake/nodes/{node}/storage/{storage}/full`): allocations on it then fail with
    /// PVE's out-of-space error. On a shared storage this holds on every node. Refused (404)
    /// for an unknown node or storage.
    pub async fn set_storage_full(
        &self,
        node: &str,
        storage: &str,
        full: bool,
    ) -> Result<(), ControlError> {
        self.put(
            &format!("/nodes/{node}/storage/{storage}/full"),
            json!({"full": full}),
        )
        .await
        .map(|_| ())
    }

    /// Set a storage's total size in bytes
    /// (`PUT /_fake/nodes/{node}/storage/{storage}/capacity`); volumes already on it stay,
    /// even if they no longer fit. On a shared storage this holds on every node. Refused
    /// (404) for an unknown node or storage.
    pub async fn set_storage_capacity(
        &self,
        node: &str,
        storage: &str,
        total_bytes: u64,
    ) -> Result<(), ControlError> {
        self.put(
            &format!("/nodes/{node}/storage/{storage}/capacity"),
            json!({"total_bytes": total_bytes}),
        )
        .await
        .map(|_| ())
    }

    /// The next task of `task_type` (e.g. `qmcreate`, `qmstart`) on `node` fails with
    /// `exitstatus` as its PVE exit status (armings queue up, one per task). Refused (400)
    /// when `exitstatus` is empty or `OK`, 404 for an unknown node.
    pub async fn fail_next_task(
        &self,
        node: &str,
        task_type: &str,
        exitstatus: &str,
    ) -> Result<(), ControlError> {
        self.post(
            &format!("/nodes/{node}/fail-next-task"),
            json!({"task_type": task_type, "exitstatus": exitstatus}),
        )
        .await
        .map(|_| ())
    }

    /// Place a file on a storage (test setup), e.g. `iso/ubuntu-22.04-cloud.img`, of
    /// `size_bytes` bytes. Returns the volid (`storage:volname`). Refused with 400 when
    /// `volname` is not a valid volume name for the storage's type, 404 for an unknown node
    /// or storage, 409 when the storage has less space free.
    pub async fn upload_volume(
        &self,
        node: &str,
        storage: &str,
        volname: &str,
        size_bytes: u64,
    ) -> Result<String, ControlError> {
        let v = self
            .post(
                &format!("/nodes/{node}/storage/{storage}/volumes"),
                json!({"volname": volname, "size_bytes": size_bytes}),
            )
            .await?;
        Ok(v["volid"].as_str().unwrap_or_default().to_string())
    }

    /// [`ControlClient::upload_volume`] of a disk image whose content is known: how a VM
    /// booted from a disk made of it behaves (cloud-init, the guest agent).
    pub async fn upload_image(
        &self,
        node: &str,
        storage: &str,
        volname: &str,
        size_bytes: u64,
        image: &crate::storage::image_facts::ImageFacts,
    ) -> Result<String, ControlError> {
        let v = self
            .post(
                &format!("/nodes/{node}/storage/{storage}/volumes"),
                json!({"volname": volname, "size_bytes": size_bytes, "image": image}),
            )
            .await?;
        Ok(v["volid"].as_str().unwrap_or_default().to_string())
    }

    /// Place snippet `volname` (`snippets/…`) with `text` on a storage. Returns the volid.
    pub async fn place_snippet(
        &self,
        node: &str,
        storage: &str,
        volname: &str,
        text: &str,
    ) -> Result<String, ControlError> {
        let v = self
            .post(
                &format!("/nodes/{node}/storage/{storage}/volumes"),
                json!({"volname": volname, "size_bytes": text.len(), "text": text}),
            )
            .await?;
        Ok(v["volid"].as_str().unwrap_or_default().to_string())
    }

    /// Place a copy of the local file `file` on a storage as `volname` (with real disks;
    /// its sizes are the file's). Returns the volid.
    pub async fn place_file(
        &self,
        node: &str,
        storage: &str,
        volname: &str,
        file: &std::path::Path,
    ) -> Result<String, ControlError> {
        let v = self
            .post(
                &format!("/nodes/{node}/storage/{storage}/volumes"),
                json!({"volname": volname, "file": file}),
            )
            .await?;
        Ok(v["volid"].as_str().unwrap_or_default().to_string())
    }

    /// How to reach VM `vmid`'s guest (lab backend): its address on `net0`, an `ssh` command
    /// line as `user` with the private `key` (append the remote command), its serial log.
    pub async fn guest_access(
        &self,
        node: &str,
        vmid: u32,
        user: &str,
        key: &std::path::Path,
    ) -> Result<crate::exec::GuestAccess, ControlError> {
        let key = key.to_string_lossy();
        self.send(
            self.http
                .get(self.url(&format!("/nodes/{node}/qemu/{vmid}/guest")))
                .query(&[("user", user), ("key", key.as_ref())]),
        )
        .await
    }

    /// How to reach container `vmid` (lab backend): its address on `net0`'s interface, an
    /// `ssh` command line as `user` with the private `key` (append the remote command), its
    /// console log (in `serial_log`).
    pub async fn ct_access(
        &self,
        node: &str,
        vmid: u32,
        user: &str,
        key: &std::path::Path,
    ) -> Result<crate::exec::GuestAccess, ControlError> {
        let key = key.to_string_lossy();
        self.send(
            self.http
                .get(self.url(&format!("/nodes/{node}/lxc/{vmid}/guest")))
                .query(&[("user", user), ("key", key.as_ref())]),
        )
        .await
    }

    /// Do a fault to VM `vmid`'s real guest (lab backend): kill, pause, a NIC's link down
    /// or up, a disk's writes failing.
    pub async fn guest_fault(
        &self,
        node: &str,
        vmid: u32,
        fault: &crate::exec::GuestFault,
    ) -> Result<(), ControlError> {
        self.send::<Value>(
            self.http
                .post(self.url(&format!("/nodes/{node}/qemu/{vmid}/fault")))
                .json(fault),
        )
        .await
        .map(|_| ())
    }

    /// Script command results and lay down files in VM `vmid`'s simulated guest; the
    /// guest's state after it.
    pub async fn guest_setup(
        &self,
        node: &str,
        vmid: u32,
        setup: &crate::agent::guest_os::GuestSetup,
    ) -> Result<Value, ControlError> {
        self.send(
            self.http
                .post(self.url(&format!("/nodes/{node}/qemu/{vmid}/agent")))
                .json(setup),
        )
        .await
    }

    /// VM `vmid`'s simulated guest: files, freeze state, passwords set, scripts, processes.
    pub async fn guest_state(&self, node: &str, vmid: u32) -> Result<Value, ControlError> {
        self.send(
            self.http
                .get(self.url(&format!("/nodes/{node}/qemu/{vmid}/agent"))),
        )
        .await
    }

    /// A node's link on a bridge down or up (`/_fake/nodes/{node}/fault`): the `(vmid, netN)`
    /// of the running guests' NICs it reached.
    pub async fn node_fault(
        &self,
        node: &str,
        fault: &crate::exec::NodeFault,
    ) -> Result<Vec<(u32, String)>, ControlError> {
        let v: Value = self
            .send(
                self.http
                    .post(self.url(&format!("/nodes/{node}/fault")))
                    .json(fault),
            )
            .await?;
        Ok(v["reached"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|r| {
                        let vmid = u32::try_from(r["vmid"].as_u64()?).ok()?;
                        Some((vmid, r["net"].as_str()?.to_string()))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Remove a file from a storage (`volid` or volume name). Refused (404) for an unknown
    /// node, storage or volume.
    pub async fn delete_volume(
        &self,
        node: &str,
        storage: &str,
        volid: &str,
    ) -> Result<(), ControlError> {
        self.send::<Value>(
            self.http
                .delete(self.url(&format!("/nodes/{node}/storage/{storage}/volumes")))
                .query(&[("volume", volid)]),
        )
        .await
        .map(|_| ())
    }

    /// The PVE API requests (every path but `/_fake/…`) the fake answered since the start,
    /// the last clear, reset or scenario load, oldest first, secrets redacted; at most the
    /// newest `--max-journal` (default 20 000) are kept.
    pub async fn journal(&self) -> Result<Vec<JournalEntry>, ControlError> {
        self.send(self.http.get(self.url("/journal"))).await
    }

    /// The journal's entries numbered after `seq` (`GET /_fake/journal?since=SEQ`): a poller
    /// passes the last `seq` it read and gets only what came since.
    pub async fn journal_since(&self, seq: u64) -> Result<Vec<JournalEntry>, ControlError> {
        self.send(self.http.get(self.url(&format!("/journal?since={seq}"))))
            .await
    }

    /// Forget the journal's entries (`DELETE /_fake/journal`).
    pub async fn clear_journal(&self) -> Result<(), ControlError> {
        self.send::<Value>(self.http.delete(self.url("/journal")))
            .await
            .map(|_| ())
    }

    /// The world for assertions (`GET /_fake/state`): `{"now", "sites": [...]}` with, per
    /// site, its nodes (online, storages with their volumes), VMs and containers (power,
    /// lock, config, pending, snapshots) and tasks. Its shape is for tests, not PVE's.
    pub async fn state(&self) -> Result<Value, ControlError> {
        self.send(self.http.get(self.url("/state"))).await
    }

    /// The whole state as one file (`GET /_fake/state/export`): what a state dir holds.
    pub async fn export_state(&self) -> Result<Vec<u8>, ControlError> {
        let resp = self
            .authed(self.http.get(self.url("/state/export")))
            .send()
            .await?;
        let resp = Self::checked(resp).await?;
        Ok(resp.bytes().await?.to_vec())
    }

    /// Replace the world with an exported one (`POST /_fake/state/import`); a file that is
    /// not a valid state is refused (400) and nothing changes.
    pub async fn import_state(&self, file: &[u8]) -> Result<(), ControlError> {
        let req = self
            .http
            .post(self.url("/state/import"))
            .header("content-type", "application/json")
            .body(file.to_vec());
        self.send::<Value>(req).await.map(|_| ())
    }

    /// Start a tenant (`POST /_fake/tenants`): a world of its own with its own listeners.
    /// Refused (`ControlError::Refused`) with 400 for a bad request, 403 on a tenant's own
    /// listeners, 429 at the server's limit.
    pub async fn create_tenant(&self, req: &TenantRequest) -> Result<TenantInfo, ControlError> {
        self.send(self.http.post(self.url("/tenants")).json(req))
            .await
    }

    /// The live tenants.
    pub async fn tenants(&self) -> Result<Vec<TenantInfo>, ControlError> {
        self.send(self.http.get(self.url("/tenants"))).await
    }

    /// One tenant; 404 once deleted or reaped.
    pub async fn tenant(&self, id: &str) -> Result<TenantInfo, ControlError> {
        self.send(self.http.get(self.url(&format!("/tenants/{id}"))))
            .await
    }

    /// Stop a tenant's listeners and drop its world.
    pub async fn delete_tenant(&self, id: &str) -> Result<(), ControlError> {
        self.send::<Value>(self.http.delete(self.url(&format!("/tenants/{id}"))))
            .await
            .map(|_| ())
    }
}

impl TenantSite {
    /// A typed client for this tenant site's own control plane (its world only), with the
    /// tenant's control token.
    pub fn control(&self) -> ControlClient {
        ControlClient::new(&self.url, self.cert_pem.as_deref()).with_token(&self.control_token)
    }
}
