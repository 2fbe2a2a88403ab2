//! The network-operator's merged fabric signal (`--merge-fabric-signals`; policy:
//! `gryvia_reconcile::network::fabric`): the GryviaFabricSignal `cluster` (`spec.nodeName:
//! "*"`), made at start, whose status lists every node's signal and sums the fresh ones.

use std::sync::Arc;

use futures::StreamExt;
use gryvia_reconcile::network::fabric::{ALL_NODES, FabricMergeReconciler, MERGED};
use gryvia_types::GryviaFabricSignal;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use super::{Running, Shared};
use crate::Result;
use crate::cache::wait_ready;
use crate::runtime::{Observe, run};

/// Observes every node's signal.
pub struct SignalsObserver {
    signals: Store<GryviaFabricSignal>,
}

#[async_trait::async_trait]
impl Observe for SignalsObserver {
    type Object = GryviaFabricSignal;
    type World = Vec<GryviaFabricSignal>;

    async fn observe(&self, _s: &GryviaFabricSignal) -> Result<Vec<GryviaFabricSignal>> {
        wait_ready(&self.signals, "GryviaFabricSignal").await?;
        Ok(self.signals.state().iter().map(|s| (**s).clone()).collect())
    }
}

/// Makes the merged signal when it is missing (server-side apply of its spec only).
async fn ensure_merged(client: kube::Client) {
    let api: Api<GryviaFabricSignal> = Api::all(client);
    let body = json!({
        "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFabricSignal",
        "metadata": {"name": MERGED, "labels": {"gryvia.io/fabric-merged": "true"}},
        "spec": {"nodeName": ALL_NODES},
    });
    let params = PatchParams::apply(crate::operators::network::NAME).force();
    loop {
        match api.patch(MERGED, &params, &Patch::Apply(&body)).await {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "make the merged GryviaFabricSignal {MERGED}; trying again in 10 s");
                tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            }
        }
    }
}

/// The merge controller: reconciled when the merged signal changes, when any node's signal is
/// written, and every 30 s (a node's signal goes stale).
pub fn controller(shared: &Shared) -> Running {
    let c = &shared.caches;
    let store: Store<GryviaFabricSignal> = c.store();
    let merged = c
        .subscribe::<GryviaFabricSignal>()
        .filter(|s| futures::future::ready(s.metadata.name.as_deref() == Some(MERGED)));
    let ctrl = Controller::for_shared_stream(merged, store).watches_shared_stream(
        c.subscribe::<GryviaFabricSignal>(),
        |_s: Arc<GryviaFabricSignal>| Some(ObjectRef::<GryviaFabricSignal>::new(MERGED)),
    );
    let observer = SignalsObserver { signals: c.store() };
    let client = shared.client.clone();
    let running = run(ctrl, shared.context(FabricMergeReconciler, observer));
    Box::pin(async move {
        ensure_merged(client).await;
        running.await;
    })
}
