//! `gryvia-quota-operator`: reconciles GryviaTenant and GryviaQuota.
//!
//! A thin binary: flags, logging, wiring. The controllers are in `gryvia_client::tenancy`,
//! the policy in `gryvia_reconcile::tenancy`.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use gryvia_client::metrics::{Health, Metrics};
use gryvia_client::runtime::LeaseSettings;
use gryvia_reconcile::tenancy::TenantOptions;

/// Reconciles GryviaTenants (namespace, quota, limit range, network policy, RoleBindings) and
/// GryviaQuotas.
#[derive(Parser, Debug)]
#[command(name = "gryvia-quota-operator", version, about)]
struct Flags {
    /// Create RoleBindings for tenant members (opt-in; chart value quotaOperator.tenantRbac).
    #[arg(long, env = "GRYVIA_TENANT_RBAC")]
    tenant_rbac: bool,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Run without leader election (only safe with a single replica).
    #[arg(long)]
    no_leader_election: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Seconds a lease lasts without renewal (a standby takes over after it).
    #[arg(long, default_value_t = 15)]
    lease_duration: u64,
    /// Seconds before expiry at which the leader renews.
    #[arg(long, default_value_t = 5)]
    lease_grace: u64,
    /// Identity of this replica in the Lease (default: hostname and process id).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    init_logging(&flags.log_format);
    if flags.lease_grace >= flags.lease_duration {
        anyhow::bail!(
            "--lease-grace ({}) must be less than --lease-duration ({})",
            flags.lease_grace,
            flags.lease_duration
        );
    }
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    rt.block_on(run(flags))
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or SIGINT.
async fn shutdown_signal() {
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

fn init_logging(format: &str) {
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

async fn run(flags: Flags) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let metrics = Metrics::new();
    let health = Health::default();
    let options = TenantOptions {
        tenant_rbac: flags.tenant_rbac,
    };
    let lease = (!flags.no_leader_election).then(|| LeaseSettings {
        name: "gryvia-quota-operator".to_owned(),
        namespace: flags.lease_namespace.clone(),
        identity: flags.identity.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".to_owned());
            format!("{host}-{}", std::process::id())
        }),
        duration_seconds: flags.lease_duration,
        grace_seconds: flags.lease_grace,
    });
    let server = gryvia_client::metrics::serve(flags.metrics_addr, metrics.clone(), health.clone());
    let controllers = gryvia_client::tenancy::controllers(client.clone(), options, metrics.clone());
    let operator = gryvia_client::runtime::run_leader_elected(
        client,
        lease,
        "gryvia-quota-operator",
        metrics,
        health,
        controllers,
    );
    tokio::select! {
        r = server => r.context("metrics server")?,
        r = operator => r.context("operator")?,
        () = shutdown_signal() => tracing::info!("SIGTERM or SIGINT received; shutting down"),
    }
    Ok(())
}
