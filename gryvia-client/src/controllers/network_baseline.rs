//! The network-intelligence operator's baseline and anomaly controllers (policy:
//! `gryvia_reconcile::network::reconcile`): a GryviaNetworkBaseline folds its node's
//! collector data (GryviaFlowAggregate, GryviaFabricSignal) as it is written and raises
//! GryviaNetworkAnomalies; an anomaly resolves itself from its node's baseline.

use std::sync::Arc;

use gryvia_reconcile::network::anomaly::is_open;
use gryvia_reconcile::network::reconcile::{
    AnomalyReconciler, AnomalyWorld, BaselineReconciler, BaselineWorld, open_anomalies,
};
use gryvia_types::{
    GryviaFabricSignal, GryviaFlowAggregate, GryviaNetworkAnomaly, GryviaNetworkBaseline,
};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{Running, Shared, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// The baselines of `node`.
fn baselines_of(
    store: &Store<GryviaNetworkBaseline>,
    node: &str,
) -> Vec<ObjectRef<GryviaNetworkBaseline>> {
    store
        .state()
        .iter()
        .filter(|b| b.spec.node_name == node)
        .map(|b| ObjectRef::from_obj(b.as_ref()))
        .collect()
}

/// Observes a baseline's node: its aggregate, its signal, its open anomalies.
pub struct BaselineObserver {
    aggregates: Store<GryviaFlowAggregate>,
    signals: Store<GryviaFabricSignal>,
    anomalies: Store<GryviaNetworkAnomaly>,
}

#[async_trait::async_trait]
impl Observe for BaselineObserver {
    type Object = GryviaNetworkBaseline;
    type World = BaselineWorld;

    async fn observe(&self, b: &GryviaNetworkBaseline) -> Result<BaselineWorld> {
        wait_ready(&self.aggregates, "GryviaFlowAggregate").await?;
        wait_ready(&self.signals, "GryviaFabricSignal").await?;
        wait_ready(&self.anomalies, "GryviaNetworkAnomaly").await?;
        let node = &b.spec.node_name;
        let anomalies = self.anomalies.state();
        Ok(BaselineWorld {
            aggregate: self
                .aggregates
                .state()
                .iter()
                .find(|a| &a.spec.node_name == node)
                .and_then(|a| a.status.clone()),
            signal: self
                .signals
                .state()
                .iter()
                .find(|s| &s.spec.node_name == node)
                .and_then(|s| s.status.clone()),
            open: open_anomalies(node, anomalies.iter().map(AsRef::as_ref)),
        })
    }
}

/// The baseline controller: reconciled when a baseline's spec changes and when its node's
/// aggregate, signal or anomalies are written.
pub fn baseline_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let baselines: Store<GryviaNetworkBaseline> = c.store();
    let (of_aggregate, of_signal, of_anomaly) =
        (baselines.clone(), baselines.clone(), baselines.clone());
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaNetworkBaseline>(), spec_or_lifecycle),
        baselines,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFlowAggregate>(),
        move |a: Arc<GryviaFlowAggregate>| baselines_of(&of_aggregate, &a.spec.node_name),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFabricSignal>(),
        move |s: Arc<GryviaFabricSignal>| baselines_of(&of_signal, &s.spec.node_name),
    )
    .watches_shared_stream(
        c.subscribe::<GryviaNetworkAnomaly>(),
        move |a: Arc<GryviaNetworkAnomaly>| baselines_of(&of_anomaly, &a.spec.node),
    );
    let observer = BaselineObserver {
        aggregates: c.store(),
        signals: c.store(),
        anomalies: c.store(),
    };
    Box::pin(run(ctrl, shared.context(BaselineReconciler, observer)))
}

/// Observes an anomaly's node's baseline.
pub struct AnomalyObserver {
    baselines: Store<GryviaNetworkBaseline>,
}

#[async_trait::async_trait]
impl Observe for AnomalyObserver {
    type Object = GryviaNetworkAnomaly;
    type World = AnomalyWorld;

    async fn observe(&self, a: &GryviaNetworkAnomaly) -> Result<AnomalyWorld> {
        wait_ready(&self.baselines, "GryviaNetworkBaseline").await?;
        Ok(AnomalyWorld {
            baseline: self
                .baselines
                .state()
                .iter()
                .find(|b| b.spec.node_name == a.spec.node)
                .and_then(|b| b.status.clone()),
        })
    }
}

/// The anomaly controller: reconciled when an anomaly is created and when its node's baseline
/// is written (its open anomalies only).
pub fn anomaly_controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let anomalies: Store<GryviaNetworkAnomaly> = c.store();
    let of_baseline = anomalies.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaNetworkAnomaly>(), spec_or_lifecycle),
        anomalies,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaNetworkBaseline>(),
        move |b: Arc<GryviaNetworkBaseline>| {
            of_baseline
                .state()
                .iter()
                .filter(|a| a.spec.node == b.spec.node_name && is_open(a))
                .map(|a| ObjectRef::from_obj(a.as_ref()))
                .collect::<Vec<_>>()
        },
    );
    let observer = AnomalyObserver {
        baselines: c.store(),
    };
    Box::pin(run(ctrl, shared.context(AnomalyReconciler, observer)))
}
