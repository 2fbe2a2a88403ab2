//! The operators: which controllers each composes and its flags (`quota`, `gpu`, `ai`,
//! `network`), and what every Gryvia operator binary shares: the common flags (metrics
//! address, leader election, `--dry-run`, log format), logging setup, signal handling, the
//! [`ControllerSet`] an operator builds, and the run loop that serves `/metrics` `/healthz`
//! `/readyz` while the controllers run under leader election.

pub mod ai;
pub mod gpu;
pub mod network;
pub mod quota;

use std::net::SocketAddr;

use futures::future::BoxFuture;

use crate::controllers::{Running, Shared};
use crate::metrics::{Health, Metrics};
use crate::runtime::{Controllers, LeaseSettings};
use crate::{Error, Result};

type Start = Box<dyn Fn(&Shared) -> Running + Send + Sync>;

/// The controllers an operator runs: each started with what they share ([`Shared`]: the
/// client, the metrics, one set of watch caches, dry-run) every time this replica leads.
#[derive(Default)]
pub struct ControllerSet {
    starts: Vec<Start>,
}

impl std::fmt::Debug for ControllerSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerSet")
            .field("controllers", &self.starts.len())
            .finish()
    }
}

impl ControllerSet {
    /// No controllers yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a controller (a `controller` function of `crate::controllers`).
    #[must_use]
    pub fn with(mut self, start: impl Fn(&Shared) -> Running + Send + Sync + 'static) -> Self {
        self.starts.push(Box::new(start));
        self
    }

    /// Adds a controller when `on` (an opt-in flag).
    #[must_use]
    pub fn with_if(
        self,
        on: bool,
        start: impl Fn(&Shared) -> Running + Send + Sync + 'static,
    ) -> Self {
        if on { self.with(start) } else { self }
    }

    /// How many controllers the set holds.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// What the runtime starts each time this replica becomes leader: fresh caches, every
    /// controller, and the caches' watches, until the controllers end.
    pub fn into_controllers(
        self,
        client: kube::Client,
        metrics: Metrics,
        dry_run: bool,
    ) -> Controllers {
        Box::new(move || -> BoxFuture<'static, ()> {
            let shared = Shared::new(client.clone(), metrics.clone(), dry_run);
            let running: Vec<Running> = self.starts.iter().map(|start| start(&shared)).collect();
            let caches = shared.caches.run();
            Box::pin(async move {
                tokio::select! {
                    _ = futures::future::join_all(running) => {}
                    () = caches => {}
                }
            })
        })
    }
}

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
    /// Observe and decide as usual, log every Plan, act on nothing: what the operator would
    /// do on this cluster. Takes no Lease (a running operator keeps leading).
    #[arg(long)]
    pub dry_run: bool,
}

impl OperatorFlags {
    /// The Lease of operator `name`, or `None` with `--no-leader-election` or `--dry-run`.
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
        Ok(
            (!self.no_leader_election && !self.dry_run).then(|| LeaseSettings {
                name: name.to_owned(),
                namespace: self.lease_namespace.clone(),
                identity: self.identity.clone().unwrap_or_else(|| {
                    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
                    format!("{host}-{}", std::process::id())
                }),
                duration_seconds: self.lease_duration,
                grace_seconds: self.lease_grace,
            }),
        )
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
pub type Sidecar = BoxFuture<'static, Result<()>>;

/// Builds the sidecar of an operator from its client and metrics.
pub type SidecarBuilder = Box<dyn FnOnce(kube::Client, Metrics) -> Option<Sidecar>>;

/// The whole life of operator `name` on a runtime of its own: checks the flags, connects
/// ([`crate::connect`]), starts `controllers` (and the sidecar `sidecar` builds, if any) and
/// [`run`]s them.
///
/// # Errors
/// Invalid lease flags, no cluster configuration, or what [`run`] returns.
pub fn run_blocking(
    name: &str,
    flags: &OperatorFlags,
    controllers: ControllerSet,
    sidecar: Option<SidecarBuilder>,
) -> Result<()> {
    flags.lease(name)?;
    if flags.dry_run {
        tracing::info!(
            "dry run: observing and deciding as usual, logging every Plan, acting on nothing"
        );
    }
    let rt = tokio::runtime::Runtime::new().map_err(Error::Runtime)?;
    rt.block_on(async {
        let client = crate::connect().await?;
        let metrics = Metrics::new();
        let sidecar = sidecar.and_then(|build| build(client.clone(), metrics.clone()));
        let controllers =
            controllers.into_controllers(client.clone(), metrics.clone(), flags.dry_run);
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
