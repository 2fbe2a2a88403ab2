//! The gpu-operator: GPU health checks; quarantine, drain and remediation opt-in.

use gryvia_reconcile::health::HealthOptions;

use super::{ControllerSet, OperatorFlags};
use crate::controllers::health_check;
use crate::{Error, Result};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-gpu-operator";

/// Evaluates GPU health checks; with --gpu-remediation also cordons, taints, drains and
/// remediates failing nodes.
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-gpu-operator", version, about)]
pub struct Flags {
    /// Evaluate GryviaHealthChecks (opt-in; chart value platformCompletion.gpuHealth).
    #[arg(long, env = "GRYVIA_GPU_HEALTH")]
    pub gpu_health: bool,
    /// Act on failures: quarantine, drain and the remediation ladder (opt-in; chart value
    /// platformCompletion.gpuRemediation). Needs --gpu-health.
    #[arg(long, env = "GRYVIA_GPU_REMEDIATION")]
    pub gpu_remediation: bool,
    /// Flags every operator takes.
    #[command(flatten)]
    pub operator: OperatorFlags,
}

/// The controllers the gpu-operator runs with `flags`.
pub fn controllers(flags: &Flags) -> ControllerSet {
    let options = HealthOptions {
        remediation: flags.gpu_remediation,
    };
    ControllerSet::new().with_if(flags.gpu_health, move |s| {
        health_check::controller(s, options)
    })
}

/// Runs the gpu-operator until SIGTERM.
///
/// # Errors
/// [`Error::Invalid`] without `--gpu-health` (the feature is opt-in), or what
/// [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    if !flags.gpu_health {
        return Err(Error::Invalid(
            "nothing to run: GPU health evaluation is opt-in, start with --gpu-health (and --gpu-remediation to act on failures)".to_owned(),
        ));
    }
    tracing::info!(
        remediation = flags.gpu_remediation,
        "GPU health evaluation enabled"
    );
    super::run_blocking(NAME, &flags.operator, controllers(flags), None)
}
