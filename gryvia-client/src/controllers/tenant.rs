//! The GryviaTenant controller of the quota-operator: namespace, ResourceQuota, LimitRange,
//! NetworkPolicy and (opt-in) RoleBindings per tenant, GPUs carved out of a parent's (policy:
//! `gryvia_reconcile::tenancy`). Reads tenants, the namespace, its quota and workloads and the
//! nodes' GPU products from the operator's caches.

use std::collections::BTreeMap;
use std::sync::Arc;

use gryvia_reconcile::facts;
use gryvia_reconcile::tenancy::{
    NamespaceState, TENANT_QUOTA, TenantOptions, TenantReconciler, TenantSummary, TenantWorld,
    gpus_by_product, namespace_of,
};
use gryvia_types::{CachedPod, GryviaAIJob, GryviaTenant, labels};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, cached, changed, in_namespace, managed_selector};
use crate::Result;
use crate::cache::{NamespaceMeta, NodeMeta, wait_ready};
use crate::runtime::{Observe, cluster_owner, run, spec_or_lifecycle};

/// GPUs in `used` of a ResourceQuota (0 when it has no GPU limit).
pub fn gpus_used(rq: &ResourceQuota) -> i32 {
    gryvia_reconcile::tenancy::quota_gpus(rq)
        .and_then(|(_, used)| i32::try_from(used).ok())
        .unwrap_or(0)
}

/// Observes a tenant: all tenants, its namespace, usage and workloads.
pub struct TenantObserver {
    tenants: Store<GryviaTenant>,
    namespaces: Store<NamespaceMeta>,
    quotas: Store<ResourceQuota>,
    pods: Store<CachedPod>,
    jobs: Store<Job>,
    ai_jobs: Store<GryviaAIJob>,
    nodes: Store<NodeMeta>,
    client: kube::Client,
}

impl TenantObserver {
    /// An observer reading the caches of `shared`.
    pub fn new(shared: &Shared) -> Self {
        let c = &shared.caches;
        TenantObserver {
            tenants: c.store(),
            namespaces: c.store(),
            quotas: c.store(),
            pods: c.store(),
            jobs: c.store(),
            ai_jobs: c.store(),
            nodes: c.store(),
            client: shared.client.clone(),
        }
    }

    async fn ready(&self) -> Result<()> {
        wait_ready(&self.tenants, "GryviaTenant").await?;
        wait_ready(&self.namespaces, "Namespace").await?;
        wait_ready(&self.quotas, "ResourceQuota").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.jobs, "Job").await?;
        wait_ready(&self.ai_jobs, "GryviaAIJob").await?;
        wait_ready(&self.nodes, "Node").await
    }
}

impl TenantObserver {
    /// Whether namespace `ns` holds a pod, a Job or a GryviaAIJob, as the API server has it
    /// now (one item is enough: 0 or 1).
    async fn live_workloads(&self, ns: &str) -> Result<usize> {
        async fn any<K>(client: &kube::Client, ns: &str) -> Result<usize>
        where
            K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug,
        {
            let params = kube::api::ListParams::default().limit(1);
            kube::Api::<K>::namespaced(client.clone(), ns)
                .list_metadata(&params)
                .await
                .map(|l| l.items.len())
                .map_err(|source| crate::Error::Api {
                    operation: format!("list {} in namespace {ns}", K::kind(&())),
                    source,
                })
        }
        let pods = any::<k8s_openapi::api::core::v1::Pod>(&self.client, ns).await?;
        if pods > 0 {
            return Ok(pods);
        }
        let jobs = any::<Job>(&self.client, ns).await?;
        if jobs > 0 {
            return Ok(jobs);
        }
        any::<GryviaAIJob>(&self.client, ns).await
    }
}

#[async_trait::async_trait]
impl Observe for TenantObserver {
    type Object = GryviaTenant;
    type World = TenantWorld;

    async fn observe(&self, tenant: &GryviaTenant) -> Result<TenantWorld> {
        self.ready().await?;
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
        let Some(namespace) = cached(&self.namespaces, None, &ns) else {
            return Ok(TenantWorld {
                tenants,
                ..Default::default()
            });
        };
        let state = NamespaceState::of(&namespace.metadata);
        let gpus_in_use = cached(&self.quotas, Some(&ns), TENANT_QUOTA)
            .map(|rq| gpus_used(&rq))
            .unwrap_or(0);
        // Read in place: a tenant reconciles at every GPU pod placed or ended, and copying
        // the namespace's pods and the fleet's nodes each time made the quota-operator the
        // busiest process of a 2,000-node fleet filling with pods.
        let pod_list = in_namespace(&self.pods, Some(&ns));
        let pods = pod_list.len();
        let products: BTreeMap<String, String> = pod_list
            .iter()
            .filter_map(|p| facts::node_of(p))
            .filter_map(|n| {
                let node = cached(&self.nodes, None, n)?;
                Some((
                    n.to_owned(),
                    facts::gpu_product_of(&node.metadata)?.to_owned(),
                ))
            })
            .collect();
        let gpus_by_type = gpus_by_product(pod_list.iter().map(AsRef::as_ref), &products);
        let jobs = in_namespace(&self.jobs, Some(&ns)).len();
        let ai_jobs = in_namespace(&self.ai_jobs, Some(&ns)).len();
        let mut workloads = pods + jobs + ai_jobs;
        // A deleted namespace cannot be brought back: before a deleted tenant's namespace is
        // judged empty, the API server is asked rather than the caches, which may not hold a
        // workload made a moment ago (CI saw a namespace deleted with such a pod in it).
        if workloads == 0 && tenant.metadata.deletion_timestamp.is_some() {
            workloads = self.live_workloads(&ns).await?;
        }
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        Ok(TenantWorld {
            tenants,
            namespace: Some(state),
            gpus_in_use,
            gpus_by_type,
            pods: count(pods),
            workloads: count(workloads),
        })
    }
}

/// The tenant controller: a tenant is reconciled when its spec changes, when one of its
/// children or its namespace changes, when a GPU pod of its namespace is bound or ends, and
/// when its parent's spec changes (children are
/// re-allocated). Tenants are cluster-scoped: children map to them through `cluster_owner`.
pub fn controller(shared: &Shared, options: TenantOptions) -> Running {
    let c = &shared.caches;
    let managed = managed_selector();
    let tenants: Store<GryviaTenant> = c.store();
    let children_of = tenants.clone();
    let namespaces: Store<NamespaceMeta> = c.store();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaTenant>(), spec_or_lifecycle),
        tenants,
    )
    .watches_shared_stream(c.subscribe::<ResourceQuota>(), |o: Arc<ResourceQuota>| {
        cluster_owner::<GryviaTenant, _>(o.as_ref())
    })
    .watches_shared_stream(
        c.subscribe_labelled::<LimitRange>(&managed),
        |o: Arc<LimitRange>| cluster_owner::<GryviaTenant, _>(o.as_ref()),
    )
    .watches_shared_stream(
        c.subscribe_labelled::<NetworkPolicy>(&managed),
        |o: Arc<NetworkPolicy>| cluster_owner::<GryviaTenant, _>(o.as_ref()),
    )
    .watches_shared_stream(
        c.subscribe_labelled::<RoleBinding>(&managed),
        |o: Arc<RoleBinding>| cluster_owner::<GryviaTenant, _>(o.as_ref()),
    )
    // A pod's GPUs count against its tenant's per-product limits once it is bound to a node
    // (the product is the node's) and stop counting when it ends: binding and ending change
    // nothing the tenant's other children show, so they trigger it here.
    .watches_shared_stream(
        changed(c.subscribe::<CachedPod>(), gpu_placement),
        move |pod: Arc<CachedPod>| {
            let ns = pod.namespace()?;
            namespaces
                .get(&ObjectRef::new(&ns))
                .and_then(|n| facts::tenant_of_namespace(n.labels()))
                .map(|t| ObjectRef::<GryviaTenant>::new(&t))
        },
    )
    .watches_shared_stream(c.subscribe::<NamespaceMeta>(), |ns: Arc<NamespaceMeta>| {
        ns.labels()
            .get(labels::TENANT)
            .map(|t| ObjectRef::<GryviaTenant>::new(t))
    })
    // A parent's change re-allocates its children.
    .watches_shared_stream(
        changed(c.subscribe::<GryviaTenant>(), spec_or_lifecycle),
        move |parent: Arc<GryviaTenant>| {
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
    Box::pin(run(
        ctrl,
        shared.context(reconciler, TenantObserver::new(shared)),
    ))
}

/// A key for [`changed`]: a pod passes when it is created, bound to a node or finishes, and
/// only when it holds GPUs (a tenant counts GPU pods per product).
fn gpu_placement(pod: &CachedPod) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    if !facts::holds_gpus(pod) {
        // Constant: a pod without GPUs passes once and never again.
        return Some(0);
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    facts::node_of(pod).hash(&mut h);
    facts::finished(pod).hash(&mut h);
    Some(h.finish())
}
