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

/// `GET`/`POST /tenants` and `GET`/`DELETE /tenants/{id}`, to be nested under `/_fake`.
/// Refusals are JSON `{"error": …}` with [`TenantError::status`]; a successful `POST`
/// answers 201 with the new [`TenantInfo`](super::TenantInfo).
pub fn router() -> Router<TenantsState> {
    Router::new()
        .route("/tenants", get(list).post(create))
        .route("/tenants/{id}", get(show).delete(delete))
}

fn refuse(e: &TenantError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

fn host(state: TenantsState) -> Result<Arc<Tenants>, TenantError> {
    state.ok_or(TenantError::NotHere)
}

fn answer<T: serde::Serialize>(status: StatusCode, r: Result<T, TenantError>) -> Response {
    match r {
        Ok(v) => (status, Json(v)).into_response(),
        Err(e) => refuse(&e),
    }
}

/// The body is read here rather than by axum's `Json`, so every refusal is a JSON
/// `{"error"}` naming what is wrong; an empty body asks for all the defaults.
async fn create(State(state): State<TenantsState>, body: Bytes) -> Response {
    let req = if body.iter().all(u8::is_ascii_whitespace) {
        Ok(TenantRequest::default())
    } else {
        serde_json::from_slice::<TenantRequest>(&body)
            .map_err(|e| TenantError::BadRequest(e.to_string()))
    };
    let created = match (host(state), req) {
        (Ok(tenants), Ok(req)) => tenants.create(req).await,
        (Err(e), _) | (_, Err(e)) => Err(e),
    };
    answer(StatusCode::CREATED, created)
}

async fn list(State(state): State<TenantsState>) -> Response {
    answer(StatusCode::OK, host(state).map(|t| t.list()))
}

async fn show(State(state): State<TenantsState>, Path(id): Path<String>) -> Response {
    answer(StatusCode::OK, host(state).and_then(|t| t.get(&id)))
}

async fn delete(State(state): State<TenantsState>, Path(id): Path<String>) -> Response {
    let deleted = match host(state) {
        Ok(t) => t.delete(&id).await.map(|()| json!({"deleted": id})),
        Err(e) => Err(e),
    };
    answer(StatusCode::OK, deleted)
}
