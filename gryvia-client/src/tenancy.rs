//! The observe half and the wiring of the tenancy controllers (GryviaTenant, GryviaQuota) that
//! the quota-operator runs. The policy is in `gryvia_reconcile::tenancy`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use gryvia_reconcile::tenancy::{
    NamespaceState, QuotaReconciler, QuotaWorld, TENANT_QUOTA, TenantOptions, TenantReconciler,
    TenantSummary, TenantWorld, namespace_of,
};
use gryvia_types::labels;
use gryvia_types::{GryviaAIJob, GryviaQuota, GryviaTenant};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Pod, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams};
use kube::runtime::PredicateConfig;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use crate::apply::Executor;
use crate::metrics::Metrics;
use crate::runtime::{Context, Observe, cluster_owner, run, spec_controller, spec_or_lifecycle};
use crate::{Result, api_err};

/// GPUs in `used` of a ResourceQuota (0 when it has no GPU limit).
fn gpus_used(rq: &ResourceQuota) -> i32 {
    gryvia_reconcile::tenancy::quota_gpus(rq)
        .and_then(|(_, used)| i32::try_from(used).ok())
        .unwrap_or(0)
}

/// Observes a tenant: all tenants (from the watch cache), its namespace, usage and workloads.
pub struct TenantObserver {
    client: kube::Client,
    tenants: Store<GryviaTenant>,
}

#[async_trait::async_trait]
impl Observe for TenantObserver {
    type Object = GryviaTenant;
    type World = TenantWorld;

    async fn observe(&self, tenant: &GryviaTenant) -> Result<TenantWorld> {
        let mut tenants: Vec<TenantSummary> = self
            .tenants
            .state()
            .iter()
            .map(|t| TenantSummary::of(t))
            .collect();
        if !tenants
            .iter()
            .any(|t| Some(&t.name) == tenant.metadata.name.as_ref())
        {
            tenants.push(TenantSummary::of(tenant));
        }
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        let ns = namespace_of(&tenant.name_any());
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let Some(namespace) = namespaces
            .get_opt(&ns)
            .await
            .map_err(api_err(format!("read namespace {ns}")))?
        else {
            return Ok(TenantWorld {
                tenants,
                ..Default::default()
            });
        };
        let state = NamespaceState {
            tenant_label: namespace.labels().get(labels::TENANT).cloned(),
            terminating: namespace.meta().deletion_timestamp.is_some(),
        };
        let quotas: Api<ResourceQuota> = Api::namespaced(self.client.clone(), &ns);
        let gpus_in_use = quotas
            .get_opt(TENANT_QUOTA)
            .await
            .map_err(api_err(format!("read quota in {ns}")))?
            .map(|rq| gpus_used(&rq))
            .unwrap_or(0);
        let lp = ListParams::default();
        let pod_list = Api::<Pod>::namespaced(self.client.clone(), &ns)
            .list(&lp)
            .await
            .map_err(api_err(format!("list pods in {ns}")))?
            .items;
        let pods = pod_list.len();
        let gpus_by_type = self.gpus_by_type(&pod_list).await?;
        let jobs = Api::<Job>::namespaced(self.client.clone(), &ns)
            .list_metadata(&lp)
            .await
            .map_err(api_err(format!("list jobs in {ns}")))?
            .items
            .len();
        let ai_jobs = Api::<GryviaAIJob>::namespaced(self.client.clone(), &ns)
            .list_metadata(&lp)
            .await
            .map_err(api_err(format!("list GryviaAIJobs in {ns}")))?
            .items
            .len();
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(TenantWorld {
            tenants,
            namespace: Some(state),
            gpus_in_use,
            gpus_by_type,
            pods: count(pods),
            workloads: count(pods + jobs + ai_jobs),
        })
    }
}

impl TenantObserver {
    /// GPUs of the pods that hold them (scheduled, not finished), per GPU product of their node.
    async fn gpus_by_type(&self, pods: &[Pod]) -> Result<BTreeMap<String, i32>> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let mut products: BTreeMap<String, String> = BTreeMap::new();
        let mut out = BTreeMap::new();
        for pod in pods {
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("");
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            if matches!(phase, "Succeeded" | "Failed") {
                continue;
            }
            let gpus = gryvia_reconcile::tenancy::pod_gpus(pod);
            if gpus == 0 {
                continue;
            }
            if !products.contains_key(&node) {
                let product = nodes
                    .get_opt(&node)
                    .await
                    .map_err(api_err(format!("read node {node}")))?
                    .and_then(|n| n.labels().get(labels::NVIDIA_GPU_PRODUCT).cloned())
                    .unwrap_or_else(|| "unknown".to_owned());
                products.insert(node.clone(), product);
            }
            *out.entry(products[&node].clone()).or_insert(0) += gpus;
        }
        Ok(out)
    }
}

/// Observes a GryviaQuota: which of its namespaces exist, where its ResourceQuotas are, usage.
pub struct QuotaObserver {
    client: kube::Client,
}

#[async_trait::async_trait]
impl Observe for QuotaObserver {
    type Object = GryviaQuota;
    type World = QuotaWorld;

    async fn observe(&self, quota: &GryviaQuota) -> Result<QuotaWorld> {
        let name = quota.name_any();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let mut existing = BTreeSet::new();
        for ns in &quota.spec.namespaces {
            if namespaces
                .get_opt(ns)
                .await
                .map_err(api_err(format!("read namespace {ns}")))?
                .is_some()
            {
                existing.insert(ns.clone());
            }
        }
        let rqs = Api::<ResourceQuota>::all(self.client.clone())
            .list(&ListParams::default().labels(&format!("gryvia.io/quota={name}")))
            .await
            .map_err(api_err(format!("list quotas of {name}")))?;
        let mut managed_in = BTreeSet::new();
        let mut used = BTreeMap::new();
        for rq in &rqs.items {
            if let Some(ns) = rq.namespace() {
                used.insert(ns.clone(), gpus_used(rq));
                managed_in.insert(ns);
            }
        }
        Ok(QuotaWorld {
            existing_namespaces: existing,
            managed_in,
            gpus_used: used,
        })
    }
}

/// Builds the tenancy controllers; the returned closure starts them (each time this replica
/// becomes leader).
pub fn controllers(
    client: kube::Client,
    options: TenantOptions,
    metrics: Metrics,
) -> crate::runtime::Controllers {
    Box::new(move || -> BoxFuture<'static, ()> {
        let client = client.clone();
        let metrics = metrics.clone();
        Box::pin(async move {
            let managed = watcher::Config::default().labels(&format!(
                "{}={}",
                labels::MANAGED_BY,
                labels::MANAGED_BY_VALUE
            ));
            let tenants_api: Api<GryviaTenant> = Api::all(client.clone());
            // Status-only updates of a tenant (the operator's own writes) trigger nothing.
            let (tenant_ctrl, store) = spec_controller(tenants_api.clone());
            let children_of = store.clone();
            let tenant_ctrl = tenant_ctrl
                // Tenants are cluster-scoped: children map to them through `cluster_owner`.
                .watches(
                    Api::<ResourceQuota>::all(client.clone()),
                    managed.clone(),
                    cluster_owner::<GryviaTenant, _>,
                )
                .watches(
                    Api::<LimitRange>::all(client.clone()),
                    managed.clone(),
                    cluster_owner::<GryviaTenant, _>,
                )
                .watches(
                    Api::<NetworkPolicy>::all(client.clone()),
                    managed.clone(),
                    cluster_owner::<GryviaTenant, _>,
                )
                .watches(
                    Api::<RoleBinding>::all(client.clone()),
                    managed.clone(),
                    cluster_owner::<GryviaTenant, _>,
                )
                .watches(
                    Api::<Namespace>::all(client.clone()),
                    watcher::Config::default().labels(labels::TENANT),
                    |ns| {
                        ns.labels()
                            .get(labels::TENANT)
                            .map(|t| ObjectRef::<GryviaTenant>::new(t))
                    },
                )
                // A parent's change re-allocates its children.
                .watches_stream(
                    watcher(tenants_api, watcher::Config::default())
                        .default_backoff()
                        .applied_objects()
                        .predicate_filter(spec_or_lifecycle, PredicateConfig::default()),
                    move |parent: GryviaTenant| {
                        let name = parent.name_any();
                        children_of
                            .state()
                            .iter()
                            .filter(|t| t.spec.parent_tenant.as_deref() == Some(name.as_str()))
                            .map(|t| ObjectRef::from_obj(t.as_ref()))
                            .collect::<Vec<_>>()
                    },
                );
            let reconciler = TenantReconciler { options };
            let executor = Executor::new(
                client.clone(),
                gryvia_reconcile::Reconcile::name(&reconciler),
            );
            let tenant_ctx = Arc::new(Context::new(
                reconciler,
                TenantObserver {
                    client: client.clone(),
                    tenants: store,
                },
                executor.clone(),
                metrics.clone(),
            ));

            let quota_ctrl = Controller::new(
                Api::<GryviaQuota>::all(client.clone()),
                watcher::Config::default(),
            )
            .watches(
                Api::<ResourceQuota>::all(client.clone()),
                managed,
                cluster_owner::<GryviaQuota, _>,
            );
            let quota_ctx = Arc::new(Context::new(
                QuotaReconciler,
                QuotaObserver {
                    client: client.clone(),
                },
                executor,
                metrics,
            ));
            futures::join!(run(tenant_ctrl, tenant_ctx), run(quota_ctrl, quota_ctx));
        })
    })
}

/// Field manager of objects the CLI writes.
pub const CLI_MANAGER: &str = "gryvia-cli";

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
    use gryvia_types::BudgetScopeType;
    let api: Api<gryvia_types::GryviaBudget> = Api::all(client.clone());
    let mut items: Vec<_> = api
        .list(&ListParams::default())
        .await
        .map_err(api_err("list budgets"))?
        .items
        .into_iter()
        .filter(|b| {
            b.spec.scope.name == tenant
                && matches!(
                    b.spec.scope.type_,
                    BudgetScopeType::Team | BudgetScopeType::Tenant
                )
        })
        .collect();
    items.sort_by_key(ResourceExt::name_any);
    Ok(items)
}
