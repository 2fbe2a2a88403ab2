//! Tenants for the CLI, the gateway and the Python SDK: apply, list, read, and the budgets
//! of a tenant.

use gryvia_types::GryviaTenant;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::CLI_MANAGER;
use crate::{Result, api_err};

/// Creates or updates a tenant with server-side apply (field manager `gryvia-cli`): only the
/// fields given are owned, fields others set are kept.
///
/// # Errors
/// [`Error::Api`] with the API server's message (which names the invalid field).
pub async fn apply_tenant(client: &kube::Client, tenant: &GryviaTenant) -> Result<GryviaTenant> {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    let name = tenant.name_any();
    let params = kube::api::PatchParams::apply(CLI_MANAGER);
    api.patch(&name, &params, &kube::api::Patch::Apply(tenant))
        .await
        .map_err(api_err(format!("apply tenant {name}")))
}

/// Every tenant, sorted by name.
///
/// # Errors
/// [`Error::Api`] when listing fails.
pub async fn list_tenants(client: &kube::Client) -> Result<Vec<GryviaTenant>> {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    let mut items = api
        .list(&ListParams::default())
        .await
        .map_err(api_err("list tenants"))?
        .items;
    items.sort_by_key(ResourceExt::name_any);
    Ok(items)
}

/// One tenant; `None` when it does not exist.
///
/// # Errors
/// [`Error::Api`] when the read fails.
pub async fn get_tenant(client: &kube::Client, name: &str) -> Result<Option<GryviaTenant>> {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    api.get_opt(name)
        .await
        .map_err(api_err(format!("read tenant {name}")))
}

/// The budgets whose scope names `tenant` (as team or tenant), sorted by name.
///
/// # Errors
/// [`Error::Api`] when listing fails.
pub async fn budgets_of(
    client: &kube::Client,
    tenant: &str,
) -> Result<Vec<gryvia_types::GryviaBudget>> {
    let all = Api::<gryvia_types::GryviaBudget>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_err("list budgets"))?
        .items;
    Ok(gryvia_reconcile::budget::budgets_of_tenant(&all, tenant)
        .into_iter()
        .cloned()
        .collect())
}
