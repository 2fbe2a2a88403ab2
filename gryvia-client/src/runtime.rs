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
    /// Per object: the newest resourceVersion (a number) a reconcile decided on, and when. A
    /// later reconcile never decides on an older copy (one read from the API server can be
    /// ahead of the cache).
    decided: Mutex<HashMap<String, (u64, Instant)>>,
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
            decided: Mutex::default(),
        }
    }

    fn decided(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Instant)>> {
        self.decided
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    let key = key_of(obj.as_ref());
    let written = ctx.executor.status_written_at(obj.as_ref());
    let decided = ctx.decided().get(&key).copied();
    let known = newest_known(written.as_ref().map(|(v, at)| (v.as_str(), *at)), decided);
    let freshness = current_enough(
        known.as_ref().map(|(v, at)| (v.as_str(), at.elapsed())),
        obj.meta(),
        ctx.reconciler.finalizer(),
    );
    let obj = if freshness == Freshness::Current {
        obj
    } else if let Freshness::Behind { age } = freshness
        && age < CACHE_CATCH_UP
    {
        // Only a version this controller wrote or decided on a moment ago is not in the
        // cache yet (its watch event is on the way): looked at again once it is, rather
        // than read.
        tracing::debug!(?age, "the cache is behind what this controller knows");
        return Ok(Action::requeue(CACHE_RECHECK));
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
    if let Some(v) = obj
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
    {
        let mut decided = ctx.decided();
        if decided.get(&key).is_none_or(|(d, _)| *d < v) {
            decided.insert(key, (v, Instant::now()));
        }
    }
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

/// How long after its own status write a controller waits for the cache to show it before it
/// reads the object from the API server instead.
pub const CACHE_CATCH_UP: Duration = Duration::from_secs(1);

/// How soon an object whose cached copy is behind the controller's own status write is looked
/// at again.
pub const CACHE_RECHECK: Duration = Duration::from_millis(50);

/// Whether the cached object (what triggered the reconcile) is as current as a read from the
/// API server would be for deciding on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freshness {
    /// It serves.
    Current,
    /// It is behind a version this controller wrote or decided on `age` ago.
    Behind { age: Duration },
    /// It lacks the controller's finalizer: read it from the API server.
    Read,
}

/// The newest version of an object this controller knows: the one its last status write left
/// (`written`) or the newest it decided on (`decided`), each with when. A written version that
/// is not a number is the one known (compared for equality only).
fn newest_known(
    written: Option<(&str, Instant)>,
    decided: Option<(u64, Instant)>,
) -> Option<(String, Instant)> {
    match (written, decided) {
        (Some((w, at)), Some((d, when))) => match w.parse::<u64>() {
            Ok(n) if d > n => Some((d.to_string(), when)),
            _ => Some((w.to_owned(), at)),
        },
        (Some((w, at)), None) => Some((w.to_owned(), at)),
        (None, Some((d, when))) => Some((d.to_string(), when)),
        (None, None) => None,
    }
}

/// Whether the cached copy serves. A status this controller wrote may not have reached the
/// cache yet, and deciding on a stale status would repeat its Events and deliveries; nor may a
/// reconcile decide on a copy older than one an earlier reconcile decided on (read from the
/// API server, ahead of the cache). The cached copy serves when it is at or past the newest
/// version of the object this controller knows (`known`, with how long ago: what its last
/// status write left, or the newest it decided on; past it: another writer, say the queue
/// scheduler writing the same object's `status.queue`, wrote after it, and the cache has that),
/// or when it knows none (since it started, or since a write that failed), and when it carries
/// the controller's finalizer (the finalizer helper's own write is not recorded). A copy
/// behind waits for the cache for [`CACHE_CATCH_UP`] (the watch event is on its way), then is
/// read from the API server, as is one without the finalizer.
fn current_enough(
    written: Option<(&str, Duration)>,
    cached: &ObjectMeta,
    finalizer: Option<&str>,
) -> Freshness {
    if !finalizer.is_none_or(|f| cached.finalizers.iter().flatten().any(|held| held == f)) {
        return Freshness::Read;
    }
    match written {
        Some((at, age))
            if !cached
                .resource_version
                .as_deref()
                .is_some_and(|cached| at_or_past(cached, at)) =>
        {
            Freshness::Behind { age }
        }
        _ => Freshness::Current,
    }
}

/// Whether an object at resourceVersion `cached` is at or past `at`, a version the same
/// object had. The versions of one object only grow: with etcd they are its store's revision
/// numbers, which the API server's own watch cache orders by. A version that is not a number
/// is compared for equality only.
fn at_or_past(cached: &str, at: &str) -> bool {
    match (cached.parse::<u64>(), at.parse::<u64>()) {
        (Ok(c), Ok(a)) => c >= a,
        _ => cached == at,
    }
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
    // Notifications and e-mails go first, so the status written below can say what came of
    // them.
    let notifications = std::mem::take(&mut plan.notifications);
    let emails = std::mem::take(&mut plan.emails);
    let mut deliveries = ctx.executor.deliver(&notifications).await;
    let mailed = ctx.executor.send_emails(&emails).await;
    deliveries.extend(mailed.iter().cloned());
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
        crate::webhook::first_mail_failure(&emails, &mailed)?;
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
/// Failures to read or create the Lease are retried (see [`LEASE_RETRY_FIRST`]); a replica
/// stays unready until it has read the Lease once.
///
/// # Errors
/// [`Error::LeaderElection`] when the lease manager's task ends (it retries API errors
/// itself, so only a panic or a closed channel ends it).
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
    let manager = lease_manager(client, &lease).await;
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

/// The first wait after a failed attempt to read or create the Lease; doubled per failure up
/// to [`LEASE_RETRY_MAX`].
pub const LEASE_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between attempts to read or create the Lease.
pub const LEASE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Reads (or creates) the Lease, retrying every failure with a doubling wait, as client-go's
/// leader election does: a 403 while a new RoleBinding reaches the API server's authorizer, a
/// 5xx or a refused connection while the API server restarts, are waited out, logged each
/// time, and never end the process. The watch that follows retries its own errors.
async fn lease_manager(
    client: kube::Client,
    lease: &LeaseSettings,
) -> kube_lease_manager::LeaseManager {
    let mut wait = LEASE_RETRY_FIRST;
    loop {
        let built = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
            .with_namespace(&lease.namespace)
            .with_identity(&lease.identity)
            .with_duration(lease.duration_seconds)
            .with_grace(lease.grace_seconds)
            .build()
            .await;
        match built {
            Ok(manager) => return manager,
            Err(e) => {
                warn!(lease = %lease.name, namespace = %lease.namespace, error = %e,
                      retry_in = ?wait, "cannot read or create the Lease; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(LEASE_RETRY_MAX);
            }
        }
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
    fn the_cached_object_serves_when_it_is_at_or_past_the_last_status_write_and_holds_the_finalizer()
     {
        let meta = |rv: &str, finalizers: &[&str]| ObjectMeta {
            resource_version: Some(rv.to_owned()),
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            ..ObjectMeta::default()
        };
        let age = Duration::from_millis(30);
        let behind = Freshness::Behind { age };
        // No status written by this controller: the cache is as current as it gets.
        assert_eq!(
            current_enough(None, &meta("5", &[]), None),
            Freshness::Current
        );
        // At the version the last write left, or past it (another writer wrote after it):
        // current. Behind it: the write is on its way to the cache.
        let at = |v: &'static str| Some((v, age));
        assert_eq!(
            current_enough(at("7"), &meta("7", &[]), None),
            Freshness::Current
        );
        assert_eq!(
            current_enough(at("7"), &meta("12", &[]), None),
            Freshness::Current
        );
        assert_eq!(current_enough(at("7"), &meta("6", &[]), None), behind);
        assert_eq!(current_enough(at("10"), &meta("9", &[]), None), behind);
        assert_eq!(
            current_enough(at("7"), &ObjectMeta::default(), None),
            behind
        );
        // Versions that are not numbers are only compared for equality.
        assert_eq!(
            current_enough(at("a7"), &meta("a7", &[]), None),
            Freshness::Current
        );
        assert_eq!(current_enough(at("a7"), &meta("b9", &[]), None), behind);
        // A controller with a finalizer reads from the API server until the cache shows it.
        let f = Some("gryvia.io/f");
        assert_eq!(current_enough(None, &meta("5", &[]), f), Freshness::Read);
        assert_eq!(
            current_enough(None, &meta("5", &["gryvia.io/f"]), f),
            Freshness::Current
        );
        assert_eq!(
            current_enough(at("7"), &meta("6", &["gryvia.io/f"]), f),
            behind
        );
    }

    #[test]
    fn the_newest_known_version_is_the_last_write_or_a_newer_one_decided_on() {
        let (w, d) = (Instant::now(), Instant::now());
        assert_eq!(newest_known(None, None), None);
        assert_eq!(newest_known(Some(("7", w)), None), Some(("7".into(), w)));
        assert_eq!(newest_known(None, Some((9, d))), Some(("9".into(), d)));
        // A copy read from the API server, decided on after the write: it is the floor.
        assert_eq!(
            newest_known(Some(("7", w)), Some((9, d))),
            Some(("9".into(), d))
        );
        assert_eq!(
            newest_known(Some(("12", w)), Some((9, d))),
            Some(("12".into(), w))
        );
        // A written version that is not a number is the one known.
        assert_eq!(
            newest_known(Some(("a7", w)), Some((9, d))),
            Some(("a7".into(), w))
        );
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
