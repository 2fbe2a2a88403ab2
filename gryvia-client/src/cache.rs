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
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use crate::{Error, Result};

/// Events a subscription may fall behind by before its reflector waits for it.
const SUBSCRIBER_BUFFER: usize = 1024;

/// How long [`wait_ready`] waits for a store's first listing.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

type Key = (TypeId, String);

/// Starts a kind's watch with its (type-erased) writer; `true`: also drain a subscription.
type Start = Box<dyn FnOnce(Box<dyn Any + Send>, bool) -> BoxFuture<'static, ()> + Send>;

struct Entry {
    /// `Store<K>`, for more readers.
    store: Box<dyn Any + Send>,
    /// `Writer<K>` until the watch starts.
    writer: Option<Box<dyn Any + Send>>,
    /// Starts the watch with the writer taken out of `writer`; with `true`, also drains a
    /// subscription of its own (a kind nobody subscribed to).
    start: Option<Start>,
    subscribers: usize,
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
            let (store, writer) = reflector::store_shared::<K>(SUBSCRIBER_BUFFER);
            let api: Api<K> = Api::all(self.client.clone());
            let config = if labels.is_empty() {
                watcher::Config::default()
            } else {
                watcher::Config::default().labels(labels)
            };
            let start = move |writer: Box<dyn Any + Send>, drain: bool| -> BoxFuture<'static, ()> {
                let Ok(writer) = writer.downcast::<reflector::store::Writer<K>>() else {
                    return futures::future::ready(()).boxed();
                };
                // A shared reflector waits for its slowest subscriber, and buffers for
                // subscribers to come when it has none: one that reads and discards keeps a
                // kind nobody subscribed to flowing.
                let drained = match writer.subscribe().filter(|_| drain) {
                    Some(handle) => handle.for_each(|_| futures::future::ready(())).boxed(),
                    None => futures::future::ready(()).boxed(),
                };
                let watch = watcher(api, config)
                    .default_backoff()
                    // Nobody reads managed fields; they are a large part of every object.
                    .modify(|o| o.meta_mut().managed_fields = None)
                    .reflect_shared(*writer)
                    .for_each(|event| {
                        // The watcher retries with backoff; a forbidden watch would otherwise
                        // leave a stale cache without a word.
                        if let Err(e) = event {
                            tracing::warn!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
                        }
                        futures::future::ready(())
                    });
                futures::future::join(watch, drained).map(|_| ()).boxed()
            };
            Entry {
                store: Box::new(store),
                writer: Some(Box::new(writer)),
                start: Some(Box::new(start)),
                subscribers: 0,
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
        let handle: Option<ReflectHandle<K>> = entries.get_mut(&key).and_then(|e| {
            let writer = e
                .writer
                .as_ref()?
                .downcast_ref::<reflector::store::Writer<K>>()?;
            let handle = writer.subscribe()?;
            e.subscribers += 1;
            Some(handle)
        });
        if handle.is_none() {
            tracing::error!(
                kind = %K::kind(&()),
                "subscribed to a cache after it started: this subscription never fires"
            );
        }
        futures::stream::iter(handle).flatten()
    }

    /// Runs every watch asked for so far until the returned future is dropped.
    pub fn run(&self) -> BoxFuture<'static, ()> {
        let mut drivers: Vec<BoxFuture<'static, ()>> = Vec::new();
        {
            let mut entries = self.entries();
            for entry in entries.values_mut() {
                let (Some(writer), Some(start)) = (entry.writer.take(), entry.start.take()) else {
                    continue;
                };
                drivers.push(start(writer, entry.subscribers == 0));
            }
        }
        futures::future::join_all(drivers).map(|_| ()).boxed()
    }
}

/// Waits until `store` holds its first full listing.
///
/// # Errors
/// [`Error::Timeout`] naming `what` after [`READY_TIMEOUT`].
pub async fn wait_ready<K>(store: &Store<K>, what: &str) -> Result<()>
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    tokio::time::timeout(READY_TIMEOUT, store.wait_until_ready())
        .await
        .map_err(|_| Error::Timeout {
            what: format!("the {what} cache to fill"),
            after: READY_TIMEOUT,
        })?
        .map_err(|_| Error::Timeout {
            what: format!("the {what} cache to fill (its watch stopped)"),
            after: READY_TIMEOUT,
        })
}
