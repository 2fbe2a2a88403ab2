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
        Metrics {
            registry: Arc::new(std::sync::Mutex::new(registry)),
            reconciles,
            errors,
            duration,
            leader,
            webhook_reviews,
            webhook_duration,
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
