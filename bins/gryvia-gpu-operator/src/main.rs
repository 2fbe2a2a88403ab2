//! `gryvia-gpu-operator`: evaluates GryviaHealthChecks against the GPU observations the node
//! agents write, and (opt-in) quarantines, drains and remediates failing nodes.
//!
//! A thin binary: flags, logging, wiring. The controller is in `gryvia_client::health`, the
//! policy in `gryvia_reconcile::health`.

use anyhow::Context;
use clap::Parser;
use gryvia_client::operator::{OperatorFlags, init_logging};
use gryvia_reconcile::health::HealthOptions;

/// Evaluates GPU health checks; with --gpu-remediation also cordons, taints, drains and
/// remediates failing nodes.
#[derive(Parser, Debug)]
#[command(name = "gryvia-gpu-operator", version, about)]
struct Flags {
    /// Evaluate GryviaHealthChecks (opt-in; chart value platformCompletion.gpuHealth).
    #[arg(long, env = "GRYVIA_GPU_HEALTH")]
    gpu_health: bool,
    /// Act on failures: quarantine, drain and the remediation ladder (opt-in; chart value
    /// platformCompletion.gpuRemediation). Needs --gpu-health.
    #[arg(long, env = "GRYVIA_GPU_REMEDIATION")]
    gpu_remediation: bool,
    #[command(flatten)]
    operator: OperatorFlags,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.operator.log_format);
    gryvia_client::operator::exit_code(run(flags))
}

fn run(flags: Flags) -> anyhow::Result<()> {
    if !flags.gpu_health {
        anyhow::bail!(
            "nothing to run: GPU health evaluation is opt-in, start with --gpu-health (and --gpu-remediation to act on failures)"
        );
    }
    let options = HealthOptions {
        remediation: flags.gpu_remediation,
    };
    tracing::info!(
        remediation = options.remediation,
        "GPU health evaluation enabled"
    );
    gryvia_client::operator::run_blocking(
        "gryvia-gpu-operator",
        &flags.operator,
        |client, metrics| gryvia_client::health::controllers(client, options, metrics),
    )
    .context("operator")
}
