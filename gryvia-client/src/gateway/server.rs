//! The gateway's state, its authentication, rate limit and audit layer, its router, and the
//! run loop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use gryvia_reconcile::gateway::{
    ClaimMapping, Identity, RateLimiter, candidate_tenants, identity_from_claims, identity_from_key,
};
use gryvia_types::GryviaTenant;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use kube::runtime::reflector::Store;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::api::{ApiError, AuthConfig};
use super::apikeys::KeyStore;
use super::impersonate::Impersonation;
use super::oidc::{OidcConfig, OidcVerifier};
use crate::cache::{Caches, wait_ready};
use crate::metrics::{Health, Metrics};
use crate::{Error, Result};

/// How the gateway runs (its binary's flags and the environment the features guide names).
#[derive(Clone, Debug)]
pub struct Config {
    /// Where it listens.
    pub listen: SocketAddr,
    /// OIDC, when on.
    pub oidc: Option<OidcConfig>,
    /// The client id the dashboard logs in with.
    pub client_id: Option<String>,
    /// How claims become identities.
    pub mapping: ClaimMapping,
    /// The namespace of the API key Secrets.
    pub keys_namespace: String,
    /// Sustained requests per second per identity.
    pub rate_per_second: f64,
    /// Burst per identity.
    pub rate_burst: u32,
}

/// Labels of the gateway's request metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct RouteLabels {
    route: String,
    method: String,
    code: String,
}

/// Labels of refused credentials.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// Labels of request durations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct DurationLabels {
    route: String,
}

/// The gateway: its clients, verifiers, caches and metrics.
pub struct Gateway {
    pub(super) base: kube::Client,
    pub(super) oidc: Option<OidcVerifier>,
    pub(super) auth_config: AuthConfig,
    pub(super) mapping: ClaimMapping,
    pub(super) keys: KeyStore,
    limiter: Mutex<RateLimiter>,
    pub(super) tenants: Store<GryviaTenant>,
    /// The watch caches of the served kinds, lists are answered from.
    pub(super) caches: Caches,
    access: Mutex<HashMap<String, (bool, Instant)>>,
    pub(super) validator: gryvia_types::validation::Validator,
    pub(super) metrics: Metrics,
    pub(super) health: Health,
    requests: Family<RouteLabels, Counter>,
    auth_failures: Family<ReasonLabels, Counter>,
    durations: Family<DurationLabels, Histogram>,
    started: Instant,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("oidc", &self.oidc)
            .finish_non_exhaustive()
    }
}

/// How long a confirmed (or refused) tenant access is remembered.
const ACCESS_TTL: Duration = Duration::from_secs(10);

impl Gateway {
    /// Connects everything: discovers the issuer, starts the watches of tenants and API keys.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the issuer cannot be discovered; [`Error::Api`] or
    /// [`Error::Timeout`] when the watches do not start.
    pub async fn start(base: kube::Client, config: &Config) -> Result<Arc<Self>> {
        let (oidc, auth_config) = match &config.oidc {
            Some(c) => {
                let verifier = OidcVerifier::discover(c.clone())
                    .await
                    .map_err(|e| Error::Invalid(format!("OIDC: {e}")))?;
                let endpoints = verifier.endpoints().clone();
                (
                    Some(verifier),
                    AuthConfig {
                        oidc_enabled: true,
                        issuer: Some(c.issuer.clone()),
                        client_id: config.client_id.clone(),
                        authorization_endpoint: endpoints.0,
                        token_endpoint: endpoints.1,
                        scopes: vec![
                            "openid".to_owned(),
                            "email".to_owned(),
                            "groups".to_owned(),
                            "profile".to_owned(),
                        ],
                    },
                )
            }
            None => (
                None,
                AuthConfig {
                    oidc_enabled: false,
                    issuer: None,
                    client_id: None,
                    authorization_endpoint: None,
                    token_endpoint: None,
                    scopes: Vec::new(),
                },
            ),
        };
        let keys = KeyStore::start(&base, &config.keys_namespace).await?;
        // The operators' shared watch caches: the tenants, and every kind the gateway lists.
        let caches = Caches::new(base.clone());
        let tenants = caches.store::<GryviaTenant>();
        let served = super::routes::register_caches(&caches);
        tokio::spawn(caches.run());
        wait_ready(&tenants, "GryviaTenant").await?;
        served.await?;
        let metrics = Metrics::new();
        let requests = Family::<RouteLabels, Counter>::default();
        let auth_failures = Family::<ReasonLabels, Counter>::default();
        let durations = Family::<DurationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        metrics.register(
            "gateway_requests",
            "Gateway requests answered, by route, method and status",
            requests.clone(),
        );
        metrics.register(
            "gateway_auth_failures",
            "Credentials the gateway refused, by reason",
            auth_failures.clone(),
        );
        metrics.register(
            "gateway_request_duration_seconds",
            "Time to answer a gateway request, by route",
            durations.clone(),
        );
        let validator = gryvia_types::validation::Validator::new()
            .map_err(|e| Error::Invalid(format!("compile the CRD schemas: {e}")))?;
        Ok(Arc::new(Self {
            base,
            oidc,
            auth_config,
            mapping: config.mapping.clone(),
            keys,
            limiter: Mutex::new(RateLimiter::new(
                config.rate_per_second,
                config.rate_burst,
                100_000,
            )),
            tenants,
            caches,
            access: Mutex::new(HashMap::new()),
            validator,
            metrics,
            health: Health::default(),
            requests,
            auth_failures,
            durations,
            started: Instant::now(),
        }))
    }

    /// A client acting as `identity`.
    ///
    /// # Errors
    /// [`ApiError`] 401 when its names cannot be sent as headers.
    pub(super) fn client_for(&self, identity: &Identity) -> Result<kube::Client, ApiError> {
        Impersonation::new(&identity.user, &identity.groups)
            .map(|i| i.client(&self.base))
            .map_err(ApiError::unauthenticated)
    }

    /// Who presents `bearer`: an API key (by its prefix) or an OIDC ID token.
    async fn authenticate(&self, bearer: &str) -> Result<Identity, ApiError> {
        let refuse = |reason: &str, message: String| {
            self.auth_failures
                .get_or_create(&ReasonLabels {
                    reason: reason.to_owned(),
                })
                .inc();
            ApiError::unauthenticated(message)
        };
        if bearer.starts_with(gryvia_reconcile::gateway::API_KEY_PREFIX) {
            let record = self
                .keys
                .authenticate(bearer)
                .await
                .map_err(|e| refuse(e.reason(), e.to_string()))?;
            return identity_from_key(&record, &self.mapping, jiff::Timestamp::now())
                .map_err(|e| refuse("key_expired", e.to_string()));
        }
        let Some(oidc) = &self.oidc else {
            return Err(refuse(
                "oidc_off",
                "OIDC is off on this gateway: present an API key".to_owned(),
            ));
        };
        let claims = oidc
            .verify(bearer)
            .await
            .map_err(|e| refuse(e.reason(), e.to_string()))?;
        identity_from_claims(&claims, &self.mapping).map_err(|e| refuse("claims", e.to_string()))
    }

    /// The tenants `identity` may see: its candidate tenants (by membership, or all for an
    /// admin) that the API server confirms, as the identity, it may list jobs in.
    pub(super) async fn visible_tenants(&self, identity: &Identity) -> Vec<String> {
        let all: Vec<GryviaTenant> = self.tenants.state().iter().map(|t| (**t).clone()).collect();
        let mut out = Vec::new();
        for t in candidate_tenants(identity, &all) {
            if self
                .may_use_namespace(identity, &gryvia_reconcile::tenancy::namespace_of(&t))
                .await
            {
                out.push(t);
            }
        }
        out
    }

    /// Whether RBAC lets `identity` list GryviaAIJobs in `namespace`.
    pub(super) async fn may_use_namespace(&self, identity: &Identity, namespace: &str) -> bool {
        self.may_list(identity, Some(namespace), "gryviaaijobs")
            .await
    }

    /// Whether RBAC lets `identity` list `plural` (a Gryvia kind) in `namespace`, or in every
    /// namespace when `None`: asked as the identity with a SelfSubjectAccessReview, the answer
    /// remembered for a few seconds.
    pub(super) async fn may_list(
        &self,
        identity: &Identity,
        namespace: Option<&str>,
        plural: &str,
    ) -> bool {
        let key = format!(
            "{}\u{0}{}\u{0}{}\u{0}{plural}",
            identity.user,
            identity.groups.join(","),
            namespace.unwrap_or("*")
        );
        if let Ok(cache) = self.access.lock()
            && let Some((allowed, at)) = cache.get(&key)
            && at.elapsed() < ACCESS_TTL
        {
            return *allowed;
        }
        let Ok(client) = self.client_for(identity) else {
            return false;
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(gryvia_types::GROUP.to_owned()),
                    resource: Some(plural.to_owned()),
                    verb: Some("list".to_owned()),
                    namespace: namespace.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let allowed = Api::<SelfSubjectAccessReview>::all(client)
            .create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed);
        if let Ok(mut cache) = self.access.lock() {
            if cache.len() > 50_000 {
                cache.retain(|_, (_, at)| at.elapsed() < ACCESS_TTL);
            }
            cache.insert(key, (allowed, Instant::now()));
        }
        allowed
    }

    fn rate_limit(&self, identity: &Identity) -> Result<(), ApiError> {
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let Ok(mut limiter) = self.limiter.lock() else {
            return Ok(());
        };
        limiter.check(&identity.user, now_ms).map_err(|wait_ms| {
            let mut e = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "too many requests from {}; retry in {wait_ms} ms",
                    identity.user
                ),
            );
            e.retry_after = Some(wait_ms.div_ceil(1000).max(1));
            e
        })
    }
}

/// Authenticates every `/api/v1` request (except the login configuration), rate-limits it
/// per identity, and writes an audit line for each mutating one.
async fn authenticated(State(g): State<Arc<Gateway>>, mut req: Request, next: Next) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|v| v.trim().to_owned());
    let Some(bearer) = bearer.filter(|b| !b.is_empty()) else {
        g.auth_failures
            .get_or_create(&ReasonLabels {
                reason: "missing".to_owned(),
            })
            .inc();
        return with_challenge(
            ApiError::unauthenticated(
                "no credentials: send Authorization: Bearer <token or API key>",
            )
            .into_response(),
        );
    };
    let identity = match g.authenticate(&bearer).await {
        Ok(i) => i,
        Err(e) => return with_challenge(e.into_response()),
    };
    if let Err(e) = g.rate_limit(&identity) {
        return e.into_response();
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if !identity.scope.allows(reads) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "key_scope",
            "this API key may only read",
        )
        .into_response();
    }
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    req.extensions_mut().insert(identity.clone());
    let resp = next.run(req).await;
    if !reads {
        tracing::info!(
            target: "gryvia::audit",
            user = %identity.user,
            groups = %identity.groups.join(","),
            via = ?identity.via,
            method = %method,
            path = %path,
            status = resp.status().as_u16(),
            "audit"
        );
    }
    resp
}

fn with_challenge(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// Counts every answer by route, method and status, and times it.
async fn measured(State(g): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().to_string();
    let started = Instant::now();
    let resp = next.run(req).await;
    g.durations
        .get_or_create(&DurationLabels {
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    g.requests
        .get_or_create(&RouteLabels {
            route,
            method,
            code: resp.status().as_u16().to_string(),
        })
        .inc();
    resp
}

/// Answers that the framework made itself (a query string, path or body it could not read, a
/// method a route does not take) as JSON errors like every other: code `invalid` (400, 415,
/// 422), `method_not_allowed` (405), `not_found` (404), `too_large` (413).
async fn json_errors(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !status.is_client_error() || is_json {
        return resp;
    }
    let body = axum::body::to_bytes(resp.into_body(), 64 * 1024)
        .await
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&body).trim().to_owned();
    let code = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        _ => "invalid",
    };
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        message
    };
    ApiError::new(status, code, message).into_response()
}

/// The gateway's routes: the authenticated API under `/api/v1`, and the open ones (health,
/// metrics, the OpenAPI document, the dashboard, the login configuration).
pub fn router(g: Arc<Gateway>) -> Router {
    let api = super::routes::api().route_layer(middleware::from_fn_with_state(
        Arc::clone(&g),
        authenticated,
    ));
    super::routes::open()
        .merge(api)
        .fallback(|| async { ApiError::not_found("no such route") })
        .route_layer(middleware::from_fn_with_state(Arc::clone(&g), measured))
        .layer(middleware::from_fn(json_errors))
        .with_state(g)
}

/// Runs the gateway until SIGTERM or Ctrl-C.
///
/// # Errors
/// [`Error::Serve`] when the address cannot be bound, or what [`Gateway::start`] returns.
pub async fn run(base: kube::Client, config: Config) -> Result<()> {
    let g = Gateway::start(base, &config).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| Error::Serve {
            addr: config.listen.to_string(),
            source,
        })?;
    tracing::info!(
        listen = %config.listen,
        oidc = g.oidc.as_ref().map(OidcVerifier::issuer),
        keys = %config.keys_namespace,
        "gateway serving"
    );
    g.health.set_ready(true);
    axum::serve(listener, router(g))
        .with_graceful_shutdown(crate::operators::shutdown_signal())
        .await
        .map_err(|source| Error::Serve {
            addr: config.listen.to_string(),
            source,
        })
}
