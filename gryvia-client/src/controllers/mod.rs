//! One module per controller: its observer (which reads the operator's shared watch caches
//! into the World its pure policy takes) and its wiring (what triggers a reconcile), exported
//! as one `controller(&Shared, ...)`. Which controllers an operator runs is in
//! `crate::operators`; the policy of each is in `gryvia_reconcile`.

pub mod aijob;
pub mod budget;
pub mod collector_config;
pub mod fabric_merge;
pub mod flow_policy;
pub mod health_check;
pub mod invoice;
pub mod job_hook;
pub mod kueue;
pub mod metering;
pub mod network_baseline;
pub mod network_cost;
pub mod network_health;
pub mod priority;
pub mod queue;
pub mod quota;
pub mod registry;
pub mod reservation;
pub mod service_graph;
pub mod serving;
pub mod storage_health;
pub mod template;
pub mod tenant;
pub mod training_insight;
pub mod tuner;
pub mod usage_record;
pub mod workflow;
pub mod workspace;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use gryvia_reconcile::Reconcile;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::apply::Executor;
use crate::cache::Caches;
use crate::metrics::{ErrorLabels, Metrics};
use crate::runtime::Context;
use crate::{Error, Result};

/// What the controllers of one operator share during one leadership term.
#[derive(Clone)]
pub struct Shared {
    /// The API client.
    pub client: kube::Client,
    /// The operator's metrics.
    pub metrics: Metrics,
    /// The operator's watch caches (one reflector per kind).
    pub caches: Caches,
    /// Observe and decide as usual, log every Plan, act on nothing.
    pub dry_run: bool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// What controllers started now share: fresh caches on `client`.
    pub fn new(client: kube::Client, metrics: Metrics, dry_run: bool) -> Self {
        Shared {
            caches: Caches::new(client.clone()),
            client,
            metrics,
            dry_run,
        }
    }

    /// The context of a controller: its executor applies under the reconciler's own name as
    /// field manager (one per controller), or only logs with `dry_run`.
    pub fn context<R: Reconcile, O>(&self, reconciler: R, observer: O) -> Arc<Context<R, O>> {
        let executor = self.executor(reconciler.name());
        self.context_with(reconciler, observer, executor)
    }

    /// The executor of a controller whose reconciler is named `name` (its field manager).
    pub fn executor(&self, name: &str) -> Executor {
        Executor::new(self.client.clone(), name)
            .dry_run(self.dry_run)
            .with_caches(self.caches.clone())
    }

    /// The context of a controller acting through `executor` (one of [`Shared::executor`],
    /// set up further).
    pub fn context_with<R: Reconcile, O>(
        &self,
        reconciler: R,
        observer: O,
        executor: Executor,
    ) -> Arc<Context<R, O>> {
        Arc::new(Context::new(
            reconciler,
            observer,
            executor,
            self.metrics.clone(),
        ))
    }
}

/// A running controller: a future that ends when its streams do.
pub type Running = BoxFuture<'static, ()>;

/// Lets an object through only when `key` of it (a hash of what matters) differs from the last
/// one seen of the same object: for triggers that must not fire on a controller's own status
/// writes ([`crate::runtime::spec_or_lifecycle`]).
pub fn changed<K>(
    stream: impl Stream<Item = Arc<K>> + Send + 'static,
    key: fn(&K) -> Option<u64>,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource + Send + Sync + 'static,
{
    // (namespace, name) -> (uid, key): a recreated object passes again.
    type Seen = HashMap<(Option<String>, Option<String>), (Option<String>, u64)>;
    let mut seen = Seen::new();
    stream.filter(move |obj| {
        let pass = match key(obj) {
            None => true,
            Some(hash) => {
                let meta = obj.meta();
                let now = (meta.uid.clone(), hash);
                seen.insert((meta.namespace.clone(), meta.name.clone()), now.clone()) != Some(now)
            }
        };
        futures::future::ready(pass)
    })
}

/// A wake-up of a [`cycles`] controller whenever an object of kind `K` changes in what `key`
/// hashes (`None` from `key`: every change).
pub fn wake_on<K>(caches: &Caches, key: fn(&K) -> Option<u64>) -> BoxStream<'static, ()>
where
    K: crate::cache::Cacheable,
{
    changed(caches.subscribe::<K>(), key).map(|_| ()).boxed()
}

/// Every object of `store`, for a trigger that concerns them all.
pub fn all_of<K>(store: &Store<K>) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// Every node's labels, by node name, for Worlds that select nodes.
pub fn node_labels(
    nodes: &Store<k8s_openapi::api::core::v1::Node>,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
    nodes
        .state()
        .iter()
        .map(|n| {
            let meta = &n.metadata;
            (
                meta.name.clone().unwrap_or_default(),
                meta.labels.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// The object named `name` in `namespace` (or cluster-scoped with `None`) in `store`.
pub fn cached<K>(store: &Store<K>, namespace: Option<&str>, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let r = ObjectRef::new(name);
    store.get(&match namespace {
        Some(ns) => r.within(ns),
        None => r,
    })
}

/// The objects of `store` in `namespace` (`None`: cluster-scoped), sorted by name.
pub fn in_namespace<K>(store: &Store<K>, namespace: Option<&str>) -> Vec<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut out: Vec<Arc<K>> = store
        .state()
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == namespace)
        .collect();
    out.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    out
}

/// Copies of the objects `objects` (for pure functions that take plain slices).
pub fn owned<K: Clone>(objects: &[Arc<K>]) -> Vec<K> {
    objects.iter().map(|o| (**o).clone()).collect()
}

/// The label selector of the children Gryvia manages.
pub fn managed_selector() -> String {
    format!(
        "{}={}",
        gryvia_types::labels::MANAGED_BY,
        gryvia_types::labels::MANAGED_BY_VALUE
    )
}

/// Runs `cycle` for a controller that decides about a whole set at once (the queue
/// scheduler, the Kueue integration): whenever `triggers` fire and at least every `resync`.
/// A change after a quiet spell (no cycle ended within `pace`) is decided at once; changes
/// that come while cycles run are taken together, the next cycle starting `pace` after the
/// last ended ([`pause_before`]), so a busy controller runs at most one cycle per `pace` plus
/// its own time. A failed cycle is counted in the error metric and retried
/// after a doubling back-off ([`backoff`]), never in a hot loop. The triggers are drained on
/// their own, so a long cycle never holds the reflectors (and every other controller's
/// caches) back.
pub fn cycles<F, Fut>(
    name: &'static str,
    triggers: BoxStream<'static, ()>,
    resync: Duration,
    pace: Duration,
    metrics: Metrics,
    cycle: F,
) -> Running
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let wake = Arc::new(tokio::sync::Notify::new());
    Box::pin(async move {
        let notify = wake.clone();
        let drain = triggers.for_each(move |()| {
            notify.notify_one();
            futures::future::ready(())
        });
        let run = async move {
            let mut failures: u32 = 0;
            let mut last_end: Option<std::time::Instant> = None;
            loop {
                tokio::select! {
                    () = wake.notified() => {}
                    () = tokio::time::sleep(resync) => {}
                }
                let pause = pause_before(last_end, pace, std::time::Instant::now());
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                let result = cycle().await;
                last_end = Some(std::time::Instant::now());
                match result {
                    Ok(()) => failures = 0,
                    Err(e) => {
                        failures = failures.saturating_add(1);
                        let delay = backoff(failures, &e);
                        metrics
                            .errors
                            .get_or_create(&ErrorLabels {
                                controller: name.to_owned(),
                                error: e.metric_label().to_owned(),
                            })
                            .inc();
                        tracing::warn!(controller = name, error = %e, retry_in = ?delay, "cycle failed");
                        tokio::time::sleep(delay).await;
                        wake.notify_one();
                    }
                }
            }
        };
        tokio::select! {
            () = drain => {}
            () = run => {}
        }
    })
}

/// How long a woken cycle waits at `now`: nothing after a quiet spell (the last cycle ended
/// `pace` or longer ago, or none ran yet); else until `pace` after the last ended.
pub fn pause_before(
    last_end: Option<std::time::Instant>,
    pace: Duration,
    now: std::time::Instant,
) -> Duration {
    last_end.map_or(Duration::ZERO, |ended| {
        pace.saturating_sub(now.saturating_duration_since(ended))
    })
}

/// Wait after `failures` failed cycles in a row: doubling from 500 ms up to a minute, at
/// least what the error asks for.
fn backoff(failures: u32, e: &Error) -> Duration {
    let exp = Duration::from_millis(500).saturating_mul(1 << failures.min(7).saturating_sub(1));
    exp.max(e.requeue_after()).min(Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_after_a_quiet_spell_starts_at_once_and_busy_ones_are_paced() {
        let pace = Duration::from_millis(50);
        let t0 = std::time::Instant::now();
        assert_eq!(
            pause_before(None, pace, t0),
            Duration::ZERO,
            "the first cycle"
        );
        assert_eq!(
            pause_before(Some(t0), pace, t0 + Duration::from_millis(10)),
            Duration::from_millis(40),
            "a change 10 ms after the last cycle ended waits for the pace"
        );
        assert_eq!(
            pause_before(Some(t0), pace, t0 + Duration::from_millis(80)),
            Duration::ZERO,
            "after a quiet spell, at once"
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        // A timeout asks for 5 s at least.
        let e = Error::Timeout {
            what: "apply status".to_owned(),
            after: Duration::from_secs(20),
        };
        assert_eq!(backoff(1, &e), Duration::from_secs(5));
        assert_eq!(backoff(5, &e), Duration::from_secs(8));
        assert_eq!(backoff(30, &e), Duration::from_secs(32));
    }
}
