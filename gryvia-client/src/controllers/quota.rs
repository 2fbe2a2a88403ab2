//! The GryviaQuota controller of the quota-operator: a ResourceQuota in each listed namespace
//! (policy: `gryvia_reconcile::tenancy`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gryvia_reconcile::tenancy::{QuotaReconciler, QuotaWorld};
use gryvia_types::{GryviaQuota, labels};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::tenant::gpus_used;
use super::{Running, Shared, cached};
use crate::Result;
use crate::cache::{NamespaceMeta, wait_ready};
use crate::runtime::{Observe, cluster_owner, run};

/// Observes a GryviaQuota: which of its namespaces exist, where its ResourceQuotas are, usage.
pub struct QuotaObserver {
    namespaces: Store<NamespaceMeta>,
    quotas: Store<ResourceQuota>,
}

#[async_trait::async_trait]
impl Observe for QuotaObserver {
    type Object = GryviaQuota;
    type World = QuotaWorld;

    async fn observe(&self, quota: &GryviaQuota) -> Result<QuotaWorld> {
        wait_ready(&self.namespaces, "Namespace").await?;
        wait_ready(&self.quotas, "ResourceQuota").await?;
        let name = quota.name_any();
        let existing: BTreeSet<String> = quota
            .spec
            .namespaces
            .iter()
            .filter(|ns| cached(&self.namespaces, None, ns).is_some())
            .cloned()
            .collect();
        let mut managed_in = BTreeSet::new();
        let mut used = BTreeMap::new();
        for rq in self.quotas.state() {
            if rq.labels().get(labels::QUOTA) != Some(&name) {
                continue;
            }
            if let Some(ns) = rq.namespace() {
                used.insert(ns.clone(), gpus_used(&rq));
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

/// The GryviaQuota controller: reconciled when it, one of its ResourceQuotas or a namespace it
/// lists changes.
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let quotas: Store<GryviaQuota> = c.store();
    let listing = quotas.clone();
    let ctrl = Controller::for_shared_stream(c.subscribe::<GryviaQuota>(), quotas)
        .watches_shared_stream(c.subscribe::<ResourceQuota>(), |o: Arc<ResourceQuota>| {
            cluster_owner::<GryviaQuota, _>(o.as_ref())
        })
        // Whether a listed namespace exists is read from the cache: its arrival (or its
        // going) re-reconciles the quotas that list it.
        .watches_shared_stream(
            c.subscribe::<NamespaceMeta>(),
            move |ns: Arc<NamespaceMeta>| {
                let name = ns.name_any();
                listing
                    .state()
                    .iter()
                    .filter(|q| q.spec.namespaces.contains(&name))
                    .map(|q| ObjectRef::from_obj(q.as_ref()))
                    .collect::<Vec<_>>()
            },
        );
    let observer = QuotaObserver {
        namespaces: c.store(),
        quotas: c.store(),
    };
    Box::pin(run(ctrl, shared.context(QuotaReconciler, observer)))
}
