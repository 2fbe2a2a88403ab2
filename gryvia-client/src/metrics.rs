//! Prometheus metrics of the controllers, and the `/metrics`, `/healthz` and `/readyz`
//! endpoints every Gryvia binary serves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tracing::info;

use crate::{Error, Result};

/// Labels of a per-controller metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// Controller name.
    pub controller: String,
}

/// Labels of an error metric: controller and a static error label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Controller name.
    pub controller: String,
    /// Static error label ([`Error::metric_label`]).
    pub error: String,
}

/// Labels of an admission review metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `validate` or `mutate`.
    pub hook: String,
    /// Whether the object was admitted.
    pub allowed: bool,
}

/// Labels of an API request metric: the verb (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`) and the resource, with its subresource (`pods`, `gryviaaijobs/status`,
/// `pods/eviction`). Both are bounded by the kinds a process talks to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The Kubernetes verb.
    pub verb: String,
    /// The resource, `/subresource` appended when there is one.
    pub resource: String,
}

/// Every request this process sent to the API server, by verb and resource (retries
/// included). One family for the process: every [`Metrics`] registry exports it.
pub fn api_requests() -> &'static Family<RequestLabels, Counter> {
    static REQUESTS: std::sync::OnceLock<Family<RequestLabels, Counter>> =
        std::sync::OnceLock::new();
    REQUESTS.get_or_init(Family::default)
}

/// Labels of a watch cache's size: the kind and its label selector (empty: all).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheLabels {
    /// Kind of the cached objects.
    pub kind: String,
    /// Label selector of the watch (empty: every object of the kind).
    pub selector: String,
}

/// Objects in each watch cache of this process. One family for the process: every
/// [`Metrics`] registry exports it.
pub fn cache_objects() -> &'static Family<CacheLabels, Gauge> {
    static OBJECTS: std::sync::OnceLock<Family<CacheLabels, Gauge>> = std::sync::OnceLock::new();
    OBJECTS.get_or_init(Family::default)
}

/// The verb and resource of a request to the API server, from its method and path (`None`
/// for paths that address no resource, such as `/version` or discovery).
pub fn classify_request(method: &http::Method, uri: &http::Uri) -> Option<RequestLabels> {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    // `namespaces/NS/RESOURCE/...` addresses a namespaced resource; `namespaces/NAME[/status]`
    // is the namespace itself.
    let rest = match rest {
        ["namespaces", _, resource, tail @ ..] if !matches!(*resource, "status" | "finalize") => {
            let mut r = vec![*resource];
            r.extend_from_slice(tail);
            r
        }
        other => other.to_vec(),
    };
    let (resource, named, sub) = match rest.as_slice() {
        [] => return None,
        [resource] => (*resource, false, None),
        [resource, _name] => (*resource, true, None),
        [resource, _name, sub, ..] => (*resource, true, Some(*sub)),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    let verb = match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET if named => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "other",
    };
    Some(RequestLabels {
        verb: verb.to_owned(),
        resource: match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_owned(),
        },
    })
}

/// Counts a request in [`api_requests`].
pub fn count_request<B>(request: &http::Request<B>) {
    if let Some(labels) = classify_request(request.method(), request.uri()) {
        api_requests().get_or_create(&labels).inc();
    }
}

/// The metrics every controller records.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<std::sync::Mutex<Registry>>,
    /// Reconciles started.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconciles that failed.
    pub errors: Family<ErrorLabels, Counter>,
    /// Duration of reconciles, seconds.
    pub duration: Family<ControllerLabels, Histogram>,
    /// 1 while this replica holds the leader lease.
    pub leader: Family<ControllerLabels, Gauge>,
    /// Admission reviews answered.
    pub webhook_reviews: Family<WebhookLabels, Counter>,
    /// Time to answer an admission review (label `controller`: the hook), seconds.
    pub webhook_duration: Family<ControllerLabels, Histogram>,
    /// Pods evicted by a controller's Plans.
    pub evictions: Family<ControllerLabels, Counter>,
    /// Evictions of a controller's Plans that a PodDisruptionBudget refused (retried).
    pub blocked_evictions: Family<ControllerLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers the metrics under the prefix `gryvia`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gryvia");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        let duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let leader = Family::<ControllerLabels, Gauge>::default();
        let evictions = Family::<ControllerLabels, Counter>::default();
        let blocked_evictions = Family::<ControllerLabels, Counter>::default();
        registry.register("evictions", "Pods evicted by Plans", evictions.clone());
        registry.register(
            "evictions_blocked",
            "Evictions a PodDisruptionBudget refused",
            blocked_evictions.clone(),
        );
        let webhook_reviews = Family::<WebhookLabels, Counter>::default();
        let webhook_duration = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00001, 2.0, 20))
        });
        registry.register(
            "webhook_reviews",
            "Admission reviews answered",
            webhook_reviews.clone(),
        );
        registry.register(
            "webhook_review_duration_seconds",
            "Time to answer an admission review",
            webhook_duration.clone(),
        );
        registry.register("reconciles", "Reconciles started", reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed", errors.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciles",
            duration.clone(),
        );
        registry.register("leader", "1 while this replica leads", leader.clone());
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API server, by verb and resource",
            api_requests().clone(),
        );
        registry.register(
            "cache_objects",
            "Objects in each watch cache, by kind and label selector",
            cache_objects().clone(),
        );
        Metrics {
            registry: Arc::new(std::sync::Mutex::new(registry)),
            reconciles,
            errors,
            duration,
            leader,
            webhook_reviews,
            webhook_duration,
            evictions,
            blocked_evictions,
        }
    }

    /// Registers a metric of a binary's own beside these (under the same `gryvia` prefix).
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        if let Ok(mut r) = self.registry.lock() {
            r.register(name, help, metric);
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Ok(registry) = self.registry.lock() {
            // Writing into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        }
        out
    }
}

/// Health of the process: live while it runs, ready once it has started its work.
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the process ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether the process is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct ServerState {
    metrics: Metrics,
    health: Health,
}

/// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until the process ends.
///
/// # Errors
/// [`Error::Serve`] when the address cannot be bound.
pub async fn serve(addr: SocketAddr, metrics: Metrics, health: Health) -> Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(s): State<ServerState>| async move { s.metrics.encode() }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(s): State<ServerState>| async move {
                if s.health.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .with_state(ServerState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve {
            addr: addr.to_string(),
            source,
        })?;
    info!(%addr, "serving /metrics /healthz /readyz");
    axum::serve(listener, app)
        .await
        .map_err(|source| Error::Serve {
            addr: addr.to_string(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn requests_are_named_by_verb_and_resource() {
        let cases = [
            (Method::GET, "/api/v1/nodes", Some(("list", "nodes"))),
            (Method::GET, "/api/v1/nodes/n1", Some(("get", "nodes"))),
            (
                Method::GET,
                "/api/v1/pods?labelSelector=a&watch=true&timeoutSeconds=290",
                Some(("watch", "pods")),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods",
                Some(("list", "pods")),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/ns/pods/p/eviction",
                Some(("create", "pods/eviction")),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/tenant-a",
                Some(("get", "namespaces")),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/tenant-a/finalize",
                Some(("update", "namespaces/finalize")),
            ),
            (
                Method::PATCH,
                "/apis/gryvia.io/v1alpha1/namespaces/ns/gryviaaijobs/j/status?fieldManager=x",
                Some(("patch", "gryviaaijobs/status")),
            ),
            (
                Method::DELETE,
                "/apis/batch/v1/namespaces/ns/jobs/j",
                Some(("delete", "jobs")),
            ),
            (Method::GET, "/version", None),
            (Method::GET, "/apis/gryvia.io/v1alpha1", None),
        ];
        for (method, uri, want) in cases {
            let got = classify_request(&method, &uri.parse().unwrap());
            let got = got.as_ref().map(|l| (l.verb.as_str(), l.resource.as_str()));
            assert_eq!(got, want, "{method} {uri}");
        }
    }
}
