//! The gateway's request and response bodies besides the Gryvia kinds themselves, and its
//! errors: JSON with a stable `code`, a message, and the field at fault when there is one.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gryvia_reconcile::gateway::{ApiKeyRecord, Identity, Scope};
use gryvia_reconcile::invoice::Cost;
use gryvia_types::{GryviaBudget, GryviaTenant};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiError {
    /// Stable, machine-readable: `unauthenticated`, `forbidden`, `key_scope`, `not_found`,
    /// `method_not_allowed`, `invalid`, `too_large`, `conflict`, `rate_limited`, `upstream`.
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The field at fault (a dotted path such as `spec.replicas`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// HTTP status.
    #[serde(skip)]
    #[schemars(skip)]
    pub status: u16,
    /// Seconds to wait before retrying (`rate_limited`).
    #[serde(skip)]
    #[schemars(skip)]
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            field: None,
            status: status.as_u16(),
            retry_after: None,
        }
    }

    /// The same error naming the field at fault.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// 400 `invalid`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    /// 401 `unauthenticated`.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    /// 403 `forbidden`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The error of a failed Kubernetes request: its status mapped to ours, 502 `upstream`
    /// for the API server's own failures.
    pub fn from_kube(what: &str, e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => {
                let field = s
                    .details
                    .as_ref()
                    .and_then(|d| d.causes.first())
                    .map(|c| c.field.clone())
                    .filter(|f| !f.is_empty());
                let (status, code) = match s.code {
                    400 => (StatusCode::BAD_REQUEST, "invalid"),
                    401 | 403 => (StatusCode::FORBIDDEN, "forbidden"),
                    404 => (StatusCode::NOT_FOUND, "not_found"),
                    409 => (StatusCode::CONFLICT, "conflict"),
                    422 => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
                    429 => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
                    _ => (StatusCode::BAD_GATEWAY, "upstream"),
                };
                let mut err = Self::new(status, code, format!("{what}: {}", s.message));
                err.field = field;
                err
            }
            other => Self::new(
                StatusCode::BAD_GATEWAY,
                "upstream",
                format!("{what}: {other}"),
            ),
        }
    }

    /// The error of a library call.
    pub fn from_client(what: &str, e: &crate::Error) -> Self {
        match e {
            crate::Error::Api { source, .. } => Self::from_kube(what, source),
            crate::Error::Invalid(m) => Self::invalid(format!("{what}: {m}")),
            other => Self::new(
                StatusCode::BAD_GATEWAY,
                "upstream",
                format!("{what}: {other}"),
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry = self.retry_after;
        let mut resp = (status, Json(self)).into_response();
        if let Some(s) = retry
            && let Ok(v) = HeaderValue::from_str(&s.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// A page of a list.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// Pass as `continue` for the next page; absent on the last.
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `GET /api/v1/whoami`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// The user the gateway acts as.
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
    /// Whether it is a platform admin (a member of an admin group).
    pub admin: bool,
    /// `oidc` or `apiKey`.
    pub method: String,
    /// `read` or `write`.
    pub scope: String,
    /// The tenants it may see (confirmed by RBAC), sorted.
    pub tenants: Vec<String>,
}

impl WhoAmI {
    /// The answer for `identity` and its tenants.
    pub fn of(identity: &Identity, tenants: Vec<String>) -> Self {
        Self {
            user: identity.user.clone(),
            groups: identity.groups.clone(),
            admin: identity.admin,
            method: match identity.via {
                gryvia_reconcile::gateway::Via::Oidc => "oidc".to_owned(),
                gryvia_reconcile::gateway::Via::ApiKey { .. } => "apiKey".to_owned(),
            },
            scope: identity.scope.as_str().to_owned(),
            tenants,
        }
    }
}

/// `GET /api/v1/auth/config`: what the dashboard needs to log in.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthConfig {
    /// Whether OIDC login is on.
    pub oidc_enabled: bool,
    /// The issuer URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The client id the dashboard logs in with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The authorization endpoint (from the issuer's discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_endpoint: Option<String>,
    /// The token endpoint (from the issuer's discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// The scopes to ask for.
    pub scopes: Vec<String>,
}

/// A tenant as the gateway shows it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantDetail {
    /// The tenant (spec and status: quota limits and use).
    pub tenant: GryviaTenant,
    /// Its budgets.
    pub budgets: Vec<GryviaBudget>,
    /// Its spend this month so far.
    pub cost: Cost,
}

/// `POST /api/v1/namespaces/{namespace}/templates/{template}/jobs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FromTemplate {
    /// The job's name (default: the template's generated name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Template parameters.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}

/// `POST /api/v1/nodes/{name}/maintenance`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceRequest {
    /// Why the node leaves service.
    #[schemars(length(min = 1, max = 256))]
    pub reason: String,
}

/// The answer of a maintenance change.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceResult {
    /// The node.
    pub node: String,
    /// Whether the node is in maintenance now.
    pub in_maintenance: bool,
    /// Whether this request changed anything.
    pub changed: bool,
}

/// `POST /api/v1/apikeys`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateApiKey {
    /// A name for people.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Limit the key to this tenant's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `read` or `write` (default).
    #[serde(default)]
    #[schemars(with = "Option<ScopeName>")]
    pub scope: Scope,
    /// Days until it expires (default 90, at most 365).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 365))]
    pub expires_in_days: Option<u32>,
}

/// A scope's name in the OpenAPI document.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[expect(dead_code, reason = "only its schema is used")]
enum ScopeName {
    Read,
    Write,
}

/// An API key as listed (never its secret).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The user it acts as.
    pub user: String,
    /// The tenant it is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `read` or `write`.
    pub scope: String,
    /// When it was created (RFC 3339).
    pub created: String,
    /// When it expires (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
}

impl From<&ApiKeyRecord> for ApiKeyView {
    fn from(r: &ApiKeyRecord) -> Self {
        Self {
            id: r.id.clone(),
            name: r.name.clone(),
            user: r.user.clone(),
            tenant: r.tenant.clone(),
            scope: r.scope.as_str().to_owned(),
            created: r.created.to_string(),
            expires: r.expires.map(|t| t.to_string()),
        }
    }
}

/// A created API key: shown once.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedApiKey {
    /// The key to present as `Authorization: Bearer <key>`; stored nowhere, shown only now.
    pub key: String,
    /// What was stored.
    pub record: ApiKeyView,
}

/// Logs of a job's workers.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobLogs {
    /// Per worker pod (its newest attempt), its log.
    pub workers: BTreeMap<String, String>,
}
