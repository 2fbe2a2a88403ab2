//! The controller runtime: drives any [`Reconcile`] implementation with kube-runtime.
//!
//! For every change of a watched object (and of the objects mapped to it), the runtime
//! observes the world with an [`Observe`] implementation, calls the pure
//! [`Reconcile::reconcile`] (or [`Reconcile::cleanup`] when the object is being deleted and
//! the reconciler has a finalizer, through kube's `finalizer()` helper), applies the Plan with
//! the [`Executor`], and requeues after the Plan's delay. Errors back off exponentially per
//! object. Metrics count every reconcile, its duration and its errors.
//!
//! [`run_leader_elected`] runs a set of controllers only while this replica holds a Lease, so
//! two replicas are safe: the standby takes over when the leader stops renewing.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use gryvia_reconcile::Reconcile;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, instrument, warn};

use crate::apply::Executor;
use crate::metrics::{ControllerLabels, ErrorLabels, Health, Metrics};
use crate::{Error, Result};

/// The observe half: reads what the reconcile needs into a plain world.
#[async_trait::async_trait]
pub trait Observe: Send + Sync + 'static {
    /// The reconciled resource.
    type Object: Send + Sync;
    /// What the reconcile needs to know.
    type World: Send;

    /// Reads the world of `object`.
    ///
    /// # Errors
    /// When a read fails (retried with backoff).
    async fn observe(&self, object: &Self::Object) -> Result<Self::World>;
}

/// A resource the runtime can drive: typed, (de)serializable, and addressable whatever its
/// scope. Every `CustomResource` of gryvia-types and every k8s-openapi kind is one.
pub trait Managed:
    Resource<DynamicType = (), Scope: crate::ScopeApi>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Managed for K where
    K: Resource<DynamicType = (), Scope: crate::ScopeApi>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug
        + Send
        + Sync
        + 'static
{
}

/// Longest wait between retries of a failing object.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Exponential backoff per object: 1 s, 2 s, 4 s ... up to [`MAX_BACKOFF`].
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Records a failure of `key` and returns how long to wait.
    pub fn fail(&self, key: &str) -> Duration {
        let mut map = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        let secs = 1u64
            .checked_shl(n.saturating_sub(1).min(20))
            .unwrap_or(u64::MAX);
        Duration::from_secs(secs).min(MAX_BACKOFF)
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeed(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// What a controller shares between reconciles.
pub struct Context<R, O> {
    /// The pure policy.
    pub reconciler: R,
    /// The observe half.
    pub observer: O,
    /// Applies Plans.
    pub executor: Executor,
    /// Metrics.
    pub metrics: Metrics,
    backoff: Backoff,
}

impl<R, O> Context<R, O> {
    /// A context for a controller named after the reconciler's field manager.
    pub fn new(reconciler: R, observer: O, executor: Executor, metrics: Metrics) -> Self {
        Context {
            reconciler,
            observer,
            executor,
            metrics,
            backoff: Backoff::default(),
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or(""),
        obj.meta().name.as_deref().unwrap_or("")
    )
}

/// Reconciles one object: observe, decide, act.
#[instrument(skip_all, fields(object = %key_of(obj.as_ref())))]
async fn reconcile_one<K, S, R, O>(obj: Arc<K>, ctx: Arc<Context<R, O>>) -> Result<Action>
where
    K: Managed,
    S: Serialize + Send + Sync,
    R: Reconcile<Object = K, Status = S> + Send + Sync + 'static,
    O: Observe<Object = K, World = R::World>,
{
    let labels = ControllerLabels {
        controller: ctx.reconciler.name().to_owned(),
    };
    ctx.metrics.reconciles.get_or_create(&labels).inc();
    let started = Instant::now();
    let api: Api<K> = crate::api_for(ctx.executor.client().clone(), obj.as_ref());
    let obj = if cached_is_current(&ctx, obj.as_ref()) {
        obj
    } else {
        // The one read that is not from a cache: the object itself, as the API server has
        // it now.
        let name = obj.meta().name.clone().unwrap_or_default();
        match api.get_opt(&name).await {
            Ok(Some(fresh)) => Arc::new(fresh),
            Ok(None) => return Ok(Action::await_change()),
            Err(source) => {
                return Err(Error::Api {
                    operation: format!("read {} {name}", K::kind(&())),
                    source,
                });
            }
        }
    };
    // Without a finalizer there is nothing to decide about an object on its way out (its
    // owned children go with it); acting would only race the namespace's deletion.
    if obj.meta().deletion_timestamp.is_some() && ctx.reconciler.finalizer().is_none() {
        return Ok(Action::await_change());
    }
    let result = match ctx.reconciler.finalizer() {
        // A dry run adds and removes no finalizer: it decides as the finalizer helper would.
        Some(_) if ctx.executor.is_dry_run() => {
            act(&ctx, &obj, obj.meta().deletion_timestamp.is_some()).await
        }
        Some(name) => finalizer(&api, name, obj.clone(), |event| async {
            match event {
                FinalizerEvent::Apply(o) => act(&ctx, &o, false).await,
                FinalizerEvent::Cleanup(o) => act(&ctx, &o, true).await,
            }
        })
        .await
        .map_err(|e| Error::Finalizer(Box::new(e))),
        None => act(&ctx, &obj, false).await,
    };
    ctx.metrics
        .duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.backoff.succeed(&key_of(obj.as_ref()));
    }
    result
}

/// Whether the cached `obj` (what triggered the reconcile) is as current as a read from the API
/// server would be for deciding on it. A status this controller wrote may not have reached
/// the cache yet, and deciding on a stale status would repeat its Events and deliveries: the
/// cached copy serves when it is at the resourceVersion this controller's last status write
/// left it at, or when this controller has written no status of it (since it started, or
/// since a write that failed), and when it carries the controller's finalizer (the finalizer
/// helper's own write is not recorded). Otherwise the object is read from the API server.
fn cached_is_current<K, S, R, O>(ctx: &Context<R, O>, obj: &K) -> bool
where
    K: Managed,
    R: Reconcile<Object = K, Status = S>,
{
    current_enough(
        ctx.executor.status_written_at(obj).as_deref(),
        obj.meta(),
        ctx.reconciler.finalizer(),
    )
}

/// [`cached_is_current`] over what it reads: the resourceVersion the controller's last status
/// write left (`None`: it wrote none), the cached metadata and the controller's finalizer.
fn current_enough(written_at: Option<&str>, cached: &ObjectMeta, finalizer: Option<&str>) -> bool {
    let written = written_at.is_none_or(|at| cached.resource_version.as_deref() == Some(at));
    let finalized =
        finalizer.is_none_or(|f| cached.finalizers.iter().flatten().any(|held| held == f));
    written && finalized
}

async fn act<K, S, R, O>(ctx: &Context<R, O>, obj: &K, cleanup: bool) -> Result<Action>
where
    K: Managed,
    S: Serialize + Send + Sync,
    R: Reconcile<Object = K, Status = S> + Send + Sync + 'static,
    O: Observe<Object = K, World = R::World>,
{
    let world = ctx.observer.observe(obj).await?;
    let now = jiff::Timestamp::now();
    let mut plan = if cleanup {
        ctx.reconciler.cleanup(obj, &world, now)
    } else {
        ctx.reconciler.reconcile(obj, &world, now)
    };
    // Notifications go first, so the status written below can say what came of them.
    let notifications = std::mem::take(&mut plan.notifications);
    let deliveries = ctx.executor.deliver(&notifications).await;
    let recorded = deliveries.is_empty()
        || ctx
            .reconciler
            .record_deliveries(obj, &mut plan, &deliveries, jiff::Timestamp::now());
    // Children are re-applied on every reconcile (server-side apply makes that a no-op on
    // the server); only changes worth a line are logged at info.
    if ctx.executor.is_dry_run() {
        // The executor logs what it would do.
    } else if plan.status.is_some()
        || !plan.events.is_empty()
        || !plan.node_ops.is_empty()
        || !plan.evictions.is_empty()
    {
        info!(actions = ?plan.summary(), cleanup, "applying plan");
    } else {
        tracing::debug!(actions = ?plan.summary(), cleanup, "applying plan");
    }
    let outcome = match ctx.executor.apply(obj, &plan).await {
        Ok(outcome) => outcome,
        Err(e) => {
            let why = e.to_string();
            if let Some(status) = ctx
                .reconciler
                .record_failure(obj, &why, jiff::Timestamp::now())
            {
                let mut record: gryvia_reconcile::Plan<S> = gryvia_reconcile::Plan::new();
                record.status = Some(status);
                if let Err(e2) = ctx.executor.apply(obj, &record).await {
                    warn!(error = %e2, "could not record the failure in the status");
                }
            }
            return Err(e);
        }
    };
    let labels = ControllerLabels {
        controller: ctx.reconciler.name().to_owned(),
    };
    for (list, counter) in [
        (&outcome.evicted, &ctx.metrics.evictions),
        (&outcome.blocked_evictions, &ctx.metrics.blocked_evictions),
    ] {
        counter
            .get_or_create(&labels)
            .inc_by(u64::try_from(list.len()).unwrap_or(u64::MAX));
    }
    if !outcome.blocked_evictions.is_empty() {
        info!(pods = ?outcome.blocked_evictions, "evictions blocked by PodDisruptionBudgets; retried on the next reconcile");
    }
    if !recorded {
        crate::webhook::first_failure(&notifications, &deliveries)?;
    }
    Ok(match plan.requeue_after() {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

fn error_policy<K, R, O>(obj: Arc<K>, err: &Error, ctx: Arc<Context<R, O>>) -> Action
where
    K: Resource,
    R: Reconcile,
{
    let labels = ErrorLabels {
        controller: ctx.reconciler.name().to_owned(),
        error: err.metric_label().to_owned(),
    };
    ctx.metrics.errors.get_or_create(&labels).inc();
    // Exponential per object, but never sooner than the error itself asks.
    let delay = ctx
        .backoff
        .fail(&key_of(obj.as_ref()))
        .max(err.requeue_after())
        .max(Duration::from_millis(500))
        .min(MAX_BACKOFF);
    warn!(object = %key_of(obj.as_ref()), error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs `controller` (already configured with `owns` / `watches`) until its streams end.
pub async fn run<K, S, R, O>(controller: Controller<K>, ctx: Arc<Context<R, O>>)
where
    K: Managed,
    K::DynamicType: Eq + Hash + Clone,
    S: Serialize + Send + Sync + 'static,
    R: Reconcile<Object = K, Status = S> + Send + Sync + 'static,
    R::World: Send,
    O: Observe<Object = K, World = R::World>,
{
    controller
        .shutdown_on_signal()
        .run(reconcile_one, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Leader election settings.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Lease name (one per operator).
    pub name: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// Seconds a lease is valid without renewal; a standby takes over after this.
    pub duration_seconds: u64,
    /// Seconds before expiry at which the leader renews.
    pub grace_seconds: u64,
}

/// A set of controllers to run while leading: called each time leadership is acquired.
pub type Controllers = Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// Runs `controllers` only while this replica holds the Lease; without `lease` (leader
/// election disabled) runs them directly. Marks `health` ready once started.
///
/// # Errors
/// [`Error::LeaderElection`] when the Lease cannot be managed.
pub async fn run_leader_elected(
    client: kube::Client,
    lease: Option<LeaseSettings>,
    name: &str,
    metrics: Metrics,
    health: Health,
    controllers: Controllers,
) -> Result<()> {
    let labels = ControllerLabels {
        controller: name.to_owned(),
    };
    let Some(lease) = lease else {
        metrics.leader.get_or_create(&labels).set(1);
        health.set_ready(true);
        controllers().await;
        return Ok(());
    };
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, &lease.name)
        .with_namespace(&lease.namespace)
        .with_identity(&lease.identity)
        .with_duration(lease.duration_seconds)
        .with_grace(lease.grace_seconds)
        .build()
        .await
        .map_err(|e| Error::LeaderElection(e.to_string()))?;
    let (mut is_leader, task) = manager.watch().await;
    health.set_ready(true);
    info!(lease = %lease.name, identity = %lease.identity, "waiting for leadership");
    loop {
        while !*is_leader.borrow_and_update() {
            if is_leader.changed().await.is_err() {
                return lease_task_ended(task).await;
            }
        }
        info!(identity = %lease.identity, "became leader; starting controllers");
        metrics.leader.get_or_create(&labels).set(1);
        let running = tokio::spawn(controllers());
        while *is_leader.borrow_and_update() {
            if is_leader.changed().await.is_err() {
                running.abort();
                return lease_task_ended(task).await;
            }
        }
        warn!(identity = %lease.identity, "lost leadership; stopping controllers");
        metrics.leader.get_or_create(&labels).set(0);
        running.abort();
    }
}

async fn lease_task_ended(
    task: tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>,
) -> Result<()> {
    match task.await {
        Ok(Ok(_)) => Err(Error::LeaderElection("lease manager stopped".to_owned())),
        Ok(Err(e)) => Err(Error::LeaderElection(e.to_string())),
        Err(e) => Err(Error::LeaderElection(format!("lease task: {e}"))),
    }
}

/// A key for [`crate::controllers::changed`] (and kube's `predicate_filter`): changes of the spec (generation), the finalizers or the
/// deletion timestamp pass; status-only updates (the controller's own writes) do not.
pub fn spec_or_lifecycle<K: Resource>(obj: &K) -> Option<u64> {
    use std::hash::Hasher;
    let meta = obj.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    Some(h.finish())
}

/// Maps a child to its cluster-scoped owner of kind `K`, for `Controller::watches`.
///
/// kube's `Controller::owns` builds the owner's reference with the *child's* namespace; for a
/// cluster-scoped owner that reference differs from the one the primary watch produces
/// (namespace `None`), so the same object could be reconciled twice at once. Cluster-scoped
/// owners therefore watch their children through this mapper instead.
pub fn cluster_owner<K, C>(child: &C) -> Option<kube::runtime::reflector::ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
    C: Resource,
{
    let kind = K::kind(&());
    let api_version = K::api_version(&());
    child
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == kind && o.api_version == api_version)
        .map(|o| kube::runtime::reflector::ObjectRef::new(&o.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_object_serves_when_it_is_at_the_last_status_write_and_holds_the_finalizer() {
        let meta = |rv: &str, finalizers: &[&str]| ObjectMeta {
            resource_version: Some(rv.to_owned()),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            ..ObjectMeta::default()
        };
        // No status written by this controller: the cache is as current as it gets.
        assert!(current_enough(None, &meta("5", &[]), None));
        // At the version the last write left: current. Behind it (or moved by another
        // writer): read from the API server.
        assert!(current_enough(Some("7"), &meta("7", &[]), None));
        assert!(!current_enough(Some("7"), &meta("6", &[]), None));
        assert!(!current_enough(Some("7"), &ObjectMeta::default(), None));
        // A controller with a finalizer reads from the API server until the cache shows it.
        assert!(!current_enough(None, &meta("5", &[]), Some("gryvia.io/f")));
        assert!(current_enough(
            None,
            &meta("5", &["gryvia.io/f"]),
            Some("gryvia.io/f")
        ));
        assert!(!current_enough(
            Some("7"),
            &meta("6", &["gryvia.io/f"]),
            Some("gryvia.io/f")
        ));
    }

    #[test]
    fn children_map_to_their_cluster_scoped_owner_without_a_namespace() {
        let rq: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "q", "namespace": "tenant-a", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "other", "uid": "1"},
                {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant", "name": "a", "uid": "2"}
            ]}
        }))
        .unwrap();
        let owner = cluster_owner::<gryvia_types::GryviaTenant, _>(&rq).unwrap();
        assert_eq!(owner, kube::runtime::reflector::ObjectRef::new("a"));
        assert_eq!(owner.namespace, None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets_on_success() {
        let b = Backoff::default();
        let waits: Vec<u64> = (0..12).map(|_| b.fail("a").as_secs()).collect();
        assert_eq!(&waits[..5], &[1, 2, 4, 8, 16]);
        assert_eq!(*waits.last().unwrap(), 300);
        b.succeed("a");
        assert_eq!(b.fail("a").as_secs(), 1);
        assert_eq!(b.fail("b").as_secs(), 1, "objects back off independently");
    }
}
