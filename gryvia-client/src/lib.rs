//! Everything of Gryvia that talks to Kubernetes.
//!
//! Client construction (kubeconfig discovery as kubectl does it: in-cluster, `KUBECONFIG`,
//! `~/.kube/config`), installation of the Gryvia CRDs with a wait for `Established`, and the
//! machinery later controllers build on. Policy does not live here: it is in the pure
//! `gryvia-reconcile` crate; this crate observes the world and applies Plans.

pub mod crds;

use std::time::Duration;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or in-cluster configuration.
    #[error("load kubernetes configuration: {0}")]
    Config(#[source] kube::Error),
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
        }
    }

    /// How long to wait before retrying the operation that failed.
    pub fn requeue_after(&self) -> Duration {
        match self {
            Error::Config(_) => Duration::from_secs(60),
            Error::Api { .. } | Error::Timeout { .. } => Duration::from_secs(5),
            Error::Serialize { .. } => Duration::from_secs(300),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Connects to the cluster the way kubectl does (in-cluster, `KUBECONFIG`, `~/.kube/config`).
///
/// # Errors
/// [`Error::Config`] when no configuration is found or it is unusable.
pub async fn connect() -> Result<kube::Client> {
    kube::Client::try_default().await.map_err(Error::Config)
}
