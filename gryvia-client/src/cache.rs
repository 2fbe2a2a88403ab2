//! The shared watch caches of one operator: one reflector per kind (and label selector) it
//! reads, shared by all of its observers and controller triggers.
//!
//! Observers read stores instead of listing or getting from the API server on every reconcile.
//! Controllers are triggered by [`Caches::subscribe`] streams of the same reflectors, so when a
//! reconcile runs because an object changed, the store it reads already holds that change.
//!
//! Use is two-phased: while an operator builds its controllers (synchronously), each asks for
//! the stores and subscriptions it needs; then [`Caches::run`] starts one watch per kind and
//! drives it for as long as the controllers run. A store asked for after `run` started is
//! never filled (a programming error, logged).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Events a subscription may fall behind by before its reflector waits for it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// A namespace as the caches hold it: its metadata alone, watched with metadata-only requests
/// (every controller reads a namespace's labels and whether it is being deleted, nothing else).
pub type NamespaceMeta = kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>;

/// A node as a cache that needs only its labels (its GPU product) holds it: its metadata
/// alone, watched with metadata-only requests.
pub type NodeMeta = kube::core::PartialObjectMeta<Node>;

/// How long [`wait_ready`] waits for a store's first listing.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often [`wait_ready`] looks at a store again while it waits.
pub const READY_RECHECK: Duration = Duration::from_millis(100);

type Key = (TypeId, String);

/// The senders of a kind's subscriptions (`Vec<Subscriber<K>>`, type-erased).
type Subscriber<K> = futures::channel::mpsc::Sender<Arc<K>>;

/// Starts a kind's watch with its (type-erased) writer and subscribers.
type Start =
    Box<dyn FnOnce(Box<dyn Any + Send>, Box<dyn Any + Send>) -> BoxFuture<'static, ()> + Send>;

/// The resourceVersion of the cached object of a namespace (or none) and name.
type Version = Box<dyn Fn(Option<&str>, &str) -> Option<String> + Send>;

struct Entry {
    /// `Store<K>`, for more readers.
    store: Box<dyn Any + Send>,
    /// `apiVersion` and `kind` of `K`.
    kind: (String, String),
    /// Reads what an apply of a cached object is remembered against
    /// ([`crate::apply::applied_version`]).
    version: Version,
    /// `Writer<K>` until the watch starts.
    writer: Option<Box<dyn Any + Send>>,
    /// `Vec<Subscriber<K>>` until the watch starts.
    subscribers: Option<Box<dyn Any + Send>>,
    /// Starts the watch with the writer and the subscribers taken out of this entry.
    start: Option<Start>,
}

/// One operator's watch caches for one leadership term (cheap to clone: shared).
#[derive(Clone)]
pub struct Caches {
    client: kube::Client,
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
}

impl Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caches").finish_non_exhaustive()
    }
}

/// A kind the caches can hold.
pub trait Cacheable:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

/// Sends `obj` to every subscriber, waiting for each that is `SUBSCRIBER_BUFFER` behind (a
/// subscription dropped is forgotten).
async fn fan_out<K>(subscribers: &mut Vec<Subscriber<K>>, obj: &Arc<K>) {
    use futures::SinkExt;
    let mut gone = false;
    for s in subscribers.iter_mut() {
        gone |= s.send(obj.clone()).await.is_err();
    }
    if gone {
        subscribers.retain(|s| !s.is_closed());
    }
}

/// Drops what no Gryvia controller reads from a cached object, so a fleet's caches stay
/// small: managed fields and the last-applied annotation of every object; of a whole pod (the
/// AI job controller's cache of its jobs' pods; every other cache of pods holds
/// [`gryvia_types::CachedPod`]s, which never hold more), its volumes and, per container, its
/// environment, mounts, command, arguments, probes and lifecycle hooks (placement, resources,
/// owners, labels and the whole status stay); of a node, the list of images it holds and of
/// volumes attached (often most of a real node's status).
fn trim<K: Cacheable>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(node) = (obj as &mut dyn Any).downcast_mut::<Node>()
        && let Some(status) = node.status.as_mut()
    {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        return;
    }
    if let Some(pod) = (obj as &mut dyn Any).downcast_mut::<Pod>()
        && let Some(spec) = pod.spec.as_mut()
    {
        spec.volumes = None;
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.env = None;
            c.env_from = None;
            c.volume_mounts = None;
            c.volume_devices = None;
            c.command = None;
            c.args = None;
            c.liveness_probe = None;
            c.readiness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
            c.ports = None;
            c.security_context = None;
            c.resize_policy = None;
            c.termination_message_path = None;
            c.termination_message_policy = None;
            c.image_pull_policy = None;
            c.working_dir = None;
        }
        spec.security_context = None;
        spec.affinity = None;
        spec.dns_config = None;
        spec.host_aliases = None;
        spec.readiness_gates = None;
        spec.topology_spread_constraints = None;
        spec.scheduling_gates = None;
        spec.overhead = None;
        if let Some(status) = pod.status.as_mut() {
            status.host_ip = None;
            status.host_ips = None;
            status.pod_ip = None;
            status.pod_ips = None;
            status.qos_class = None;
            for c in status
                .container_statuses
                .iter_mut()
                .flatten()
                .chain(status.init_container_statuses.iter_mut().flatten())
            {
                c.image = String::new();
                c.image_id = String::new();
                c.container_id = None;
                c.allocated_resources = None;
                c.resources = None;
                c.volume_mounts = None;
                c.user = None;
            }
        }
    }
}

/// Keeps `writer`'s store in step with a watch of `api` and hands every object added or
/// changed (and, after each full listing, every object) to `subscribers` once the store holds
/// it. kube's shared reflector is not used: its subscription stream stalls for good when an
/// object is deleted before the subscriber reads it (it returns `Pending` without a waker),
/// and then the whole cache stops, which a burst of deletions makes happen.
async fn reflect<K: Cacheable>(
    api: Api<K>,
    config: watcher::Config,
    writer: reflector::store::Writer<K>,
    mut subscribers: Vec<Subscriber<K>>,
) {
    let store = writer.as_reader();
    let size = crate::metrics::cache_objects()
        .get_or_create(&crate::metrics::CacheLabels {
            kind: K::kind(&()).into_owned(),
            selector: config.label_selector.clone().unwrap_or_default(),
        })
        .clone();
    let events = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        size.set(i64::try_from(store.len()).unwrap_or(i64::MAX));
        match event {
            Ok(watcher::Event::Apply(obj)) if !subscribers.is_empty() => {
                let obj = store
                    .get(&reflector::ObjectRef::from_obj(&obj))
                    .unwrap_or_else(|| Arc::new(obj));
                fan_out(&mut subscribers, &obj).await;
            }
            Ok(watcher::Event::InitDone) if !subscribers.is_empty() => {
                for obj in store.state() {
                    fan_out(&mut subscribers, &obj).await;
                }
            }
            Ok(_) => {}
            // The watcher retries with backoff; a forbidden watch would otherwise leave a
            // stale cache without a word.
            Err(e) => tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying"),
        }
    }
}

impl Caches {
    /// Empty caches reading through `client`.
    pub fn new(client: kube::Client) -> Self {
        Caches {
            client,
            entries: Arc::default(),
        }
    }

    /// The client the caches (and the controllers using them) talk through.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn entry<K: Cacheable>(&self, labels: &str) -> Key {
        let key = (TypeId::of::<K>(), labels.to_owned());
        let mut entries = self.entries();
        entries.entry(key.clone()).or_insert_with(|| {
            let (store, writer) = reflector::store::<K>();
            let api: Api<K> = Api::all(self.client.clone());
            let config = if labels.is_empty() {
                watcher::Config::default()
            } else {
                watcher::Config::default().labels(labels)
            };
            let start = move |writer: Box<dyn Any + Send>,
                              subscribers: Box<dyn Any + Send>|
                  -> BoxFuture<'static, ()> {
                let (Ok(writer), Ok(subscribers)) = (
                    writer.downcast::<reflector::store::Writer<K>>(),
                    subscribers.downcast::<Vec<Subscriber<K>>>(),
                ) else {
                    return futures::future::ready(()).boxed();
                };
                reflect(api, config, *writer, *subscribers).boxed()
            };
            let reader = store.clone();
            let version: Version = Box::new(move |namespace, name| {
                let mut r = reflector::ObjectRef::<K>::new(name);
                r.namespace = namespace.map(str::to_owned);
                crate::apply::applied_version(reader.get(&r)?.meta())
            });
            Entry {
                store: Box::new(store),
                kind: (K::api_version(&()).into_owned(), K::kind(&()).into_owned()),
                version,
                writer: Some(Box::new(writer)),
                subscribers: Some(Box::new(Vec::<Subscriber<K>>::new())),
                start: Some(Box::new(start)),
            }
        });
        key
    }

    /// The store of every `K` in the cluster.
    pub fn store<K: Cacheable>(&self) -> Store<K> {
        self.store_labelled("")
    }

    /// The store of the `K`s matching the label selector `labels` (empty: all).
    pub fn store_labelled<K: Cacheable>(&self, labels: &str) -> Store<K> {
        let key = self.entry::<K>(labels);
        let entries = self.entries();
        entries
            .get(&key)
            .and_then(|e| e.store.downcast_ref::<Store<K>>())
            .cloned()
            .unwrap_or_else(|| reflector::store::<K>().0)
    }

    /// A stream of every `K` as it is added or changes (after its store holds the change),
    /// for controller triggers. Every subscription must be polled.
    pub fn subscribe<K: Cacheable>(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        self.subscribe_labelled("")
    }

    /// Like [`Caches::subscribe`], for the `K`s matching the label selector `labels`.
    pub fn subscribe_labelled<K: Cacheable>(
        &self,
        labels: &str,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let key = self.entry::<K>(labels);
        let mut entries = self.entries();
        let (tx, rx) = futures::channel::mpsc::channel::<Arc<K>>(SUBSCRIBER_BUFFER);
        let registered = entries
            .get_mut(&key)
            .and_then(|e| e.subscribers.as_mut()?.downcast_mut::<Vec<Subscriber<K>>>())
            .map(|subscribers| subscribers.push(tx))
            .is_some();
        if !registered {
            tracing::error!(
                kind = %K::kind(&()),
                "subscribed to a cache after it started: this subscription never fires"
            );
        }
        rx
    }

    /// The object `namespace`/`name` of kind `K` as the (unfiltered) cache of `K` holds it;
    /// `None` when it holds none or no such cache is kept (none is made).
    pub fn cached<K: Cacheable>(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let entries = self.entries();
        let store = entries
            .get(&(TypeId::of::<K>(), String::new()))?
            .store
            .downcast_ref::<Store<K>>()?;
        let mut r = reflector::ObjectRef::<K>::new(name);
        r.namespace = namespace.map(str::to_owned);
        store.get(&r)
    }

    /// What an apply of the object `apiVersion`/`kind` `namespace`/`name`, as a cache of its
    /// kind holds it, is remembered against ([`crate::apply::applied_version`]); `None` when
    /// no cache holds it (or none of its kind is kept).
    pub fn applied_version(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<String> {
        self.entries()
            .values()
            .filter(|e| e.kind.0 == api_version && e.kind.1 == kind)
            .find_map(|e| (e.version)(namespace, name))
    }

    /// Runs every watch asked for so far until the returned future is dropped.
    pub fn run(&self) -> BoxFuture<'static, ()> {
        let mut drivers: Vec<BoxFuture<'static, ()>> = Vec::new();
        {
            let mut entries = self.entries();
            for entry in entries.values_mut() {
                let (Some(writer), Some(subscribers), Some(start)) = (
                    entry.writer.take(),
                    entry.subscribers.take(),
                    entry.start.take(),
                ) else {
                    continue;
                };
                drivers.push(start(writer, subscribers));
            }
        }
        futures::future::join_all(drivers).map(|_| ()).boxed()
    }
}

/// Why a store has no first listing yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Not within the time given.
    TimedOut,
    /// Its watch stopped (the writer was dropped) before it listed.
    Stopped,
}

/// Waits until `store` holds its first full listing, at most until `deadline`.
///
/// kube's `Store::wait_until_ready` wakes one waiter only: its readiness is a oneshot
/// receiver, which keeps the waker of the last task that polled it. With several controllers
/// (and kube's own controller runner) waiting on one store, the others would sleep until
/// their timeouts fired (30 s seen at an operator's start). So each wait here looks again
/// every [`READY_RECHECK`]: once any poll has seen the listing, every later one does.
///
/// # Errors
/// [`NotReady`] when the deadline passes or the watch stopped first.
pub async fn ready_by<K>(store: &Store<K>, deadline: tokio::time::Instant) -> Result<(), NotReady>
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        let now = tokio::time::Instant::now();
        let step = deadline.saturating_duration_since(now).min(READY_RECHECK);
        match tokio::time::timeout(step, store.wait_until_ready()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(_)) => return Err(NotReady::Stopped),
            Err(_) if tokio::time::Instant::now() >= deadline => return Err(NotReady::TimedOut),
            Err(_) => {}
        }
    }
}

/// Waits until `store` holds its first full listing (see [`ready_by`]).
///
/// # Errors
/// [`Error::Timeout`] naming `what` after [`READY_TIMEOUT`], or at once when its watch
/// stopped.
pub async fn wait_ready<K>(store: &Store<K>, what: &str) -> Result<()>
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    ready_by(store, tokio::time::Instant::now() + READY_TIMEOUT)
        .await
        .map_err(|why| Error::Timeout {
            what: match why {
                NotReady::TimedOut => format!("the {what} cache to fill"),
                NotReady::Stopped => format!("the {what} cache to fill (its watch stopped)"),
            },
            after: READY_TIMEOUT,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::GryviaAIJob;

    #[test]
    fn a_cached_pod_keeps_placement_resources_and_status_and_loses_what_nobody_reads() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml", "labels": {"a": "b"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "me"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "nodeName": "n1",
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [{"name": "c", "image": "i", "env": [{"name": "X", "value": "1"}],
                                "command": ["run"], "args": ["--x"], "volumeMounts": [{"name": "v", "mountPath": "/v"}],
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
                       "podIP": "10.0.0.1", "hostIP": "10.1.0.1", "qosClass": "BestEffort",
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "sha256:x",
                           "ready": false, "restartCount": 2,
                           "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]},
        }))
        .expect("a valid pod");
        trim(&mut pod);
        assert!(pod.metadata.managed_fields.is_none());
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), vec!["keep"]);
        let spec = pod.spec.clone().unwrap_or_default();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.volumes.is_none());
        let c = &spec.containers[0];
        assert!(
            c.env.is_none() && c.command.is_none() && c.args.is_none() && c.volume_mounts.is_none()
        );
        assert!(c.resources.as_ref().is_some_and(|r| r.limits.is_some()));
        let status = pod.status.unwrap_or_default();
        assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
        assert!(status.pod_ip.is_none() && status.host_ip.is_none() && status.qos_class.is_none());
        // What a failure is classified by stays: the state, the exit code, the restarts.
        let cs = &status.container_statuses.unwrap_or_default()[0];
        assert!(cs.image_id.is_empty());
        assert_eq!(cs.restart_count, 2);
        let terminated = cs.state.as_ref().and_then(|s| s.terminated.as_ref());
        assert_eq!(terminated.map(|t| t.exit_code), Some(137));
    }

    #[test]
    fn a_cached_node_loses_its_image_list_and_other_kinds_only_managed_fields() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"images": [{"names": ["i"], "sizeBytes": 1}], "allocatable": {"nvidia.com/gpu": "8"}},
        }))
        .expect("a valid node");
        trim(&mut node);
        let status = node.status.clone().unwrap_or_default();
        assert!(status.images.is_none());
        assert!(status.allocatable.is_some());
        assert!(node.spec.and_then(|s| s.taints).is_some());
        let mut job: GryviaAIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": "j", "namespace": "ml", "managedFields": [{"manager": "x"}]},
            "spec": {"image": "i", "gpus": 1, "env": [{"name": "X", "value": "1"}]},
        }))
        .expect("a valid job");
        trim(&mut job);
        assert!(job.metadata.managed_fields.is_none());
        assert_eq!(job.spec.env.len(), 1, "a job's own spec is read: kept");
    }

    /// kube's `Store::wait_until_ready` keeps one waker (a oneshot receiver's): of several
    /// tasks waiting on one store, only the last to poll is woken when the listing lands.
    /// Every waiter here must be done soon after, not when its timeout fires. (Paused time:
    /// the clock read is tokio's, which only moves when every task waits on a timer.)
    #[tokio::test(start_paused = true)]
    async fn every_task_waiting_for_a_store_is_woken_when_its_listing_lands() {
        let (store, mut writer) = reflector::store::<k8s_openapi::api::core::v1::Namespace>();
        let started = tokio::time::Instant::now();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    wait_ready(&store, "Namespace").await.unwrap();
                    started.elapsed()
                })
            })
            .collect();
        // Let every waiter poll (and register its waker) before the listing lands.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for w in waiters {
            let waited = w.await.unwrap();
            assert!(
                waited <= READY_RECHECK,
                "a waiter was woken {waited:?} after the listing, not within {READY_RECHECK:?}"
            );
        }
    }
}
