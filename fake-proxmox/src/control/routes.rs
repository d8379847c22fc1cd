//! Control-plane HTTP handlers.

// Errors are ready-made responses; their size does not matter on this cold path.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::clock::ClockMode;
use crate::exec::{GuestFault, NodeFault};
use crate::faults::FaultRule;
use crate::nodes::model::ArmedFailure;
use crate::scenario::Scenario;
use crate::server::state::{Inner, SiteCtx};
use crate::storage::model::Volume;
use crate::storage::volid::{parse_volid, parse_volname};
use crate::world::Site;

/// The control plane's routes, to be nested under `/_fake` on every site listener: health,
/// reset, scenario, snapshot/restore, clock, faults, node and storage knobs, volumes, guest
/// access and faults, container access, the journal and the state (dump, export, import). Every handler
/// answers JSON; a refusal is `{"error": …}` with 400 (bad body), 404 (unknown node,
/// storage, VM, snapshot) or 409 (conflicts with the world's state). The server puts them
/// behind [`super::auth::require`] (401 without the control token, when one is set).
pub fn router() -> Router<SiteCtx> {
    Router::new()
        .route("/health", get(|| async { Json(json!({"ok": true})) }))
        .route("/reset", post(reset))
        .route("/scenario", get(scenario_get).post(scenario_load))
        .route("/snapshot", post(snapshot))
        .route("/restore/{id}", post(restore))
        .route("/clock", get(clock_get).put(clock_set))
        .route("/clock/advance", post(clock_advance))
        .route(
            "/faults",
            get(faults_list).post(faults_add).delete(faults_clear),
        )
        .route("/nodes/{node}/online", put(node_online))
        .route("/nodes/{node}/fail-next-task", post(fail_next_task))
        .route("/nodes/{node}/storage/{storage}/full", put(storage_full))
        .route(
            "/nodes/{node}/storage/{storage}/capacity",
            put(storage_capacity),
        )
        .route(
            "/nodes/{node}/storage/{storage}/volumes",
            post(volume_add).delete(volume_delete),
        )
        .route("/nodes/{node}/qemu/{vmid}/guest", get(guest_access))
        .route("/nodes/{node}/qemu/{vmid}/fault", post(guest_fault))
        .route("/nodes/{node}/lxc/{vmid}/guest", get(ct_access))
        .route(
            "/nodes/{node}/qemu/{vmid}/agent",
            get(crate::agent::control::view).post(crate::agent::control::setup),
        )
        .route("/nodes/{node}/fault", post(node_fault))
        .route("/journal", get(journal).delete(journal_clear))
        .route("/state", get(state))
        .route("/state/export", get(super::state_file::export))
        // Bodies are bounded by the server's `--max-body` (`server::limits`).
        .route("/state/import", post(super::state_file::import))
}

type Res = Result<Response, Response>;

/// The site that has `node`; 404 when none has.
fn node_site<'a>(inner: &'a mut Inner, node: &str) -> Result<&'a mut Site, Response> {
    inner
        .world
        .site_of_node_mut(node)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no node '{node}'")))
}

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

fn ok(v: Value) -> Res {
    Ok(Json(v).into_response())
}

async fn reset(State(ctx): State<SiteCtx>) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let now = inner.clock.now();
    let scenario = inner.world.scenario.clone();
    inner.world = inner.world.rebuilt(&scenario, now);
    inner.faults = crate::faults::Faults::new(scenario.seed);
    inner.journal.clear();
    ok(json!({}))
}

async fn scenario_get(State(ctx): State<SiteCtx>) -> Res {
    let inner = ctx.shared.inner.lock();
    Ok(inner.world.scenario.to_yaml().into_response())
}

async fn scenario_load(State(ctx): State<SiteCtx>, body: String) -> Res {
    let sc =
        Scenario::from_yaml_str(&body).map_err(|e| err(StatusCode::BAD_REQUEST, e.to_string()))?;
    let mut inner = ctx.shared.inner.lock();
    // Listeners are bound per site: a scenario must keep this process's site names.
    let have: Vec<String> = inner.world.sites.iter().map(|s| s.name.clone()).collect();
    let want: Vec<String> = sc.sites.iter().map(|s| s.name.clone()).collect();
    if have != want {
        return Err(err(
            StatusCode::BAD_REQUEST,
            format!(
                "scenario sites {want:?} differ from the served sites {have:?}; restart the fake to change sites"
            ),
        ));
    }
    let now = inner.clock.now();
    inner.world = inner.world.rebuilt(&sc, now);
    inner.faults = crate::faults::Faults::new(sc.seed);
    inner.journal.clear();
    ok(json!({}))
}

async fn snapshot(State(ctx): State<SiteCtx>) -> Res {
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let id = inner.next_snapshot.to_string();
    inner.next_snapshot += 1;
    let w = inner.world.clone();
    inner.snapshots.insert(id.clone(), w);
    ok(json!({"id": id}))
}

async fn restore(State(ctx): State<SiteCtx>, Path(id): Path<String>) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let w = inner
        .snapshots
        .get(&id)
        .cloned()
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no snapshot '{id}'")))?;
    inner.world = w;
    ok(json!({}))
}

async fn clock_get(State(ctx): State<SiteCtx>) -> Res {
    let inner = ctx.shared.inner.lock();
    ok(json!({"clock": inner.clock.mode(), "now": inner.clock.now()}))
}

async fn clock_set(State(ctx): State<SiteCtx>, Json(mode): Json<ClockMode>) -> Res {
    if let ClockMode::Scaled { factor } = mode
        && !(factor.is_finite() && factor > 0.0)
    {
        return Err(err(
            StatusCode::BAD_REQUEST,
            "scaled clock needs a factor > 0",
        ));
    }
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    inner.clock.set_mode(mode);
    ok(json!({}))
}

#[derive(Deserialize)]
struct Advance {
    seconds: f64,
}

async fn clock_advance(State(ctx): State<SiteCtx>, Json(a): Json<Advance>) -> Res {
    if !(a.seconds.is_finite() && a.seconds >= 0.0) {
        return Err(err(StatusCode::BAD_REQUEST, "seconds must be >= 0"));
    }
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    inner.clock.advance(Duration::from_secs_f64(a.seconds));
    let now = inner.now();
    ok(json!({"now": now}))
}

async fn faults_list(State(ctx): State<SiteCtx>) -> Res {
    let inner = ctx.shared.inner.lock();
    ok(json!(inner.faults.list()))
}

async fn faults_add(State(ctx): State<SiteCtx>, Json(rule): Json<FaultRule>) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let id = inner
        .faults
        .add(rule)
        .map_err(|e| err(StatusCode::BAD_REQUEST, e))?;
    ok(json!({"id": id}))
}

async fn faults_clear(State(ctx): State<SiteCtx>) -> Res {
    ctx.shared.inner.lock().faults.clear();
    ok(json!({}))
}

#[derive(Deserialize)]
struct Online {
    online: bool,
}

async fn node_online(
    State(ctx): State<SiteCtx>,
    Path(node): Path<String>,
    Json(o): Json<Online>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let now = inner.now();
    let site = node_site(&mut inner, &node)?;
    let powered_off = site.nodes.get(&node).is_some_and(|n| n.powered_off);
    if o.online && powered_off {
        // Switched on: it boots, and starts its `onboot` VMs.
        site.boot_node(&node, now);
    } else if let Some(n) = site.nodes.get_mut(&node) {
        n.online = o.online;
    }
    ok(json!({}))
}

#[derive(Deserialize)]
struct AccessQuery {
    user: String,
    key: std::path::PathBuf,
}

/// How to reach a VM's guest from the host (lab backend): its address, an `ssh` command
/// line that enters the lab's namespace, its serial log. Asks the guest agent, under the
/// lock, for at most a few seconds.
async fn guest_access(
    State(ctx): State<SiteCtx>,
    Path((node, vmid)): Path<(String, u32)>,
    Query(q): Query<AccessQuery>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let site = node_site(&mut inner, &node)?;
    let vm = site
        .vm_on(&node, vmid)
        .map_err(|e| err(StatusCode::NOT_FOUND, e.reason()))?;
    let access = site
        .exec_on(&node)
        .access(vm, &q.user, &q.key)
        .map_err(|e| err(StatusCode::CONFLICT, e))?;
    ok(json!(access))
}

/// How to reach a container from the host (lab backend): its address on `net0`'s
/// interface, an `ssh` command line that enters the lab's namespace, its console log. The
/// same shape as a VM's; 409 when it does not run (or runs on the simulated backend).
async fn ct_access(
    State(ctx): State<SiteCtx>,
    Path((node, vmid)): Path<(String, u32)>,
    Query(q): Query<AccessQuery>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let site = node_site(&mut inner, &node)?;
    let ct = site
        .ct_on(&node, vmid)
        .map_err(|e| err(StatusCode::NOT_FOUND, e.reason()))?;
    let access = site
        .exec_on(&node)
        .ct_access(ct, &q.user, &q.key)
        .map_err(|e| err(StatusCode::CONFLICT, e))?;
    ok(json!(access))
}

/// A fault on a VM's real guest (lab backend): QEMU killed or paused, a NIC's link down or
/// up, a disk's writes failing. The API then shows it as PVE would (see `exec::lab::faults`);
/// 409 when the VM has no running guest (or runs on the simulated backend).
async fn guest_fault(
    State(ctx): State<SiteCtx>,
    Path((node, vmid)): Path<(String, u32)>,
    Json(fault): Json<GuestFault>,
) -> Res {
    fault
        .target()
        .map_err(|e| err(StatusCode::BAD_REQUEST, e))?;
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let site = node_site(&mut inner, &node)?;
    site.vm_on(&node, vmid)
        .map_err(|e| err(StatusCode::NOT_FOUND, e.reason()))?;
    let exec = site.exec_on(&node).clone();
    let vm = site
        .vms
        .get_mut(&vmid)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no VM {vmid}")))?;
    exec.fault(vm, &fault)
        .map_err(|e| err(StatusCode::CONFLICT, e))?;
    ok(json!({}))
}

/// A node's link on a bridge down or up (see `nodes::links`): the NICs it reached.
async fn node_fault(
    State(ctx): State<SiteCtx>,
    Path(node): Path<String>,
    Json(fault): Json<NodeFault>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let site = node_site(&mut inner, &node)?;
    let reached = site
        .node_fault(&node, &fault)
        .map_err(|e| err(StatusCode::CONFLICT, e))?;
    ok(json!({ "reached": reached }))
}

#[derive(Deserialize)]
struct FailNext {
    task_type: String,
    exitstatus: String,
}

async fn fail_next_task(
    State(ctx): State<SiteCtx>,
    Path(node): Path<String>,
    Json(f): Json<FailNext>,
) -> Res {
    if f.exitstatus.is_empty() || f.exitstatus == "OK" {
        return Err(err(
            StatusCode::BAD_REQUEST,
            "exitstatus must be an error text (not OK)",
        ));
    }
    let mut inner = ctx.shared.inner.lock();
    let site = node_site(&mut inner, &node)?;
    if let Some(n) = site.nodes.get_mut(&node) {
        n.armed_failures.push(ArmedFailure {
            task_type: f.task_type,
            exitstatus: f.exitstatus,
        });
    }
    ok(json!({}))
}

fn with_storage<T>(
    ctx: &SiteCtx,
    node: &str,
    storage: &str,
    f: impl FnOnce(&mut crate::storage::model::Storage, f64) -> Result<T, Response>,
) -> Result<T, Response> {
    let mut inner = ctx.shared.inner.lock();
    let now = inner.now();
    let site = inner
        .world
        .site_of_node_mut(node)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no node '{node}'")))?;
    let s = site
        .nodes
        .get_mut(node)
        .and_then(|n| n.storages.get_mut(storage))
        .ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                format!("no storage '{storage}' on node '{node}'"),
            )
        })?;
    f(s, now)
}

#[derive(Deserialize)]
struct Full {
    full: bool,
}

async fn storage_full(
    State(ctx): State<SiteCtx>,
    Path((node, storage)): Path<(String, String)>,
    Json(b): Json<Full>,
) -> Res {
    with_storage(&ctx, &node, &storage, |s, _| {
        s.full = b.full;
        Ok(())
    })?;
    share_settings(&ctx, &node, &storage);
    ok(json!({}))
}

/// A shared storage is one storage: its capacity and fullness are every node's.
fn share_settings(ctx: &SiteCtx, node: &str, storage: &str) {
    let mut inner = ctx.shared.inner.lock();
    if let Some(site) = inner.world.site_of_node_mut(node) {
        site.share_settings(node, storage);
    }
}

#[derive(Deserialize)]
struct Capacity {
    total_bytes: u64,
}

async fn storage_capacity(
    State(ctx): State<SiteCtx>,
    Path((node, storage)): Path<(String, String)>,
    Json(c): Json<Capacity>,
) -> Res {
    with_storage(&ctx, &node, &storage, |s, _| {
        s.total = c.total_bytes;
        Ok(())
    })?;
    share_settings(&ctx, &node, &storage);
    ok(json!({}))
}

#[derive(Deserialize)]
struct NewVolume {
    volname: String,
    /// Virtual size; with `file` and real disks, the file's own is taken when absent.
    #[serde(default)]
    size_bytes: Option<u64>,
    #[serde(default)]
    used_bytes: Option<u64>,
    /// A local file the volume is a copy of (real disks only; ignored by simulated ones).
    #[serde(default)]
    file: Option<std::path::PathBuf>,
    /// What the image holds (`{os, cloud_init, guest_agent}`); unset: unknown.
    #[serde(default)]
    image: Option<crate::storage::image_facts::ImageFacts>,
    /// A snippet's text (`snippets/…` volumes only).
    #[serde(default)]
    text: Option<String>,
}

fn storage_mut<'a>(
    site: &'a mut crate::world::Site,
    node: &str,
    storage: &str,
) -> Option<&'a mut crate::storage::model::Storage> {
    site.nodes.get_mut(node)?.storages.get_mut(storage)
}

/// The site that has `node`, brought up to the clock's present, and the time.
fn site_of<'a>(
    inner: &'a mut crate::server::state::Inner,
    node: &str,
) -> Result<(&'a mut crate::world::Site, f64), Response> {
    let now = inner.now();
    let site = inner
        .world
        .site_of_node_mut(node)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no node '{node}'")))?;
    Ok((site, now))
}

async fn volume_add(
    State(ctx): State<SiteCtx>,
    Path((node, storage)): Path<(String, String)>,
    Json(v): Json<NewVolume>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let (site, now) = site_of(&mut inner, &node)?;
    let s = site
        .nodes
        .get(&node)
        .and_then(|n| n.storages.get(&storage))
        .ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                format!("no storage '{storage}' on node '{node}'"),
            )
        })?;
    let (vtype, vmid, format) = parse_volname(s.kind, &v.volname).ok_or_else(|| {
        err(
            StatusCode::BAD_REQUEST,
            format!(
                "'{}' is not a valid volume name on a {} storage",
                v.volname,
                s.kind.as_str()
            ),
        )
    })?;
    let (avail, name) = (s.avail(), s.name.clone());
    let record = |size: u64, used: u64| Volume {
        volname: v.volname.clone(),
        vtype,
        format: format.clone(),
        size,
        used,
        vmid,
        ctime: now as u64,
        notes: None,
        protected: false,
        image: v.image.clone(),
        text: v
            .text
            .clone()
            .filter(|_| vtype == crate::storage::model::Content::Snippets),
    };
    let too_big = || {
        err(
            StatusCode::CONFLICT,
            format!("storage '{name}' has only {avail} bytes free"),
        )
    };
    if let Some(used) = v.used_bytes.or(v.size_bytes)
        && used > avail
    {
        return Err(too_big());
    }
    if let Some(st) = storage_mut(site, &node, &storage) {
        let size = v.size_bytes.unwrap_or(0);
        st.volumes.insert(
            v.volname.clone(),
            record(size, v.used_bytes.unwrap_or(size)),
        );
    }
    let placed = site.place_data(
        &node,
        &storage,
        &v.volname,
        v.file.as_deref(),
        v.size_bytes.unwrap_or(0),
    );
    let fail = |site: &mut crate::world::Site, e: Response| {
        site.remove_volume(&node, &storage, &v.volname);
        Err(e)
    };
    let placed = match placed {
        Ok(p) => p,
        Err(e) => return fail(site, err(StatusCode::BAD_REQUEST, e)),
    };
    // Sizes the caller left out come from the file.
    let size = v.size_bytes.or(placed.map(|p| p.virtual_size));
    let used = v
        .used_bytes
        .or(v.size_bytes)
        .or(placed.map(|p| p.file_size));
    let (Some(size), Some(used)) = (size, used) else {
        let e = "size_bytes is required (no file data is kept to take it from)";
        return fail(site, err(StatusCode::BAD_REQUEST, e));
    };
    if used > avail {
        return fail(site, too_big());
    }
    if let Some(st) = storage_mut(site, &node, &storage) {
        let size = placed
            .filter(|_| v.file.is_some())
            .map_or(size, |p| p.virtual_size);
        st.volumes.insert(v.volname.clone(), record(size, used));
    }
    site.share_storages();
    ok(json!({"volid": format!("{name}:{}", v.volname)}))
}

#[derive(Deserialize)]
struct VolQuery {
    volume: String,
}

async fn volume_delete(
    State(ctx): State<SiteCtx>,
    Path((node, storage)): Path<(String, String)>,
    Query(q): Query<VolQuery>,
) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let (site, _) = site_of(&mut inner, &node)?;
    let volname = match parse_volid(&q.volume) {
        Some((_, n)) => n.to_string(),
        None => q.volume.clone(),
    };
    if !site
        .nodes
        .get(&node)
        .is_some_and(|n| n.storages.contains_key(&storage))
    {
        return Err(err(
            StatusCode::NOT_FOUND,
            format!("no storage '{storage}' on node '{node}'"),
        ));
    }
    site.remove_volume(&node, &storage, &volname)
        .ok_or_else(|| {
            err(
                StatusCode::NOT_FOUND,
                format!("no volume '{volname}' on '{storage}'"),
            )
        })?;
    site.share_storages();
    ok(json!({}))
}

/// `GET /_fake/journal?since=SEQ`: only the entries numbered after SEQ, so a poller reads each
/// entry once.
#[derive(Deserialize)]
struct JournalQuery {
    since: Option<u64>,
}

async fn journal(State(ctx): State<SiteCtx>, Query(q): Query<JournalQuery>) -> Res {
    // Copied under the lock, rendered after it: a long journal must not stall the API.
    let entries = ctx
        .shared
        .inner
        .lock()
        .journal
        .entries_since(q.since.unwrap_or(0));
    Ok(Json(entries).into_response())
}

async fn journal_clear(State(ctx): State<SiteCtx>) -> Res {
    ctx.shared.inner.lock().journal.clear();
    ok(json!({}))
}

async fn state(State(ctx): State<SiteCtx>) -> Res {
    let mut inner = ctx.shared.inner.lock();
    let now = inner.now();
    let sites: Vec<Value> = inner
        .world
        .sites
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "version": s.version,
                "nodes": s.nodes.values().map(|n| json!({
                    "name": n.name,
                    "online": n.online,
                    "threads": n.threads,
                    "memory": n.memory,
                    "storages": n.storages.values().map(|st| json!({
                        "name": st.name,
                        "type": st.kind,
                        "content": st.content_string(),
                        "total": st.total,
                        "used": st.used(),
                        "full": st.full,
                        "volumes": st.volumes.values().map(|v| json!({
                            "volid": st.volid(&v.volname), "size": v.size, "used": v.used,
                            "vmid": v.vmid, "format": v.format, "content": v.vtype,
                        })).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "vms": s.vms.values().map(|v| json!({
                    "vmid": v.vmid,
                    "node": v.node,
                    "power": v.power,
                    "lock": v.lock,
                    "config": v.config,
                    // The config file's other sections, as PVE writes them.
                    "pending": v.pending.lines().into_iter().collect::<BTreeMap<_, _>>(),
                    "cloudinit": v.cloudinit,
                    "snapshots": v.snapshots,
                    "agent_ready": v.agent_ready_at.is_some_and(|t| t <= now),
                    "leases": v.leases,
                })).collect::<Vec<_>>(),
                "cts": s.cts.values().map(|c| json!({
                    "vmid": c.vmid,
                    "node": c.node,
                    "power": c.power,
                    "lock": c.lock,
                    "config": c.config,
                    "pending": c.pending.lines().into_iter().collect::<BTreeMap<_, _>>(),
                    "snapshots": c.snapshots,
                    "leases": c.leases,
                })).collect::<Vec<_>>(),
                "tasks": s.tasks.iter().map(|t| t.status_json()).collect::<Vec<_>>(),
            })
        })
        .collect();
    ok(json!({"now": now, "sites": sites}))
}
