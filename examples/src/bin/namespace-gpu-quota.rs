//! Runs the example reconciler with Gryvia's runtime: watches, server-side apply, events,
//! backoff, metrics on 127.0.0.1:9090, no leader election (one replica).

use std::sync::Arc;

use gryvia_client::apply::Executor;
use gryvia_client::metrics::{Health, Metrics};
use gryvia_client::runtime::{Context, run};
use gryvia_examples::{NamespaceGpuQuota, NoWorld};
use gryvia_reconcile::Reconcile;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::Api;
use kube::runtime::{Controller, watcher};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter("info,kube=warn")
        .init();
    tokio::runtime::Runtime::new()?.block_on(async {
        let client = gryvia_client::connect().await?;
        let metrics = Metrics::new();
        let executor = Executor::new(client.clone(), NamespaceGpuQuota.name());
        let ctx = Arc::new(Context::new(
            NamespaceGpuQuota,
            NoWorld,
            executor,
            metrics.clone(),
        ));
        let controller = Controller::new(
            Api::<Namespace>::all(client.clone()),
            watcher::Config::default(),
        )
        // A Namespace is cluster-scoped: its quota maps to it by the quota's namespace (kube's
        // `owns` would build a reference with a namespace, see `runtime::cluster_owner`).
        .watches(
            Api::<ResourceQuota>::all(client),
            watcher::Config::default(),
            |rq: ResourceQuota| {
                rq.metadata
                    .namespace
                    .map(|ns| kube::runtime::reflector::ObjectRef::<Namespace>::new(&ns))
            },
        );
        let server =
            gryvia_client::metrics::serve("127.0.0.1:9090".parse()?, metrics, Health::default());
        tokio::select! {
            r = server => r?,
            () = run(controller, ctx) => {}
        }
        anyhow::Ok(())
    })
}
