//! The network-operator's collector config controller (policy:
//! `gryvia_reconcile::network::collector::CollectorConfigReconciler`): each
//! GryviaCollectorConfig's status counts the nodes whose collector runs its current
//! generation, from what they report in their GryviaFabricSignals.

use std::sync::Arc;

use gryvia_reconcile::network::collector::{CollectorConfigReconciler, CollectorConfigWorld};
use gryvia_types::{GryviaCollectorConfig, GryviaFabricSignal};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::{Running, Shared, all_of, changed};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Observes every node's fabric signal.
pub struct CollectorConfigObserver {
    signals: Store<GryviaFabricSignal>,
}

#[async_trait::async_trait]
impl Observe for CollectorConfigObserver {
    type Object = GryviaCollectorConfig;
    type World = CollectorConfigWorld;

    async fn observe(&self, _c: &GryviaCollectorConfig) -> Result<CollectorConfigWorld> {
        wait_ready(&self.signals, "GryviaFabricSignal").await?;
        Ok(CollectorConfigWorld {
            signals: self.signals.state().iter().map(|s| (**s).clone()).collect(),
        })
    }
}

/// The collector config controller: reconciled when a config's spec changes, when any node's
/// fabric signal is written (every collector's interval), and every 30 s (reports go stale).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let configs: Store<GryviaCollectorConfig> = c.store();
    let of_signal = configs.clone();
    let ctrl = Controller::for_shared_stream(
        changed(c.subscribe::<GryviaCollectorConfig>(), spec_or_lifecycle),
        configs,
    )
    .watches_shared_stream(
        c.subscribe::<GryviaFabricSignal>(),
        move |_s: Arc<GryviaFabricSignal>| all_of(&of_signal),
    );
    let observer = CollectorConfigObserver { signals: c.store() };
    Box::pin(run(
        ctrl,
        shared.context(CollectorConfigReconciler, observer),
    ))
}
