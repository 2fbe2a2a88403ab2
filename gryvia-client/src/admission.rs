//! The ai-operator's admission webhooks: a TLS server answering `AdmissionReview`s for new
//! GryviaAIJobs, its certificates, and its registration with the API server.
//!
//! The decisions are the pure functions of `gryvia_reconcile::admission`; this module reads
//! the facts they need from watch caches (namespaces, tenants, priorities, GPU SKUs, ResourceQuotas,
//! templates, reservations), so a review costs no API call. When a cache is not synced yet,
//! the webhook fails open (admits, with a warning) unless it was started fail-closed; the
//! registration's `failurePolicy` follows the same flag (`Ignore` or `Fail`).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use base64::Engine;
use gryvia_reconcile::admission::{
    AdmissionWorld, BlockedBudget, Decision, GpuQuota, MonthSpend, ReservationFacts, TemplateState,
    TenantFacts, mutate_job, preemptible_reservations, validate_job,
};
use gryvia_types::{
    GryviaAIJob, GryviaBudget, GryviaGpuSku, GryviaPriority, GryviaReservation, GryviaTemplate,
    GryviaTenant, GryviaUsageRecord, labels,
};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::cache::{NamespaceMeta, ready_by};
use crate::metrics::Metrics;
use crate::{Error, Result, api_err};

/// Path of the validating webhook.
pub const VALIDATE_PATH: &str = "/validate-aijob";
/// Path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate-aijob";
/// Path of the mutating webhook of GryviaModelRegistries (the audit of stage changes).
pub const MUTATE_REGISTRY_PATH: &str = "/mutate-modelregistry";

/// The watch caches the webhooks read.
#[derive(Clone)]
pub struct Caches {
    namespaces: Store<NamespaceMeta>,
    tenants: Store<GryviaTenant>,
    skus: Store<GryviaGpuSku>,
    quotas: Store<ResourceQuota>,
    templates: Store<GryviaTemplate>,
    reservations: Store<GryviaReservation>,
    budgets: Store<GryviaBudget>,
    records: Store<GryviaUsageRecord>,
    priorities: Store<GryviaPriority>,
}

impl Caches {
    /// Starts the watches (on the current runtime, with [`crate::cache::Caches`]: one per
    /// kind, as the controllers' caches) and returns their stores.
    pub fn start(client: &kube::Client) -> Self {
        let caches = crate::cache::Caches::new(client.clone());
        let stores = Caches {
            namespaces: caches.store(),
            tenants: caches.store(),
            skus: caches.store(),
            quotas: caches.store(),
            templates: caches.store(),
            reservations: caches.store(),
            budgets: caches.store(),
            records: caches.store(),
            priorities: caches.store(),
        };
        tokio::spawn(caches.run());
        stores
    }

    /// Waits until every cache has its first full list, or `timeout` passes.
    ///
    /// # Errors
    /// [`Error::Timeout`] when a cache is not ready in time.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        let ready = [
            ready_by(&self.namespaces, deadline).await,
            ready_by(&self.tenants, deadline).await,
            ready_by(&self.skus, deadline).await,
            ready_by(&self.quotas, deadline).await,
            ready_by(&self.templates, deadline).await,
            ready_by(&self.reservations, deadline).await,
            ready_by(&self.budgets, deadline).await,
            ready_by(&self.records, deadline).await,
            ready_by(&self.priorities, deadline).await,
        ];
        if ready.iter().any(Result::is_err) {
            return Err(Error::Timeout {
                what: "the admission caches".to_owned(),
                after: timeout,
            });
        }
        Ok(())
    }

    /// The budgets in state `blocked` whose scope covers a job of `tenant` in `namespace`.
    pub fn blocked_budgets(&self, tenant: Option<&str>, namespace: &str) -> Vec<BlockedBudget> {
        let budgets = self.budgets.state();
        gryvia_reconcile::admission::blocked_budgets(
            budgets.iter().map(AsRef::as_ref),
            tenant,
            namespace,
        )
    }

    /// What `tenant` has used this UTC month and the estimate of `job` (the admission gate's
    /// money and GPU-hour quotas), from the usage records and the catalogue.
    pub fn month_spend(&self, job: &GryviaAIJob, tenant: &str) -> MonthSpend {
        let state = self.records.state();
        let records: Vec<&GryviaUsageRecord> = state
            .iter()
            .map(AsRef::as_ref)
            .filter(|r| r.spec.tenant == tenant)
            .collect();
        gryvia_reconcile::admission::month_spend(
            job,
            tenant,
            &records,
            &crate::controllers::budget::catalogue(&self.skus),
            jiff::Timestamp::now(),
        )
    }

    /// The facts of the tenant of `namespace` (`None`: the namespace belongs to none).
    ///
    /// # Errors
    /// A reason when the namespace or its tenant is not in the caches yet.
    pub fn tenant(&self, namespace: &str) -> std::result::Result<Option<TenantFacts>, String> {
        let namespace_obj = self
            .namespaces
            .get(&ObjectRef::new(namespace))
            .ok_or_else(|| format!("namespace {namespace} is not in the cache yet"))?;
        match namespace_obj.labels().get(labels::TENANT) {
            Some(t) => {
                let obj = self.tenants.get(&ObjectRef::new(t)).ok_or_else(|| {
                    format!("tenant {t} of namespace {namespace} is not in the cache")
                })?;
                Ok(Some(TenantFacts::of(t, &obj)))
            }
            None => Ok(None),
        }
    }

    /// The facts about `job` that the admission webhooks need, from the caches.
    ///
    /// # Errors
    /// A reason when a cache has not been filled yet (the caller fails open or closed).
    pub fn facts(
        &self,
        job: &GryviaAIJob,
        namespace: &str,
    ) -> std::result::Result<AdmissionWorld, String> {
        let tenant = self.tenant(namespace)?;
        let skus = self
            .skus
            .state()
            .iter()
            .map(|s| (s.name_any(), s.spec.gpu_product.clone()))
            .collect();
        let quotas = self.quotas.state();
        let gpu_quota = GpuQuota::tightest(
            quotas
                .iter()
                .filter(|q| q.namespace().as_deref() == Some(namespace))
                .map(AsRef::as_ref),
        );
        let template = job
            .labels()
            .get(labels::TEMPLATE)
            .map(|t| TemplateState::of(self.templates.get(&ObjectRef::new(t)).as_deref()));
        let reservation = job
            .annotations()
            .get(labels::RESERVATION)
            .map(|r| ReservationFacts::of(self.reservations.get(&ObjectRef::new(r)).as_deref()));
        let tiers = self
            .priorities
            .state()
            .iter()
            .map(|p| (p.name_any(), p.spec.value))
            .collect();
        Ok(AdmissionWorld {
            tenant,
            skus,
            gpu_quota,
            template,
            reservation,
            preemptible: preemptible_reservations(
                self.reservations.state().iter().map(AsRef::as_ref),
                |t| {
                    self.tenants
                        .get(&ObjectRef::new(t))?
                        .spec
                        .priorities
                        .as_ref()?
                        .default
                        .clone()
                },
                &tiers,
            ),
            tiers,
            requester: None,
            blocked_budgets: Vec::new(),
            spend: None,
        })
    }
}

/// What the webhook handlers share.
#[derive(Clone)]
pub struct WebhookState {
    /// The caches.
    pub caches: Caches,
    /// Deny when the facts cannot be read (default: admit with a warning).
    pub fail_closed: bool,
    /// Reject new GPU jobs in the scope of a `blocked` GryviaBudget (the admission gate).
    pub admission_gate: bool,
    /// Metrics (review counts and latency).
    pub metrics: Metrics,
}

/// Which webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// Validating.
    Validate,
    /// Mutating.
    Mutate,
    /// Mutating, of model registries.
    MutateRegistry,
}

impl Hook {
    fn label(self) -> &'static str {
        match self {
            Hook::Validate => "validate",
            Hook::Mutate => "mutate",
            Hook::MutateRegistry => "mutate_registry",
        }
    }
}

/// Answers one `AdmissionReview` of a GryviaModelRegistry (create or update): always allowed,
/// with the patch that records its stage changes and the request's user in the audit
/// annotation (`gryvia_reconcile::registry::audit`).
pub fn review_registry(body: &Value, now: jiff::Timestamp) -> Value {
    use gryvia_types::GryviaModelRegistry;
    let request = &body["request"];
    let uid = request["uid"].clone();
    let respond = |response: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    let new: GryviaModelRegistry = match serde_json::from_value(request["object"].clone()) {
        Ok(r) => r,
        Err(e) => {
            // Not ours to refuse: the API server's schema judges the object.
            return respond(json!({"uid": uid, "allowed": true,
                "warnings": [format!("gryvia: stage changes not audited, the object is not a GryviaModelRegistry: {e}")]}));
        }
    };
    let old: Option<GryviaModelRegistry> =
        serde_json::from_value(request["oldObject"].clone()).ok();
    let user = request["userInfo"]["username"].as_str();
    let ops = gryvia_reconcile::registry::audit(old.as_ref(), &new, user, now);
    let mut r = json!({"uid": uid, "allowed": true});
    if !ops.is_empty() {
        let patch = serde_json::to_vec(&ops).unwrap_or_default();
        r["patchType"] = json!("JSONPatch");
        r["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
    }
    respond(r)
}

/// Answers one `AdmissionReview` (the whole request body) with the response body.
pub fn review(state: &WebhookState, hook: Hook, body: &Value) -> Value {
    if hook == Hook::MutateRegistry {
        return review_registry(body, jiff::Timestamp::now());
    }
    let request = &body["request"];
    let uid = request["uid"].clone();
    let respond = |response: Value| json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response});
    let decision_json = |d: Decision| {
        let mut r = json!({"uid": uid, "allowed": d.allowed});
        if let Some(m) = d.message {
            r["status"] = json!({"code": 403, "reason": "Forbidden", "message": m});
        }
        if !d.warnings.is_empty() {
            r["warnings"] = json!(d.warnings);
        }
        r
    };
    let mut job: GryviaAIJob = match serde_json::from_value(request["object"].clone()) {
        Ok(j) => j,
        Err(e) => {
            return respond(decision_json(Decision::deny(format!(
                "the object is not a GryviaAIJob: {e}"
            ))));
        }
    };
    let namespace = request["namespace"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| job.namespace())
        .unwrap_or_default();
    job.metadata.namespace = Some(namespace.clone());
    match hook {
        Hook::Mutate => {
            let mut warnings = Vec::new();
            let world = match state.caches.facts(&job, &namespace) {
                Ok(w) => w,
                Err(why) if state.fail_closed => {
                    return respond(decision_json(Decision::deny(format!(
                        "admission facts unavailable and the webhook is fail-closed: {why}"
                    ))));
                }
                Err(why) => {
                    warnings.push(format!(
                        "gryvia tenant defaults and reservation tolerations skipped (fail-open): {why}"
                    ));
                    AdmissionWorld::default()
                }
            };
            let ops = mutate_job(&job, &world);
            let mut r = json!({"uid": uid, "allowed": true});
            if !warnings.is_empty() {
                r["warnings"] = json!(warnings);
            }
            if !ops.is_empty() {
                let patch = serde_json::to_vec(&ops).unwrap_or_default();
                r["patchType"] = json!("JSONPatch");
                r["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(patch));
            }
            respond(r)
        }
        Hook::Validate | Hook::MutateRegistry => {
            let decision = match state.caches.facts(&job, &namespace) {
                Ok(mut world) => {
                    world.requester = request["userInfo"]["username"].as_str().map(str::to_owned);
                    if state.admission_gate {
                        let tenant = world.tenant.as_ref().map(|t| t.name.clone());
                        world.blocked_budgets =
                            state.caches.blocked_budgets(tenant.as_deref(), &namespace);
                        world.spend = world
                            .tenant
                            .as_ref()
                            .filter(|t| t.has_spend_quota())
                            .map(|t| state.caches.month_spend(&job, &t.name));
                    }
                    validate_job(&job, &world)
                }
                Err(why) if state.fail_closed => Decision::deny(format!(
                    "admission facts unavailable and the webhook is fail-closed: {why}"
                )),
                Err(why) => {
                    let mut d = Decision::allow();
                    d.warnings.push(format!(
                        "gryvia admission checks skipped (fail-open): {why}"
                    ));
                    d
                }
            };
            respond(decision_json(decision))
        }
    }
}

async fn handle(
    state: WebhookState,
    hook: Hook,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let started = Instant::now();
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                http::StatusCode::BAD_REQUEST,
                format!("invalid AdmissionReview: {e}"),
            )
                .into_response();
        }
    };
    let out = review(&state, hook, &parsed);
    let labels = crate::metrics::WebhookLabels {
        hook: hook.label().to_owned(),
        allowed: out["response"]["allowed"].as_bool().unwrap_or(false),
    };
    state.metrics.webhook_reviews.get_or_create(&labels).inc();
    state
        .metrics
        .webhook_duration
        .get_or_create(&crate::metrics::ControllerLabels {
            controller: hook.label().to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(&out).unwrap_or_default(),
    )
        .into_response()
}

/// The webhook routes: `POST /validate-aijob`, `POST /mutate-aijob`, `POST
/// /mutate-modelregistry`, `GET /healthz`.
pub fn router(state: WebhookState) -> Router {
    let v = state.clone();
    let r = state.clone();
    let m = state;
    Router::new()
        .route(
            MUTATE_REGISTRY_PATH,
            post(move |body: axum::body::Bytes| handle(r.clone(), Hook::MutateRegistry, body)),
        )
        .route(
            VALIDATE_PATH,
            post(move |body: axum::body::Bytes| handle(v.clone(), Hook::Validate, body)),
        )
        .route(
            MUTATE_PATH,
            post(move |body: axum::body::Bytes| handle(m.clone(), Hook::Mutate, body)),
        )
        .route("/healthz", get(|| async { "ok" }))
}

/// PEM certificates and key of the webhook server, and the CA that signed them (the
/// registration's `caBundle`).
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    /// The CA certificate(s), PEM.
    pub ca_pem: String,
    /// The serving certificate chain, PEM.
    pub cert_pem: String,
    /// The serving key, PEM.
    pub key_pem: String,
}

impl TlsMaterial {
    /// A new CA and a serving certificate for `names` (DNS names or IP addresses) signed by
    /// it, valid for a year. For one replica or development; with several replicas, mount
    /// one certificate into all of them (`from_dir`).
    ///
    /// # Errors
    /// [`Error::Tls`] when a certificate cannot be made (an invalid name).
    pub fn self_signed(names: &[String]) -> Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
        let tls = |e: rcgen::Error| Error::Tls(e.to_string());
        let ca_key = KeyPair::generate().map_err(tls)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "gryvia-ai-operator webhook CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).map_err(tls)?;
        let key = KeyPair::generate().map_err(tls)?;
        let mut leaf = CertificateParams::new(names.to_vec()).map_err(tls)?;
        leaf.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let cert = leaf.signed_by(&key, &ca).map_err(tls)?;
        Ok(TlsMaterial {
            ca_pem: ca.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Reads `tls.crt`, `tls.key` and `ca.crt` from `dir` (a cert-manager Secret mounted as
    /// files).
    ///
    /// # Errors
    /// [`Error::Tls`] naming the file that cannot be read.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .map_err(|e| Error::Tls(format!("read {}: {e}", dir.join(f).display())))
        };
        Ok(TlsMaterial {
            ca_pem: read("ca.crt")?,
            cert_pem: read("tls.crt")?,
            key_pem: read("tls.key")?,
        })
    }

    /// The rustls server configuration.
    ///
    /// # Errors
    /// [`Error::Tls`] when the PEM data is unusable.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Tls(format!("serving certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| Error::Tls(format!("serving key: {e}")))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| Error::Tls(format!("serving certificate and key: {e}")))?;
        Ok(Arc::new(config))
    }
}

/// Serves `router` over TLS on `addr` until the task is dropped.
///
/// # Errors
/// [`Error::Serve`] when the address cannot be bound.
pub async fn serve_tls(
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve {
            addr: addr.to_string(),
            source,
        })?;
    info!(%addr, "admission webhooks listening (TLS)");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "accept failed");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// How the API server reaches the webhooks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url`: `https://host:port` (the paths are appended).
    Url(String),
    /// `clientConfig.service`: namespace, name and port of a Service.
    Service {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Port.
        port: i32,
    },
}

impl Endpoint {
    /// The names the serving certificate must carry.
    pub fn cert_names(&self) -> Vec<String> {
        match self {
            Endpoint::Url(url) => {
                let host = url
                    .trim_start_matches("https://")
                    .split(['/', ':'])
                    .next()
                    .unwrap_or_default();
                vec![host.to_owned()]
            }
            Endpoint::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
        }
    }

    fn client_config(&self, path: &str, ca_bundle: &str) -> Value {
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_bundle);
        match self {
            Endpoint::Url(url) => {
                json!({"url": format!("{}{path}", url.trim_end_matches('/')), "caBundle": ca})
            }
            Endpoint::Service {
                namespace,
                name,
                port,
            } => {
                json!({"service": {"namespace": namespace, "name": name, "port": port, "path": path}, "caBundle": ca})
            }
        }
    }
}

/// How the webhooks are registered.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Name of the Mutating- and ValidatingWebhookConfiguration.
    pub name: String,
    /// Where the API server sends reviews.
    pub endpoint: Endpoint,
    /// The CA bundle (PEM) that signed the serving certificate.
    pub ca_pem: String,
    /// `failurePolicy: Fail` instead of `Ignore`.
    pub fail_closed: bool,
    /// Only namespaces matching this label selector (`key=value`, comma-separated) are
    /// reviewed; all when empty.
    pub namespace_selector: Option<String>,
}

fn selector(sel: &Option<String>) -> Value {
    let Some(s) = sel else { return json!({}) };
    let labels: serde_json::Map<String, Value> = s
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), Value::String(v.trim().to_owned())))
        .collect();
    json!({"matchLabels": labels})
}

/// Creates or updates the webhook configurations (server-side apply).
///
/// # Errors
/// [`Error::Api`] when the API server refuses them.
pub async fn register(client: &kube::Client, reg: &Registration) -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let rules = json!([{
        "apiGroups": ["gryvia.io"], "apiVersions": ["v1alpha1"],
        "resources": ["gryviaaijobs"], "operations": ["CREATE"], "scope": "Namespaced"
    }]);
    let policy = if reg.fail_closed { "Fail" } else { "Ignore" };
    let hook = |name: &str, path: &str| {
        json!({
            "name": name,
            "clientConfig": reg.endpoint.client_config(path, &reg.ca_pem),
            "rules": rules,
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
            "namespaceSelector": selector(&reg.namespace_selector),
        })
    };
    let meta = json!({"name": reg.name, "labels": {labels::MANAGED_BY: labels::MANAGED_BY_VALUE}});
    // The audit of model stages: creates and updates of registries, with the old object.
    let mut registry_hook = hook("mutate.modelregistries.gryvia.io", MUTATE_REGISTRY_PATH);
    registry_hook["rules"] = json!([{
        "apiGroups": ["gryvia.io"], "apiVersions": ["v1alpha1"],
        "resources": ["gryviamodelregistries"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"
    }]);
    let mutating: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": meta, "webhooks": [hook("mutate.aijobs.gryvia.io", MUTATE_PATH), registry_hook]
    }))
    .map_err(|source| Error::Serialize {
        what: "MutatingWebhookConfiguration".to_owned(),
        source,
    })?;
    let mut validating_hook = hook("validate.aijobs.gryvia.io", VALIDATE_PATH);
    validating_hook["matchPolicy"] = json!("Equivalent");
    let validating: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": meta, "webhooks": [validating_hook]
    }))
    .map_err(|source| Error::Serialize {
        what: "ValidatingWebhookConfiguration".to_owned(),
        source,
    })?;
    let pp = PatchParams::apply("gryvia-ai-operator").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&reg.name, &pp, &Patch::Apply(&mutating))
        .await
        .map_err(api_err(format!(
            "register MutatingWebhookConfiguration {}",
            reg.name
        )))?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&reg.name, &pp, &Patch::Apply(&validating))
        .await
        .map_err(api_err(format!(
            "register ValidatingWebhookConfiguration {}",
            reg.name
        )))?;
    info!(name = %reg.name, failure_policy = policy, "admission webhooks registered");
    Ok(())
}

/// Removes the webhook configurations named `name` (absent ones are fine).
///
/// # Errors
/// [`Error::Api`] when a delete fails for another reason.
pub async fn unregister(client: &kube::Client, name: &str) -> Result<()> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let dp = kube::api::DeleteParams::default();
    let gone = |r: std::result::Result<(), kube::Error>| match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    };
    gone(
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    )
    .map_err(api_err(format!(
        "delete MutatingWebhookConfiguration {name}"
    )))?;
    gone(
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    )
    .map_err(api_err(format!(
        "delete ValidatingWebhookConfiguration {name}"
    )))?;
    Ok(())
}

/// Everything the webhooks need, for [`run`].
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Listen address.
    pub addr: SocketAddr,
    /// Registration (name, endpoint, policy, selector); its `ca_pem` is filled by [`run`].
    pub registration: Registration,
    /// Directory with `tls.crt`, `tls.key`, `ca.crt`; a self-signed CA is made when `None`.
    pub cert_dir: Option<std::path::PathBuf>,
    /// The admission gate: reject new GPU jobs in the scope of a `blocked` GryviaBudget.
    pub admission_gate: bool,
}

/// Starts the caches, makes or reads the certificates, registers the webhooks and serves them
/// until the future is dropped.
///
/// # Errors
/// Certificates that cannot be made or read, a refused registration, or an address that
/// cannot be bound.
pub async fn run(client: kube::Client, options: WebhookOptions, metrics: Metrics) -> Result<()> {
    let tls = match &options.cert_dir {
        Some(dir) => TlsMaterial::from_dir(dir)?,
        None => TlsMaterial::self_signed(&options.registration.endpoint.cert_names())?,
    };
    let server_config = tls.server_config()?;
    let caches = Caches::start(&client);
    let fail_closed = options.registration.fail_closed;
    let state = WebhookState {
        caches: caches.clone(),
        fail_closed,
        admission_gate: options.admission_gate,
        metrics,
    };
    let serve = serve_tls(options.addr, server_config, router(state));
    let mut registration = options.registration.clone();
    registration.ca_pem = tls.ca_pem.clone();
    let setup = async {
        if let Err(e) = caches.wait_ready(Duration::from_secs(60)).await {
            warn!(error = %e, "registering the webhooks before the caches are ready");
        }
        register(&client, &registration).await
    };
    tokio::pin!(serve);
    tokio::select! {
        r = &mut serve => r,
        r = setup => {
            r?;
            serve.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_endpoints_certify_their_host_and_services_their_dns_names() {
        assert_eq!(
            Endpoint::Url("https://127.0.0.1:9443".into()).cert_names(),
            vec!["127.0.0.1"]
        );
        let svc = Endpoint::Service {
            namespace: "gryvia-system".into(),
            name: "ai-webhook".into(),
            port: 443,
        };
        assert_eq!(svc.cert_names()[0], "ai-webhook.gryvia-system.svc");
        let cc = svc.client_config("/validate-aijob", "PEM");
        assert_eq!(cc["service"]["path"], "/validate-aijob");
        assert_eq!(cc["caBundle"], "UEVN");
    }

    #[test]
    fn a_self_signed_certificate_loads_into_a_server_config() {
        let tls = TlsMaterial::self_signed(&["127.0.0.1".into(), "localhost".into()]).unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        tls.server_config().unwrap();
    }

    #[test]
    fn a_namespace_selector_becomes_match_labels() {
        assert_eq!(
            selector(&Some("a=b, c=d".into())),
            json!({"matchLabels": {"a": "b", "c": "d"}})
        );
        assert_eq!(selector(&None), json!({}));
    }
}

#[cfg(test)]
mod fuzz {
    //! `AdmissionReview` bodies are untrusted input (issue #25): whatever the API server, or
    //! anything that reaches the webhook port, sends. [`CASES`] bodies per property: near-valid
    //! jobs with one field of any type, arbitrary JSON, and model-registry reviews. The claim:
    //! no panic, a well-formed review response with the request's uid, a reason on every denial,
    //! and a mutation patch that applies to the object it was made for.

    use base64::Engine as _;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;
    use proptest::prelude::*;

    use super::*;

    const CASES: u32 = 5_000;

    /// A ready store holding `objects`.
    fn ready<K>(objects: Vec<Value>) -> Store<K>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Default,
    {
        let (reader, mut writer) = store::<K>();
        writer.apply_watcher_event(&Event::Init);
        for o in objects {
            let obj: K = serde_json::from_value(o).expect("a fixture of the kind");
            writer.apply_watcher_event(&Event::InitApply(obj));
        }
        writer.apply_watcher_event(&Event::InitDone);
        reader
    }

    /// Namespaces `team-a` (tenant `acme`), `free` (no tenant) and `ghost` (a tenant not in
    /// the cache: the facts are unavailable, the fail-open or fail-closed path).
    fn state(fail_closed: bool, admission_gate: bool) -> WebhookState {
        let ns = |name: &str, tenant: Option<&str>| {
            let labels = tenant.map_or_else(|| json!({}), |t| json!({labels::TENANT: t}));
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": labels}})
        };
        let caches = Caches {
            namespaces: ready(vec![
                ns("team-a", Some("acme")),
                ns("free", None),
                ns("ghost", Some("gone")),
            ]),
            tenants: ready(vec![json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
                "metadata": {"name": "acme"},
                "spec": {"displayName": "Acme", "allowedSkus": ["h100"],
                         "governance": {"dataClassification": "confidential"},
                         "priorities": {"default": "low"}}})]),
            skus: ready(vec![json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku",
                "metadata": {"name": "h100"},
                "spec": {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "pricePerGpuHour": "4.10"}})]),
            quotas: ready(Vec::new()),
            templates: ready(Vec::new()),
            reservations: ready(Vec::new()),
            budgets: ready(Vec::new()),
            records: ready(Vec::new()),
            priorities: ready(vec![
                json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
                       "metadata": {"name": "low"}, "spec": {"value": 10}}),
                json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
                       "metadata": {"name": "high"}, "spec": {"value": 100_000}}),
            ]),
        };
        WebhookState {
            caches,
            fail_closed,
            admission_gate,
            metrics: Metrics::new(),
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            (-2i64..20).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[ -~]{0,12}".prop_map(Value::from),
            prop::sample::select(vec!["h100", "NVIDIA-H100-80GB-HBM3", "pytorch", "low"])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec!["name", "value", "key", "effect", "x"]),
                    inner,
                    0..3
                )
                .prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    /// Metadata labels or annotations: absent, null, or a map with Gryvia's keys among others.
    fn meta_map() -> impl Strategy<Value = Option<Value>> {
        prop::option::of(prop_oneof![
            Just(Value::Null),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    labels::TEMPLATE,
                    labels::RESERVATION,
                    labels::PRIORITY_CLASS,
                    labels::DATA_CLASSIFICATION,
                    "a/b~c",
                    "x",
                ]),
                prop_oneof![
                    Just("low".to_owned()),
                    Just("high".to_owned()),
                    "[ -~]{0,8}"
                ],
                0..3,
            )
            .prop_map(|m| json!(m)),
        ])
    }

    /// A job as the API server would send it (a valid one), with up to three spec fields set to
    /// values of any type (the webhook sees what the schema let through, and in a broken
    /// cluster, anything).
    fn job() -> impl Strategy<Value = Value> {
        let key = prop::sample::select(vec![
            "activeDeadlineSeconds",
            "args",
            "command",
            "env",
            "framework",
            "gpuFraction",
            "gpuType",
            "gpus",
            "image",
            "nodeSelector",
            "priority",
            "replicas",
            "templateRef",
            "tolerations",
            "type",
            "bogus",
        ]);
        (
            prop::collection::vec((key, value()), 0..3),
            meta_map(),
            meta_map(),
            prop::option::of("[a-z0-9-]{0,20}"),
        )
            .prop_map(|(fields, labels, annotations, name)| {
                let mut spec = json!({"image": "train:1", "gpus": 1, "gpuType": "h100"});
                for (k, v) in fields {
                    spec[k] = v;
                }
                let mut metadata = json!({});
                if let Some(n) = name {
                    metadata["name"] = json!(n);
                }
                if let Some(l) = labels {
                    metadata["labels"] = l;
                }
                if let Some(a) = annotations {
                    metadata["annotations"] = a;
                }
                json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                       "metadata": metadata, "spec": spec})
            })
    }

    fn review_body() -> impl Strategy<Value = Value> {
        let structured = (
            prop_oneof![
                Just(Value::Null),
                "[a-f0-9-]{0,36}".prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
            ],
            prop::option::of(
                prop::sample::select(vec!["team-a", "free", "ghost", "nowhere", ""])
                    .prop_map(str::to_owned),
            ),
            prop_oneof![8 => job(), 1 => value()],
            prop::option::of("[ -~]{0,12}"),
        )
            .prop_map(|(uid, namespace, object, user)| {
                let mut request = json!({"uid": uid, "object": object,
                                         "operation": "CREATE"});
                if let Some(n) = namespace {
                    request["namespace"] = json!(n);
                }
                if let Some(u) = user {
                    request["userInfo"] = json!({"username": u});
                }
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": request})
            });
        prop_oneof![9 => structured, 1 => value()]
    }

    /// The properties every answer keeps, and the patched object when there is a patch.
    fn check(body: &Value, out: &Value) -> std::result::Result<Option<Value>, TestCaseError> {
        prop_assert_eq!(&out["apiVersion"], "admission.k8s.io/v1");
        prop_assert_eq!(&out["kind"], "AdmissionReview");
        let response = &out["response"];
        prop_assert_eq!(&response["uid"], &body["request"]["uid"]);
        let allowed = response["allowed"].as_bool();
        prop_assert!(allowed.is_some(), "allowed is a bool: {response}");
        if allowed == Some(false) {
            let m = response["status"]["message"].as_str().unwrap_or("");
            prop_assert!(!m.is_empty(), "a denial says why: {response}");
        }
        let Some(patch) = response["patch"].as_str() else {
            return Ok(None);
        };
        prop_assert_eq!(&response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|e| TestCaseError::fail(format!("patch not base64: {e}")))?;
        let ops: json_patch::Patch = serde_json::from_slice(&bytes)
            .map_err(|e| TestCaseError::fail(format!("patch not RFC 6902: {e}")))?;
        let mut object = body["request"]["object"].clone();
        json_patch::patch(&mut object, &ops).map_err(|e| {
            TestCaseError::fail(format!("patch does not apply to {object}: {e}: {ops:?}"))
        })?;
        Ok(Some(object))
    }

    /// The fixture world does mutate a plain job, so the patch property above is exercised.
    #[test]
    fn the_fixture_world_patches_a_plain_job_of_the_tenant() {
        let body = json!({"request": {"uid": "u1", "namespace": "team-a", "object": {
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": "j"}, "spec": {"image": "train:1", "gpus": 1, "framework": "pytorch"}}}});
        let out = review(&state(false, false), Hook::Mutate, &body);
        let object = check(&body, &out).unwrap().expect("a patch");
        assert_eq!(
            object["metadata"]["labels"][labels::DATA_CLASSIFICATION],
            "confidential"
        );
        assert_eq!(
            object["metadata"]["annotations"][labels::PRIORITY_CLASS],
            "low"
        );
        assert!(
            object["spec"]["env"]
                .as_array()
                .is_some_and(|e| !e.is_empty())
        );
        let registry = json!({"request": {"uid": "u2", "userInfo": {"username": "alice"}, "object": {
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaModelRegistry",
            "metadata": {"name": "m", "namespace": "team-a"},
            "spec": {"modelName": "m",
                     "versions": [{"version": "v1", "uri": "s3://m/v1", "stage": "production"}]}}}});
        let out = review_registry(&registry, jiff::Timestamp::UNIX_EPOCH);
        assert!(
            check(&registry, &out).unwrap().is_some(),
            "a stage change is audited: {out}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

        /// The job webhooks, fail-open and fail-closed, gate on and off.
        #[test]
        fn job_reviews_are_well_formed_and_mutations_apply(
            body in review_body(),
            fail_closed in any::<bool>(),
            gate in any::<bool>(),
        ) {
            let state = state(fail_closed, gate);
            let validated = review(&state, Hook::Validate, &body);
            prop_assert!(check(&body, &validated)?.is_none(), "validation never patches");
            let mutated = review(&state, Hook::Mutate, &body);
            if let Some(object) = check(&body, &mutated)? {
                // A patched job is still a job, and the patch is complete: asking again adds nothing.
                let job: GryviaAIJob = serde_json::from_value(object.clone())
                    .map_err(|e| TestCaseError::fail(format!("patched object is no job: {e}")))?;
                let mut again = body.clone();
                again["request"]["object"] = serde_json::to_value(&job).unwrap_or_default();
                let second = review(&state, Hook::Mutate, &again);
                prop_assert!(second["response"]["patch"].is_null(), "second patch: {second}");
            }
        }

        /// The model registry's audit webhook.
        #[test]
        fn registry_reviews_are_well_formed_and_mutations_apply(
            uid in "[a-f0-9-]{0,36}",
            object in value(),
            old in prop::option::of(value()),
            stage in prop::sample::select(vec!["development", "staging", "production", "archived", "bogus"]),
            user in prop::option::of("[ -~]{0,12}"),
        ) {
            // A registry with one version whose stage is drawn, or anything at all.
            let registry = json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaModelRegistry",
                "metadata": {"name": "m", "namespace": "team-a"},
                "spec": {"modelName": "m",
                         "versions": [{"version": "v1", "uri": "s3://m/v1", "stage": stage}]}});
            let mut body = json!({"request": {"uid": uid, "object": registry,
                                               "oldObject": old.unwrap_or(Value::Null)}});
            if let Some(u) = user {
                body["request"]["userInfo"] = json!({"username": u});
            }
            let out = review_registry(&body, jiff::Timestamp::UNIX_EPOCH);
            check(&body, &out)?;
            body["request"]["object"] = object;
            let out = review_registry(&body, jiff::Timestamp::UNIX_EPOCH);
            check(&body, &out)?;
        }
    }
}
