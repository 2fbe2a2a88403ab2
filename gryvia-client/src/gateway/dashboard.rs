//! The dashboard: three static files (HTML, CSS, plain JavaScript) compiled into the binary. It
//! logs in with OIDC (authorization code with PKCE, in the browser) or an API key and reads the
//! gateway's own REST API as that user: the fleet's GPU health, the queue with why-pending and
//! expected start, tenants' use against quota, and their spend. No Node toolchain is needed to
//! build or run it.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

/// The page.
pub const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

/// `GET /dashboard/{file}`.
pub async fn asset(Path(file): Path<String>) -> impl IntoResponse {
    match file.as_str() {
        "app.js" => Ok((
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            APP,
        )),
        "style.css" => Ok(([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE)),
        _ => Err(super::api::ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no dashboard file {file:?}"),
        )),
    }
}
