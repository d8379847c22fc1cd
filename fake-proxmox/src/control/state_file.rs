//! `GET /_fake/state/export` and `POST /_fake/state/import`: the whole state as one file
//! (the document `persist` writes to a state dir), to move a world between servers.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::server::state::SiteCtx;
use crate::world::Runners;

fn refuse(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

/// The whole state as one JSON file, the document a `--state-dir` holds (world, faults,
/// snapshots, clock), brought up to the clock's present first; served as an attachment
/// named `fake-proxmox-state.json`. [`import`] on another server with the same sites takes
/// it back.
pub async fn export(State(ctx): State<SiteCtx>) -> Response {
    let bytes = {
        let mut inner = ctx.shared.inner.lock();
        inner.now();
        crate::persist::encode(&inner)
    };
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"fake-proxmox-state.json\"",
            ),
        ],
        bytes,
    )
        .into_response()
}

/// Replace the state with the file's: the world, faults, snapshots and clock. The file is
/// checked whole first; a bad one is refused with 400 and nothing changes. The file must
/// hold this server's sites (their listeners are bound). Tasks running in the file go on
/// running; the journal stays.
pub async fn import(State(ctx): State<SiteCtx>, body: Bytes) -> Response {
    let state = match crate::persist::decode(&body) {
        Ok(s) => s,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let mut inner = ctx.shared.inner.lock();
    let have: Vec<String> = inner.world.sites.iter().map(|s| s.name.clone()).collect();
    let want: Vec<String> = state
        .scenario()
        .sites
        .iter()
        .map(|s| s.name.clone())
        .collect();
    if have != want {
        return refuse(
            StatusCode::BAD_REQUEST,
            format!(
                "the file's sites {want:?} differ from the served sites {have:?}; restart the fake to change sites"
            ),
        );
    }
    let default = Runners {
        exec: inner.world.exec.clone(),
        disks: inner.world.disks.clone(),
    };
    let other = inner.world.other.clone();
    state.install(&mut inner, default, other);
    let vms: usize = inner.world.sites.iter().map(|s| s.vms.len()).sum();
    Json(json!({"sites": want.len(), "vms": vms})).into_response()
}
