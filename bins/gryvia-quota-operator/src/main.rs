//! `gryvia-quota-operator`: reconciles GryviaTenant and GryviaQuota, and (opt-in) meters GPU
//! jobs into priced GryviaUsageRecords.
//!
//! A thin binary: flags, logging, wiring. The controllers are in `gryvia_client::tenancy`,
//! the policy in `gryvia_reconcile::tenancy`.

use anyhow::Context;
use clap::Parser;
use gryvia_client::operator::{OperatorFlags, init_logging};
use gryvia_reconcile::tenancy::TenantOptions;

/// Reconciles GryviaTenants (namespace, quota, limit range, network policy, RoleBindings) and
/// GryviaQuotas.
#[derive(Parser, Debug)]
#[command(name = "gryvia-quota-operator", version, about)]
struct Flags {
    /// Create RoleBindings for tenant members (opt-in; chart value quotaOperator.tenantRbac).
    #[arg(long, env = "GRYVIA_TENANT_RBAC")]
    tenant_rbac: bool,
    /// Meter GPU jobs: a GryviaUsageRecord for every GPU job, priced from the GryviaGpuSku
    /// catalogue (opt-in: it puts a finalizer on every GryviaAIJob, which closes the job's
    /// record when the job is deleted).
    #[arg(long, env = "GRYVIA_METERING")]
    metering: bool,
    #[command(flatten)]
    operator: OperatorFlags,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.operator.log_format);
    gryvia_client::operator::exit_code(run(flags))
}

fn run(flags: Flags) -> anyhow::Result<()> {
    let options = TenantOptions {
        tenant_rbac: flags.tenant_rbac,
    };
    gryvia_client::operator::run_blocking(
        "gryvia-quota-operator",
        &flags.operator,
        |client, metrics| {
            let mut sets = vec![
                gryvia_client::tenancy::controllers(client.clone(), options, metrics.clone()),
                gryvia_client::budget::controllers(client.clone(), metrics.clone()),
            ];
            if flags.metering {
                sets.push(gryvia_client::metering::controllers(client, metrics));
            }
            gryvia_client::runtime::join(sets)
        },
    )
    .context("operator")
}
