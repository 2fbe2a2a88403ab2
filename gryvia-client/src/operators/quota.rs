//! The quota-operator: tenants, GryviaQuotas and budgets; metering (usage records) opt-in.

use gryvia_reconcile::tenancy::TenantOptions;

use super::{ControllerSet, OperatorFlags};
use crate::Result;
use crate::controllers::{budget, metering, quota, tenant, usage_record};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-quota-operator";

/// Reconciles GryviaTenants (namespace, quota, limit range, network policy, RoleBindings),
/// GryviaQuotas and GryviaBudgets; meters GPU jobs into priced usage records (opt-in).
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-quota-operator", version, about)]
pub struct Flags {
    /// Create RoleBindings for tenant members (opt-in; chart value quotaOperator.tenantRbac).
    #[arg(long, env = "GRYVIA_TENANT_RBAC")]
    pub tenant_rbac: bool,
    /// Meter GPU jobs: a GryviaUsageRecord for every GPU job, priced from the GryviaGpuSku
    /// catalogue (opt-in: it puts a finalizer on every GryviaAIJob, which closes the job's
    /// record when the job is deleted).
    #[arg(long, env = "GRYVIA_METERING")]
    pub metering: bool,
    /// Flags every operator takes.
    #[command(flatten)]
    pub operator: OperatorFlags,
}

/// The controllers the quota-operator runs with `flags`.
pub fn controllers(flags: &Flags) -> ControllerSet {
    let options = TenantOptions {
        tenant_rbac: flags.tenant_rbac,
    };
    ControllerSet::new()
        .with(move |s| tenant::controller(s, options))
        .with(quota::controller)
        .with(budget::controller)
        .with_if(flags.metering, metering::controller)
        .with_if(flags.metering, usage_record::controller)
}

/// Runs the quota-operator until SIGTERM.
///
/// # Errors
/// What [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    super::run_blocking(NAME, &flags.operator, controllers(flags), None)
}
