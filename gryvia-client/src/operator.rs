//! What every Gryvia operator binary shares: the common flags (metrics address, leader
//! election, log format), logging setup, signal handling, and the run loop that serves
//! `/metrics` `/healthz` `/readyz` while the controllers run under leader election.

use std::net::SocketAddr;

use crate::metrics::{Health, Metrics};
use crate::runtime::{Controllers, LeaseSettings};
use crate::{Error, Result};

/// Flags every operator takes (flatten into the binary's own `clap::Parser`).
#[derive(clap::Args, Debug, Clone)]
pub struct OperatorFlags {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Run without leader election (only safe with a single replica).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Seconds a lease lasts without renewal (a standby takes over after it).
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds before expiry at which the leader renews.
    #[arg(long, default_value_t = 5)]
    pub lease_grace: u64,
    /// Identity of this replica in the Lease (default: hostname and process id).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

impl OperatorFlags {
    /// The Lease of operator `name`, or `None` with `--no-leader-election`.
    ///
    /// # Errors
    /// [`Error::LeaderElection`] when `--lease-grace` is not below `--lease-duration`.
    pub fn lease(&self, name: &str) -> Result<Option<LeaseSettings>> {
        if self.lease_grace >= self.lease_duration {
            return Err(Error::LeaderElection(format!(
                "--lease-grace ({}) must be less than --lease-duration ({})",
                self.lease_grace, self.lease_duration
            )));
        }
        Ok((!self.no_leader_election).then(|| LeaseSettings {
            name: name.to_owned(),
            namespace: self.lease_namespace.clone(),
            identity: self.identity.clone().unwrap_or_else(|| {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
                format!("{host}-{}", std::process::id())
            }),
            duration_seconds: self.lease_duration,
            grace_seconds: self.lease_grace,
        }))
    }
}

/// Logs to standard error with `tracing` (`RUST_LOG` filters; default `info,kube=warn`), as
/// text or JSON.
pub fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The exit code of a binary's `main`: success, or the error on one line (its whole chain
/// with `{:#}`, whatever `RUST_BACKTRACE` says) and failure.
pub fn exit_code<E: std::fmt::Display>(
    result: std::result::Result<(), E>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// Work an operator runs on every replica, leader or not (an admission webhook server).
pub type Sidecar = futures::future::BoxFuture<'static, Result<()>>;

/// The whole life of operator `name` on a runtime of its own: checks the flags, connects
/// ([`crate::connect`]), builds the controllers with `build` and [`run`]s them.
///
/// # Errors
/// Invalid lease flags, no cluster configuration, or what [`run`] returns.
pub fn run_blocking(
    name: &str,
    flags: &OperatorFlags,
    build: impl FnOnce(kube::Client, Metrics) -> Controllers,
) -> Result<()> {
    run_blocking_with(name, flags, |client, metrics| {
        (build(client, metrics), None)
    })
}

/// Like [`run_blocking`], with a [`Sidecar`] that runs on every replica beside the
/// leader-elected controllers; the operator stops when it fails.
///
/// # Errors
/// Invalid lease flags, no cluster configuration, or what [`run`] returns.
pub fn run_blocking_with(
    name: &str,
    flags: &OperatorFlags,
    build: impl FnOnce(kube::Client, Metrics) -> (Controllers, Option<Sidecar>),
) -> Result<()> {
    flags.lease(name)?;
    let rt = tokio::runtime::Runtime::new().map_err(Error::Runtime)?;
    rt.block_on(async {
        let client = crate::connect().await?;
        let metrics = Metrics::new();
        let (controllers, sidecar) = build(client.clone(), metrics.clone());
        run(name, flags, client, metrics, controllers, sidecar).await
    })
}

/// Runs operator `name`: serves metrics and probes, runs `controllers` while leading and the
/// `sidecar` all the time, and returns on SIGTERM/SIGINT.
///
/// # Errors
/// When the metrics server cannot listen, leader election fails or the sidecar fails.
pub async fn run(
    name: &str,
    flags: &OperatorFlags,
    client: kube::Client,
    metrics: Metrics,
    controllers: Controllers,
    sidecar: Option<Sidecar>,
) -> Result<()> {
    let health = Health::default();
    let lease = flags.lease(name)?;
    let server = crate::metrics::serve(flags.metrics_addr, metrics.clone(), health.clone());
    let operator =
        crate::runtime::run_leader_elected(client, lease, name, metrics, health, controllers);
    let sidecar = async move {
        match sidecar {
            Some(s) => s.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = server => r?,
        r = operator => r?,
        r = sidecar => r?,
        () = shutdown_signal() => tracing::info!("SIGTERM or SIGINT received; shutting down"),
    }
    Ok(())
}
