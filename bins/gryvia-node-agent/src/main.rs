//! `gryvia-node-agent --node NAME`: reports the node's GPUs into its GryviaGpuNode every
//! interval, probes the storage mounts GryviaStorages name, and carries out the remediation
//! steps the gpu-operator requests; /metrics, /healthz and /readyz on --metrics-addr.
//!
//! A thin binary: flags and wiring. The agent is `gryvia_client::gpu_agent`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gryvia_client::gpu_agent::{
    Agent, AgentConfig, AgentMetrics, DryRunExecutor, GpuSource, HostExecutor, NvmlSource,
    RemediationExecutor, TraceSource,
};
use gryvia_client::operators::{init_logging, shutdown_signal};

/// Reports a node's GPUs (NVML or a replayed trace) and carries out remediation steps.
#[derive(Parser, Debug)]
#[command(name = "gryvia-node-agent", version, about)]
struct Flags {
    /// The Kubernetes node this agent runs on.
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// Where observations come from: `nvml`, or `file:PATH` to replay a trace (format in the
    /// gryvia_client::gpu_agent docs and docs/gpu-health.md).
    #[arg(long, default_value = "nvml")]
    source: String,
    /// Seconds between two reports.
    #[arg(long, default_value_t = 30)]
    interval: u64,
    /// Report once and exit.
    #[arg(long)]
    once: bool,
    /// How remediation steps run: `host` (nvidia-smi, modprobe, kured sentinel or nsenter;
    /// needs a privileged pod) or `dry-run` (record the commands only).
    #[arg(long, default_value = "host", value_parser = ["host", "dry-run"])]
    executor: String,
    /// File a dry run appends its commands to.
    #[arg(long)]
    dry_run_log: Option<PathBuf>,
    /// Seconds a dry-run step takes.
    #[arg(long, default_value_t = 1)]
    dry_run_seconds: u64,
    /// kured's reboot sentinel, for reboots with `rebootMethod: kured`.
    #[arg(long, default_value = gryvia_client::gpu_agent::KURED_SENTINEL)]
    kured_sentinel: PathBuf,
    /// The mount table storage probes read: `/proc/1/mountinfo` (the host's, in a pod with
    /// the host's PID namespace) or this process's own.
    #[arg(long, default_value = gryvia_client::gpu_agent::MOUNTINFO)]
    mountinfo: PathBuf,
    /// Where the host's filesystem is mounted in the agent's container (`/` on the host): a
    /// GryviaStorage's `mountPath` is probed under it.
    #[arg(long, default_value = "/")]
    host_root: PathBuf,
    /// Serve /metrics, /healthz and /readyz here (ready after the first report).
    #[arg(long, default_value = "0.0.0.0:9103")]
    metrics_addr: std::net::SocketAddr,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.log_format);
    gryvia_client::operators::exit_code(run(flags))
}

fn run(flags: Flags) -> anyhow::Result<()> {
    if flags.interval == 0 || flags.interval > 3600 {
        anyhow::bail!("--interval must be 1-3600 seconds, got {}", flags.interval);
    }
    let source: Box<dyn GpuSource> = match flags.source.strip_prefix("file:") {
        Some(path) => Box::new(TraceSource::open(std::path::Path::new(path), &flags.node)?),
        None if flags.source == "nvml" => Box::new(NvmlSource::open()?),
        None => anyhow::bail!(
            "--source must be `nvml` or `file:PATH`, got {:?}",
            flags.source
        ),
    };
    let executor: Arc<dyn RemediationExecutor> = if flags.executor == "dry-run" {
        Arc::new(DryRunExecutor {
            log: flags.dry_run_log.clone(),
            duration: Duration::from_secs(flags.dry_run_seconds),
        })
    } else {
        Arc::new(HostExecutor {
            kured_sentinel: flags.kured_sentinel.clone(),
        })
    };
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    rt.block_on(async {
        let client = gryvia_client::connect().await?;
        let config = AgentConfig {
            once: flags.once,
            mountinfo: flags.mountinfo.clone(),
            host_root: flags.host_root.clone(),
            ..AgentConfig::new(&flags.node, Duration::from_secs(flags.interval))
        };
        let metrics = gryvia_client::metrics::Metrics::new();
        let health = gryvia_client::metrics::Health::default();
        let agent_metrics = AgentMetrics::register(&metrics, health.clone());
        if !flags.once {
            let addr = flags.metrics_addr;
            tokio::spawn(async move {
                if let Err(e) = gryvia_client::metrics::serve(addr, metrics, health).await {
                    tracing::error!(error = %e, "metrics server stopped");
                }
            });
        }
        Agent::new(client, config, source, executor)
            .with_metrics(agent_metrics)
            .run(shutdown_signal())
            .await
            .with_context(|| format!("node agent for {}", flags.node))
    })
}
