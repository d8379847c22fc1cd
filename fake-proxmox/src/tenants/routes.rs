//! `/_fake/tenants` on the host server's listeners: create, list, show, delete. A tenant's own
//! listeners answer these routes with 403 (their state is `None`).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::{TenantError, TenantRequest, Tenants};

/// The registry a listener's control plane manages; `None` on a tenant's own listeners.
pub type TenantsState = Option<Arc<Tenants>>;

pub fn router() -> Router<TenantsState> {
    Router::new()
        .route("/tenants", get(list).post(create))
        .route("/tenants/{id}", get(show).delete(delete))
}

fn refuse(e: &TenantError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

fn host(state: TenantsState) -> Result<Arc<Tenants>, Response> {
    state.ok_or_else(|| refuse(&TenantError::NotHere))
}

/// The body is read here rather than by axum's `Json`, so every refusal is a JSON
/// `{"error"}` naming what is wrong; an empty body asks for all the defaults.
async fn create(State(state): State<TenantsState>, body: Bytes) -> Response {
    let tenants = match host(state) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let req: TenantRequest = if body.iter().all(u8::is_ascii_whitespace) {
        TenantRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return refuse(&TenantError::BadRequest(e.to_string())),
        }
    };
    match tenants.create(req).await {
        Ok(info) => (StatusCode::CREATED, Json(info)).into_response(),
        Err(e) => refuse(&e),
    }
}

async fn list(State(state): State<TenantsState>) -> Response {
    match host(state) {
        Ok(t) => Json(t.list()).into_response(),
        Err(r) => r,
    }
}

async fn show(State(state): State<TenantsState>, Path(id): Path<String>) -> Response {
    match host(state).map(|t| t.get(&id)) {
        Ok(Ok(info)) => Json(info).into_response(),
        Ok(Err(e)) => refuse(&e),
        Err(r) => r,
    }
}

async fn delete(State(state): State<TenantsState>, Path(id): Path<String>) -> Response {
    let tenants = match host(state) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match tenants.delete(&id).await {
        Ok(()) => Json(json!({"deleted": id})).into_response(),
        Err(e) => refuse(&e),
    }
}
