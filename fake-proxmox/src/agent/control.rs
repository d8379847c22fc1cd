//! The control API's view of a simulated guest (`/_fake/nodes/{node}/qemu/{vmid}/agent`):
//! `POST` scripts command results and lays down files (a [`GuestSetup`]); `GET` shows the
//! guest's files, freeze state, passwords set, scripts and running processes.

// Errors are ready-made responses; their size does not matter on this cold path.
#![allow(clippy::result_large_err)]

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::guest_os::GuestSetup;
use crate::server::state::SiteCtx;

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

/// Run `f` on the simulated guest of `vmid` on `node`; 404 when there is no such VM.
fn with_guest(
    ctx: &SiteCtx,
    node: &str,
    vmid: u32,
    f: impl FnOnce(&mut super::guest_os::GuestOs) -> Value,
) -> Result<Response, Response> {
    let mut inner = ctx.shared.inner.lock();
    inner.now();
    let site = inner
        .world
        .site_of_node_mut(node)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no node '{node}'")))?;
    let setup = site.guest.clone();
    let vm = site
        .vms
        .get_mut(&vmid)
        .filter(|v| v.node == node)
        .ok_or_else(|| err(StatusCode::NOT_FOUND, format!("no VM {vmid} on '{node}'")))?;
    let host = crate::exec::guest_hostname(vm);
    vm.guest.seed(&host, &setup);
    Ok(Json(f(&mut vm.guest)).into_response())
}

/// `POST /_fake/nodes/{node}/qemu/{vmid}/agent`: apply a [`GuestSetup`] to the VM's
/// simulated guest (scripted command results, files) and answer the guest's view after it.
/// 400 when a scripted command has an empty argv, 404 for an unknown node or a VM not on it.
pub async fn setup(
    State(ctx): State<SiteCtx>,
    Path((node, vmid)): Path<(String, u32)>,
    Json(setup): Json<GuestSetup>,
) -> Result<Response, Response> {
    if setup.commands.iter().any(|c| c.command.is_empty()) {
        return Err(err(
            StatusCode::BAD_REQUEST,
            "a scripted command needs its argv",
        ));
    }
    with_guest(&ctx, &node, vmid, |g| {
        g.apply(&setup);
        g.view()
    })
}

/// `GET /_fake/nodes/{node}/qemu/{vmid}/agent`: the VM's simulated guest as JSON (files,
/// freeze state, passwords set, scripts, processes); 404 for an unknown node or a VM not on
/// it.
pub async fn view(
    State(ctx): State<SiteCtx>,
    Path((node, vmid)): Path<(String, u32)>,
) -> Result<Response, Response> {
    with_guest(&ctx, &node, vmid, |g| g.view())
}
