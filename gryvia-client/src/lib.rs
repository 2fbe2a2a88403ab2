//! Everything of Gryvia that talks to Kubernetes.
//!
//! Client construction (kubeconfig discovery as kubectl does it: in-cluster, `KUBECONFIG`,
//! `~/.kube/config`), installation of the Gryvia CRDs with a wait for `Established`, the
//! runtime that drives every controller (`runtime`, `apply`, `cache`), one module per
//! controller (`controllers`), the operators' compositions and flags (`operators`), and what
//! the CLI, the gateway and the Python SDK call (`ops`). Policy does not live here: it is in
//! the pure `gryvia-reconcile` crate; this crate observes the world and applies Plans. The
//! map and the walkthrough "add a controller" are in `docs/architecture.md`.

pub mod admission;
pub mod apply;
pub mod cache;
pub mod controllers;
pub mod crds;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod gpu_agent;
pub mod list_stream;
pub mod mail;
pub mod metrics;
pub mod operators;
pub mod ops;
pub mod promql;
pub mod resources;
pub mod runtime;
pub mod storage_probe;
pub mod webhook;

use std::time::Duration;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or in-cluster configuration: one line naming the file and the
    /// cause, each once.
    #[error("{0}")]
    Config(String),
    /// A request to the API server failed.
    #[error("{operation}: {source}")]
    Api {
        /// What was being done.
        operation: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Waiting for a condition took longer than allowed.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long was waited.
        after: Duration,
    },
    /// The finalizer helper failed (adding or removing the finalizer, or the reconcile in it).
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// Leader election failed.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// The metrics / health server could not serve.
    #[error("serve on {addr}: {source}")]
    Serve {
        /// Listen address.
        addr: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A webhook delivery failed.
    #[error("deliver webhook to {url}: {reason}")]
    Webhook {
        /// Receiver URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// An e-mail could not be sent.
    #[error("send e-mail to {to}: {reason}")]
    Mail {
        /// Recipients.
        to: String,
        /// What went wrong.
        reason: String,
    },
    /// The async runtime could not start.
    #[error("start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The GPUs could not be read (NVML missing or failing).
    #[error("read GPUs: {0}")]
    Gpu(String),
    /// A trace file is unreadable or invalid.
    #[error("trace {path}: {reason}")]
    Trace {
        /// The file.
        path: String,
        /// What is wrong, naming the frame and field.
        reason: String,
    },
    /// Input the user gave is unusable (names what and why).
    #[error("{0}")]
    Invalid(String),
    /// TLS material of a server could not be made or loaded.
    #[error("tls: {0}")]
    Tls(String),
    /// An object could not be (de)serialized.
    #[error("serialize {what}: {source}")]
    Serialize {
        /// What was being serialized.
        what: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// A static label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Api { .. } => "api",
            Error::Timeout { .. } => "timeout",
            Error::Serialize { .. } => "serialize",
            Error::Finalizer(_) => "finalizer",
            Error::LeaderElection(_) => "leader_election",
            Error::Serve { .. } => "serve",
            Error::Webhook { .. } => "webhook",
            Error::Mail { .. } => "mail",
            Error::Gpu(_) => "gpu",
            Error::Runtime(_) => "runtime",
            Error::Trace { .. } => "trace",
            Error::Tls(_) => "tls",
            Error::Invalid(_) => "invalid",
        }
    }

    /// The HTTP status of a request the API server refused (404 not found, 409 conflict ...).
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Error::Api {
                source: kube::Error::Api(s),
                ..
            } => Some(s.code),
            _ => None,
        }
    }

    /// How long to wait before retrying the operation that failed.
    pub fn requeue_after(&self) -> Duration {
        match self {
            Error::Config(_) => Duration::from_secs(60),
            // A conflict is someone else's newer write: read again and retry soon.
            Error::Api { .. } if self.status_code() == Some(409) => Duration::from_secs(1),
            Error::Api { .. } | Error::Timeout { .. } => Duration::from_secs(5),
            Error::Serialize { .. } => Duration::from_secs(300),
            Error::Finalizer(_) | Error::Webhook { .. } | Error::Mail { .. } => {
                Duration::from_secs(10)
            }
            Error::LeaderElection(_) | Error::Serve { .. } | Error::Runtime(_) => {
                Duration::from_secs(30)
            }
            Error::Gpu(_) | Error::Trace { .. } => Duration::from_secs(10),
            Error::Tls(_) | Error::Invalid(_) => Duration::from_secs(30),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Maps a kube error to [`Error::Api`] naming `operation`.
pub(crate) fn api_err(operation: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let operation = operation.into();
    move |source| Error::Api { operation, source }
}

/// Builds the right [`kube::Api`] for a resource whatever its scope, so generic code can
/// address a namespaced object in its namespace and a cluster-scoped one globally.
pub trait ScopeApi {
    /// The Api for objects of `K` in `namespace` (ignored for cluster-scoped kinds).
    fn api<K>(client: kube::Client, namespace: Option<&str>) -> kube::Api<K>
    where
        K: kube::Resource<Scope = Self, DynamicType = ()>;
}

impl ScopeApi for k8s_openapi::NamespaceResourceScope {
    fn api<K>(client: kube::Client, namespace: Option<&str>) -> kube::Api<K>
    where
        K: kube::Resource<Scope = Self, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => kube::Api::namespaced(client, ns),
            None => kube::Api::all(client),
        }
    }
}

impl ScopeApi for k8s_openapi::ClusterResourceScope {
    fn api<K>(client: kube::Client, _namespace: Option<&str>) -> kube::Api<K>
    where
        K: kube::Resource<Scope = Self, DynamicType = ()>,
    {
        kube::Api::all(client)
    }
}

/// The Api addressing `obj` (its namespace when namespaced).
pub fn api_for<K>(client: kube::Client, obj: &K) -> kube::Api<K>
where
    K: kube::Resource<DynamicType = ()>,
    K::Scope: ScopeApi,
{
    <K::Scope as ScopeApi>::api::<K>(client, obj.meta().namespace.as_deref())
}

/// Connects to the cluster the way kubectl does (in-cluster, `KUBECONFIG`, `~/.kube/config`).
///
/// kube's built-in retry of 429 responses is turned off: the Eviction API answers 429 when a
/// PodDisruptionBudget refuses an eviction, and retrying that inside one request stalled a
/// drain for minutes (found by `e2e_maintenance`). Failed writes are retried where it belongs:
/// the controller runtime's per-object backoff, and the drain loop's next round. Reads (GET,
/// list and watch included) are retried in the request when the server answers 429, 503 or
/// 504, as after a CRD change ("storage is (re)initializing"): up to 6 times, honouring
/// `Retry-After`, within about 10 seconds. Every request sent is counted in
/// [`metrics::api_requests`] (`gryvia_api_requests_total` on `/metrics`).
///
/// # Errors
/// [`Error::Config`] when no configuration is found or it is unusable.
pub async fn connect() -> Result<kube::Client> {
    connect_with(None, None).await
}

/// Connects with an explicit kubeconfig file and/or context; `None` for both is [`connect`].
///
/// # Errors
/// [`Error::Config`] when the file is unreadable, the context does not exist or the
/// configuration is unusable.
pub async fn connect_with(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let mut config = load_config(kubeconfig, &options).await?;
    config.default_retry = false;
    if let Some(agent) = user_agent() {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let policy = kube::client::retry::RetryPolicy::new(
        Duration::from_millis(100),
        Duration::from_secs(2),
        6,
        true,
    )
    .map_err(|e| Error::Invalid(format!("read retry policy: {e}")))?;
    Ok(kube::client::ClientBuilder::try_from(config)
        .map_err(|e| Error::Config(format!("Kubernetes client configuration: {e}")))?
        // Innermost: every request sent, retries included, is counted by verb and resource.
        .with_layer(&tower::util::MapRequestLayer::new(|req: ApiRequest| {
            metrics::count_request(&req);
            req
        }))
        // Retry needs a cloneable service; the buffer makes the boxed stack one.
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(ReadRetry(policy)))
        .build())
}

/// The `User-Agent` of every request: the program's name and this crate's version
/// (`gryvia-ai-operator/0.1.0`), so the API server's audit log and metrics attribute each
/// request to the component that made it (the RBAC check of `scripts/check-rbac-usage` reads
/// the audit log by it). `None` when the program's name is unknown or not a header value.
fn user_agent() -> Option<http::HeaderValue> {
    let exe = std::env::current_exe().ok()?;
    let name = exe.file_stem()?.to_str()?;
    http::HeaderValue::from_str(&format!("{name}/{}", env!("CARGO_PKG_VERSION"))).ok()
}

/// The client configuration, found the way kubectl finds it: the `kubeconfig` argument, else
/// the files of `KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account. Each
/// failure is one line that names the file and its cause once (kube's own inference error
/// repeats every cause of every source it tried).
async fn load_config(
    kubeconfig: Option<&std::path::Path>,
    options: &kube::config::KubeConfigOptions,
) -> Result<kube::Config> {
    const HINT: &str = "set KUBECONFIG or run in a cluster";
    let from_env: Vec<std::path::PathBuf> = std::env::var_os("KUBECONFIG")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let paths = match kubeconfig {
        Some(path) => vec![path.to_path_buf()],
        None if !from_env.is_empty() => from_env,
        None => {
            let home = std::env::var_os("HOME")
                .map(|h| std::path::Path::new(&h).join(".kube").join("config"));
            match home {
                Some(path) if path.exists() => vec![path],
                _ if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                    return kube::Config::incluster().map_err(|e| {
                        Error::Config(format!("in-cluster Kubernetes configuration: {e}"))
                    });
                }
                home => {
                    let tried = home.map_or_else(
                        || "$HOME is not set".to_owned(),
                        |p| format!("{}: no such file", p.display()),
                    );
                    return Err(Error::Config(format!(
                        "no Kubernetes configuration: {tried}; {HINT}"
                    )));
                }
            }
        }
    };
    let mut merged: Option<kube::config::Kubeconfig> = None;
    for path in &paths {
        let file = read_kubeconfig(path, HINT)?;
        merged = Some(match merged {
            None => file,
            Some(m) => m
                .merge(file)
                .map_err(|e| Error::Config(format!("merge kubeconfig {}: {e}", path.display())))?,
        });
    }
    let Some(file) = merged else {
        return Err(Error::Config(format!(
            "no Kubernetes configuration; {HINT}"
        )));
    };
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    kube::Config::from_custom_kubeconfig(file, options)
        .await
        .map_err(|e| {
            Error::Config(format!(
                "kubeconfig {}: {}",
                shown.join(":"),
                first_line(&e)
            ))
        })
}

/// One kubeconfig file, parsed; a missing, unreadable or malformed file is one line.
fn read_kubeconfig(path: &std::path::Path, hint: &str) -> Result<kube::config::Kubeconfig> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(match e.kind() {
            std::io::ErrorKind::NotFound => format!(
                "no Kubernetes configuration: {}: no such file; {hint}",
                path.display()
            ),
            std::io::ErrorKind::PermissionDenied => {
                format!("read kubeconfig {}: permission denied", path.display())
            }
            _ => format!("read kubeconfig {}: {e}", path.display()),
        })
    })?;
    kube::config::Kubeconfig::from_yaml(&text).map_err(|e| {
        let reason = match &e {
            kube::config::KubeconfigError::Parse(inner) => first_line(inner),
            other => first_line(other),
        };
        Error::Config(format!("malformed kubeconfig {}: {reason}", path.display()))
    })
}

/// The first line of an error's message, without a leading `error: `.
fn first_line(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default().trim();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// kube's retry policy, for reads only: a write's 429 can be an answer (an eviction a
/// PodDisruptionBudget refuses), never retried blindly.
#[derive(Clone)]
struct ReadRetry(kube::client::retry::RetryPolicy);

type ApiRequest = http::Request<kube::client::Body>;

impl<Res> tower::retry::Policy<ApiRequest, http::Response<Res>, tower::BoxError> for ReadRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut ApiRequest,
        result: &mut std::result::Result<http::Response<Res>, tower::BoxError>,
    ) -> Option<Self::Future> {
        if req.method() != http::Method::GET {
            return None;
        }
        tower::retry::Policy::<ApiRequest, http::Response<Res>, tower::BoxError>::retry(
            &mut self.0,
            req,
            result,
        )
    }

    fn clone_request(&mut self, req: &ApiRequest) -> Option<ApiRequest> {
        if req.method() != http::Method::GET {
            return None;
        }
        tower::retry::Policy::<ApiRequest, http::Response<Res>, tower::BoxError>::clone_request(
            &mut self.0,
            req,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::retry::Policy;

    type Res = http::Response<()>;

    fn policy() -> ReadRetry {
        ReadRetry(
            kube::client::retry::RetryPolicy::new(
                Duration::from_millis(1),
                Duration::from_millis(2),
                2,
                false,
            )
            .unwrap(),
        )
    }

    fn request(method: http::Method) -> ApiRequest {
        http::Request::builder()
            .method(method)
            .uri("/apis/gryvia.io/v1alpha1/gryviabudgets")
            .body(kube::client::Body::empty())
            .unwrap()
    }

    fn answer(status: u16) -> std::result::Result<Res, tower::BoxError> {
        Ok(http::Response::builder().status(status).body(()).unwrap())
    }

    #[tokio::test]
    async fn reads_are_retried_on_429_and_writes_never() {
        let mut p = policy();
        let mut get = request(http::Method::GET);
        assert!(Policy::<ApiRequest, Res, tower::BoxError>::clone_request(&mut p, &get).is_some());
        assert!(p.retry(&mut get, &mut answer(429)).is_some());
        assert!(p.retry(&mut get, &mut answer(404)).is_none());
        let mut post = request(http::Method::POST);
        assert!(Policy::<ApiRequest, Res, tower::BoxError>::clone_request(&mut p, &post).is_none());
        assert!(p.retry(&mut post, &mut answer(429)).is_none());
        // Bounded: the third 429 of a read is returned to the caller.
        let mut q = policy();
        assert!(q.retry(&mut get, &mut answer(503)).is_some());
        assert!(q.retry(&mut get, &mut answer(503)).is_some());
        assert!(q.retry(&mut get, &mut answer(503)).is_none());
    }
}
