//! The network-operator's flow policy controllers (policy:
//! `gryvia_reconcile::network::policies`): each GryviaFlowPolicy is applied as a NetworkPolicy
//! (`allow`), resolved to addresses for the collectors' eBPF deny maps with their drops summed
//! (`deny`), or audited against the flows (`audit`); each GryviaAutoPolicy learns its pods'
//! flows and suggests, or applies, flow policies that allow exactly them.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use gryvia_reconcile::network::policies::{
    AutoPolicyReconciler, FlowPolicyReconciler, PolicyWorld,
};
use gryvia_reconcile::network::policy::addresses;
use gryvia_types::{
    CachedPod, GryviaAutoPolicy, GryviaFabricSignal, GryviaFlowAggregate, GryviaFlowPolicy,
};
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed};
use crate::Result;
use crate::cache::{NamespaceMeta, wait_ready};
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes the pods, Services and namespaces that resolve a policy, every node's latest
/// flow window, and the drops each node's collector reports.
pub struct PolicyObserver {
    aggregates: Store<GryviaFlowAggregate>,
    signals: Store<GryviaFabricSignal>,
    pods: Store<CachedPod>,
    services: Store<Service>,
    namespaces: Store<NamespaceMeta>,
}

impl PolicyObserver {
    fn new(shared: &Shared) -> Self {
        let c = &shared.caches;
        PolicyObserver {
            aggregates: c.store(),
            signals: c.store(),
            pods: c.store(),
            services: c.store(),
            namespaces: c.store(),
        }
    }

    async fn world(&self) -> Result<PolicyWorld> {
        wait_ready(&self.aggregates, "GryviaFlowAggregate").await?;
        wait_ready(&self.signals, "GryviaFabricSignal").await?;
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.services, "Service").await?;
        wait_ready(&self.namespaces, "Namespace").await?;
        let services = self.services.state();
        Ok(PolicyWorld {
            addresses: addresses(
                self.pods.state().iter().map(AsRef::as_ref),
                services.iter().map(AsRef::as_ref),
            ),
            namespaces: self
                .namespaces
                .state()
                .iter()
                .map(|n| (n.name_any(), n.labels().clone()))
                .collect(),
            aggregates: self
                .aggregates
                .state()
                .iter()
                .filter_map(|a| Some((a.spec.node_name.clone(), a.status.clone()?)))
                .collect(),
            drops: self
                .signals
                .state()
                .iter()
                .filter_map(|s| {
                    let st = s.status.as_ref()?;
                    (!st.policy_drops.is_empty())
                        .then(|| (s.spec.node_name.clone(), st.policy_drops.clone()))
                })
                .collect::<BTreeMap<_, _>>(),
        })
    }
}

#[async_trait::async_trait]
impl Observe for PolicyObserver {
    type Object = GryviaFlowPolicy;
    type World = PolicyWorld;

    async fn observe(&self, _p: &GryviaFlowPolicy) -> Result<PolicyWorld> {
        self.world().await
    }
}

/// The same observer for auto policies.
pub struct AutoPolicyObserver(PolicyObserver);

#[async_trait::async_trait]
impl Observe for AutoPolicyObserver {
    type Object = GryviaAutoPolicy;
    type World = PolicyWorld;

    async fn observe(&self, _p: &GryviaAutoPolicy) -> Result<PolicyWorld> {
        self.0.world().await
    }
}

/// What of a pod a policy resolves: its address, labels and node.
fn pod_address(p: &CachedPod) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    p.pod_ip.hash(&mut h);
    p.metadata.labels.hash(&mut h);
    p.node_name.hash(&mut h);
    Some(h.finish())
}

/// The flow policy controller: reconciled when a policy's spec changes, when a pod's address,
/// labels or node change (a deny policy's addresses), when any node's aggregate (audit) or
/// fabric signal (drops) is written.
pub fn flow_policy_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let policies: Store<GryviaFlowPolicy> = c.store();
    let (of_aggregate, of_signal, of_pod) = (policies.clone(), policies.clone(), policies.clone());
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaFlowPolicy>(), spec_or_lifecycle),
        policies,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |_a: Arc<GryviaFlowAggregate>| all_of(&of_aggregate),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFabricSignal>(),
        move |_s: Arc<GryviaFabricSignal>| all_of(&of_signal),
    )
    .watches_shared_stream(
        changed(c.subscribe::<CachedPod>(), pod_address),
        move |_p: Arc<CachedPod>| all_of(&of_pod),
    );
    Box::pin(run(
        ctrl,
        shared.context(FlowPolicyReconciler, PolicyObserver::new(shared)),
    ))
}

/// The auto policy controller: reconciled when a policy's spec changes, when any node's
/// aggregate is written (new flows to learn), and when learning ends (the Plan's requeue).
pub fn auto_policy_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let policies: Store<GryviaAutoPolicy> = c.store();
    let of_aggregate = policies.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaAutoPolicy>(), spec_or_lifecycle),
        policies,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |_a: Arc<GryviaFlowAggregate>| all_of(&of_aggregate),
    );
    Box::pin(run(
        ctrl,
        shared.context(
            AutoPolicyReconciler,
            AutoPolicyObserver(PolicyObserver::new(shared)),
        ),
    ))
}
