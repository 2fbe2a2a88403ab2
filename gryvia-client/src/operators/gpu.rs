//! The gpu-operator: GPU health checks; quarantine, drain and remediation opt-in; network
//! health from the collectors' fabric signals and storage health from the node agents' probes
//! always.

use gryvia_reconcile::health::HealthOptions;

use super::{ControllerSet, OperatorFlags};
use crate::controllers::{health_check, network_health, storage_health};
use crate::{Error, Result};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-gpu-operator";

/// Writes the health of storage (from the node agents' probes) and networks (from the
/// collectors' fabric signals); with --gpu-health evaluates GPU health checks, and with
/// --gpu-remediation also cordons, taints, drains and remediates failing nodes.
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-gpu-operator", version)]
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
    ControllerSet::new()
        .with_if(flags.gpu_health, move |s| {
            health_check::controller(s, options)
        })
        .with(network_health::controller)
        .with(storage_health::controller)
}

/// Runs the gpu-operator until SIGTERM: network and storage health always, GPU health with
/// `--gpu-health`.
///
/// # Errors
/// [`Error::Invalid`] for `--gpu-remediation` without `--gpu-health` (remediation acts on the
/// checks' verdicts), or what [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    if flags.gpu_remediation && !flags.gpu_health {
        return Err(Error::Invalid(
            "--gpu-remediation needs --gpu-health: remediation acts on the health checks' verdicts"
                .to_owned(),
        ));
    }
    tracing::info!(
        gpu_health = flags.gpu_health,
        remediation = flags.gpu_remediation,
        "network and storage health on; GPU health evaluation {}",
        if flags.gpu_health {
            "on"
        } else {
            "off (opt-in: --gpu-health)"
        }
    );
    super::run_blocking(NAME, &flags.operator, controllers(flags), None)
}
