//! Objects of any kind, addressed by `apiVersion` and `kind`: the generic client under the
//! SDKs (the Python `gryvia.Client` is a thin layer over it).
//!
//! Kinds are resolved once through API discovery (so Gryvia kinds and built-in kinds work the
//! same, namespaced or cluster-scoped) and cached per client. Objects travel as JSON values;
//! typing them is the caller's business (`gryvia_types::crds::typed_value` for Gryvia kinds).
//! Lists and watches hand out each object as the server's JSON text, cut out of the body while
//! it streams in ([`crate::list_stream`]), for callers that decode it their own way (the
//! Python SDK). A watch reports the events a user expects ([`Known`]): `Added` for an object
//! first seen, `Modified` when its resourceVersion changed, `Deleted` when it is gone,
//! including objects that disappeared while the watch had lost its place.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde_json::Value;
use tokio::sync::mpsc;

pub use crate::list_stream::ListRest;
use crate::list_stream::Splitter;
use crate::{Error, Result, api_err};

/// Field manager of server-side applies made through this module unless the caller names one.
pub const FIELD_MANAGER: &str = "gryvia-sdk";

/// A kind the cluster serves.
#[derive(Clone, Debug)]
pub struct Kind {
    /// Group, version, kind and plural.
    pub resource: ApiResource,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
}

/// What happened to an object in a watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// First seen (in the initial list or later).
    Added,
    /// Changed: a new resourceVersion of a known object.
    Modified,
    /// Deleted, or found missing when the watch re-listed.
    Deleted,
}

impl EventType {
    /// `ADDED`, `MODIFIED` or `DELETED`, as the Kubernetes watch API spells them.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Splits `apiVersion` into group and version (`v1` is the core group).
pub fn group_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// What a watch knows of each object, so that it reports what a user expects from what the
/// server sends: `Added` for an object first seen, `Modified` for a new resourceVersion of a
/// known one, `Deleted` when it is gone, including objects that disappeared while the watch
/// was re-listing. Pure: tested without a cluster.
#[derive(Debug, Default)]
pub struct Known {
    /// uid -> (resourceVersion, the object as last seen).
    objects: HashMap<String, (String, Arc<str>)>,
    /// Uids seen since the current list began (`Some` while one is under way).
    listing: Option<HashSet<String>>,
}

impl Known {
    /// A list of every object begins.
    pub fn begin_list(&mut self) {
        self.listing = Some(HashSet::new());
    }

    /// One object of the list under way: the event it stands for, if any.
    pub fn listed(&mut self, meta: &Meta, object: &Arc<str>) -> Option<EventType> {
        if let Some(seen) = &mut self.listing {
            seen.insert(meta.key());
        }
        self.apply(meta, object)
    }

    /// The list is whole: every known object it did not have is deleted.
    pub fn end_list(&mut self) -> Vec<(EventType, Arc<str>)> {
        let Some(seen) = self.listing.take() else {
            return Vec::new();
        };
        let gone: Vec<String> = self
            .objects
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|k| self.objects.remove(&k))
            .map(|(_, obj)| (EventType::Deleted, obj))
            .collect()
    }

    /// One event of the watch that follows a list: `deleted` when the server said `DELETED`.
    /// A deletion of an object never reported is not reported either.
    pub fn event(&mut self, deleted: bool, meta: &Meta, object: &Arc<str>) -> Option<EventType> {
        if deleted {
            return self.objects.remove(&meta.key()).map(|_| EventType::Deleted);
        }
        self.apply(meta, object)
    }

    fn apply(&mut self, meta: &Meta, object: &Arc<str>) -> Option<EventType> {
        let key = meta.key();
        let kind = match self.objects.get(&key) {
            None => EventType::Added,
            Some((rv, _)) if *rv == meta.resource_version => return None,
            Some(_) => EventType::Modified,
        };
        self.objects
            .insert(key, (meta.resource_version.clone(), object.clone()));
        Some(kind)
    }
}

/// The identity of an object in a watch, read from its JSON.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    pub namespace: String,
}

impl Meta {
    /// The `metadata` of an object's JSON (all empty when it has none).
    ///
    /// # Errors
    /// When the text is not a JSON object.
    ///
    /// Read up to the end of `metadata` only (the members before it skipped), not through the
    /// spec and status after it.
    pub fn of(json: &str) -> serde_json::Result<Meta> {
        use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};

        /// Whether a key is `metadata` (escapes decoded).
        struct IsMetadata;
        impl Visitor<'_> for IsMetadata {
            type Value = bool;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, key: &str) -> std::result::Result<bool, E> {
                Ok(key == "metadata")
            }
        }
        impl<'de> DeserializeSeed<'de> for IsMetadata {
            type Value = bool;
            fn deserialize<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> std::result::Result<bool, D::Error> {
                d.deserialize_str(self)
            }
        }

        /// The object's `metadata` into `found`; an error (not passed on) ends the read there.
        struct Find<'a>(&'a mut Option<Meta>);
        const FOUND: &str = "metadata found";
        impl<'de> Visitor<'de> for Find<'_> {
            type Value = ();
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
                while let Some(is_metadata) = map.next_key_seed(IsMetadata)? {
                    if is_metadata {
                        *self.0 = Some(map.next_value()?);
                        return Err(A::Error::custom(FOUND));
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(())
            }
        }

        let mut found = None;
        let mut de = serde_json::Deserializer::from_str(json);
        let read = serde::Deserializer::deserialize_map(&mut de, Find(&mut found));
        match (found, read) {
            (Some(meta), _) => Ok(meta),
            (None, Ok(())) => de.end().map(|()| Meta::default()),
            (None, Err(e)) => Err(e),
        }
    }

    /// The uid; objects without one (never from a real server) by namespace and name.
    fn key(&self) -> String {
        if self.uid.is_empty() {
            format!("{}/{}", self.namespace, self.name)
        } else {
            self.uid.clone()
        }
    }
}

/// Seconds a watch request asks the server to keep it open before it reconnects.
const WATCH_SECONDS: u32 = 290;
/// Parts of a streamed list (or events of a watch) read ahead of the caller.
const READ_AHEAD: usize = 64;
/// The longest wait between tries of a watch that fails.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// One part of a list as it streams in.
#[derive(Debug)]
pub enum ListPart {
    /// The items completed by the last bytes, each its JSON text as the server sent it
    /// (items of a built-in kind without `apiVersion` and `kind`).
    Items(Vec<String>),
    /// The end of the list, with what it said besides its items.
    End(ListRest),
}

/// A change seen by a watch, with the object as the server sent it (a listed object of a
/// built-in kind without `apiVersion` and `kind`).
pub type RawEvent = (EventType, Arc<str>);

/// The events of a watch, read ahead by a task that ends when this is dropped.
pub struct RawWatch {
    events: mpsc::Receiver<Result<RawEvent>>,
    /// An error found by [`RawWatch::next_before`], kept for the next [`RawWatch::next`].
    held: Option<Error>,
    task: tokio::task::AbortHandle,
}

impl RawWatch {
    /// The next event or error (waiting for it); `None` only if the reading task ended.
    pub async fn next(&mut self) -> Option<Result<RawEvent>> {
        if let Some(e) = self.held.take() {
            return Some(Err(e));
        }
        self.events.recv().await
    }

    /// The next event if one comes before `deadline` (one that has arrived already is taken
    /// even after it); an error that comes is kept for the next [`RawWatch::next`].
    pub async fn next_before(&mut self, deadline: tokio::time::Instant) -> Option<RawEvent> {
        if self.held.is_some() {
            return None;
        }
        match tokio::time::timeout_at(deadline, self.events.recv()).await {
            Ok(Some(Ok(event))) => Some(event),
            Ok(Some(Err(e))) => {
                self.held = Some(e);
                None
            }
            Ok(None) | Err(_) => None,
        }
    }
}

impl Drop for RawWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl fmt::Debug for RawWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawWatch").finish_non_exhaustive()
    }
}

/// A client for objects of any kind.
pub struct Resources {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Kind>>,
}

impl Resources {
    /// Wraps a client.
    pub fn new(client: kube::Client) -> Self {
        Resources {
            client,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// The underlying client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The namespace of the kubeconfig's context (`default` when it names none).
    pub fn default_namespace(&self) -> &str {
        self.client.default_namespace()
    }

    /// Resolves a kind through discovery (cached).
    ///
    /// # Errors
    /// [`Error::Invalid`] when the cluster does not serve the kind; [`Error::Api`] when
    /// discovery fails.
    pub async fn kind(&self, api_version: &str, kind: &str) -> Result<Kind> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(k) = self.cached(&key) {
            return Ok(k);
        }
        let (group, version) = group_version(api_version);
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| match e {
                kube::Error::Api(s) if s.code == 404 => Error::Invalid(format!(
                    "kind: the cluster does not serve {kind} in {api_version} (are the CRDs installed?)"
                )),
                kube::Error::Discovery(d) => Error::Invalid(format!(
                    "kind: the cluster does not serve {kind} in {api_version}: {d}"
                )),
                other => Error::Api {
                    operation: format!("discover {kind} in {api_version}"),
                    source: other,
                },
            })?;
        let k = Kind {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        if let Ok(mut m) = self.kinds.lock() {
            m.insert(key, k.clone());
        }
        Ok(k)
    }

    fn cached(&self, key: &(String, String)) -> Option<Kind> {
        self.kinds.lock().ok().and_then(|m| m.get(key).cloned())
    }

    /// The Api for a kind in `namespace`; a namespaced kind without one uses the context's
    /// namespace when `all` is false and every namespace when it is true.
    async fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        all: bool,
    ) -> Result<(Api<DynamicObject>, Kind)> {
        let k = self.kind(api_version, kind).await?;
        let api = if !k.namespaced {
            Api::all_with(self.client.clone(), &k.resource)
        } else {
            match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, &k.resource),
                None if all => Api::all_with(self.client.clone(), &k.resource),
                None => Api::default_namespaced_with(self.client.clone(), &k.resource),
            }
        };
        Ok((api, k))
    }

    /// Reads one object.
    ///
    /// # Errors
    /// [`Error::Api`] (404 when it does not exist) or a discovery error.
    pub async fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        let (api, k) = self.api(api_version, kind, namespace, false).await?;
        let obj = api
            .get(name)
            .await
            .map_err(api_err(format!("read {kind} {name}")))?;
        to_value(obj, &k.resource)
    }

    /// The URL path of a kind's objects in `namespace`, or in every namespace without one.
    fn collection(k: &Kind, namespace: Option<&str>) -> kube::core::Request {
        let ns = if k.namespaced { namespace } else { None };
        kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(&k.resource, ns))
    }

    /// A list, in one namespace or (without one) in all of them, cut into its items while the
    /// body streams in (a task reads ahead of the caller): for callers that decode each item
    /// themselves, the first ones while the server still sends the last.
    ///
    /// # Errors
    /// [`Error::Api`] when the list is refused, or a discovery error; an error on the receiver
    /// when the body breaks off or is not a list.
    pub async fn list_stream(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<(Kind, mpsc::Receiver<Result<ListPart>>)> {
        let k = self.kind(api_version, kind).await?;
        let mut lp = ListParams::default();
        if let Some(sel) = label_selector {
            lp = lp.labels(sel);
        }
        let what = format!("list {kind}");
        let body = open_list(&self.client, &Self::collection(&k, namespace), &lp, &what).await?;
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        tokio::spawn(async move {
            let mut body = body;
            let mut split = Splitter::default();
            loop {
                let mut items = Vec::new();
                match read_items(&mut body, &mut split, &mut items, &what).await {
                    Ok(more) => {
                        if !items.is_empty() && tx.send(Ok(ListPart::Items(items))).await.is_err() {
                            return;
                        }
                        if !more {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
            let end = split
                .finish()
                .map(ListPart::End)
                .map_err(|e| Error::Invalid(format!("{what}: {e}")));
            let _ = tx.send(end).await;
        });
        Ok((k, rx))
    }

    fn identity(obj: &Value) -> Result<(String, String, Option<String>, String)> {
        let field = |p: &str, name: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| Error::Invalid(format!("{name}: required")))
        };
        Ok((
            field("/apiVersion", "apiVersion")?,
            field("/kind", "kind")?,
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            field("/metadata/name", "metadata.name")?,
        ))
    }

    /// Creates an object (its namespace, or the context's, for a namespaced kind).
    ///
    /// # Errors
    /// [`Error::Invalid`] without `apiVersion`, `kind` or `metadata.name`; [`Error::Api`]
    /// when the server refuses it (409 when it exists).
    pub async fn create(&self, obj: &Value) -> Result<Value> {
        let (api_version, kind, namespace, name) = Self::identity(obj)?;
        let (api, k) = self
            .api(&api_version, &kind, namespace.as_deref(), false)
            .await?;
        let dynamic: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(|source| Error::Serialize {
                what: format!("{kind} {name}"),
                source,
            })?;
        let created = api
            .create(
                &PostParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..Default::default()
                },
                &dynamic,
            )
            .await
            .map_err(api_err(format!("create {kind} {name}")))?;
        to_value(created, &k.resource)
    }

    /// Server-side applies an object as `field_manager`; `force` takes fields over from
    /// other managers.
    ///
    /// # Errors
    /// As [`Resources::create`]; 409 when another manager owns a field and `force` is off.
    pub async fn apply(&self, obj: &Value, field_manager: &str, force: bool) -> Result<Value> {
        let (api_version, kind, namespace, name) = Self::identity(obj)?;
        let (api, k) = self
            .api(&api_version, &kind, namespace.as_deref(), false)
            .await?;
        let mut params = PatchParams::apply(field_manager);
        params.force = force;
        let applied = api
            .patch(&name, &params, &Patch::Apply(obj))
            .await
            .map_err(api_err(format!("apply {kind} {name}")))?;
        to_value(applied, &k.resource)
    }

    /// Deletes an object (background propagation); `false` when it did not exist.
    ///
    /// # Errors
    /// [`Error::Api`] when the delete fails for another reason.
    pub async fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool> {
        let (api, _) = self.api(api_version, kind, namespace, false).await?;
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(Error::Api {
                operation: format!("delete {kind} {name}"),
                source: e,
            }),
        }
    }

    /// Watches a kind, in one namespace or (without one) in all of them: every object as
    /// `Added` first (a list, decoded as it streams in), then every change, reconnecting by
    /// itself from the last resourceVersion seen; when the server has forgotten it (410), a new
    /// list reports only what changed meanwhile, deletions included ([`Known`]). A task reads
    /// ahead of the caller; an error is handed out once and the watch tries again (waiting up to
    /// 30 s between tries).
    ///
    /// # Errors
    /// A discovery error.
    pub async fn watch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<RawWatch> {
        let k = self.kind(api_version, kind).await?;
        let (tx, events) = mpsc::channel(READ_AHEAD * 16);
        let follower = Follower {
            client: self.client.clone(),
            request: Self::collection(&k, namespace),
            label_selector: label_selector.map(str::to_owned),
            what: format!("watch {kind}"),
            known: Known::default(),
            tx,
        };
        let task = tokio::spawn(follower.run()).abort_handle();
        Ok(RawWatch {
            events,
            held: None,
            task,
        })
    }
}

/// The body of a list request, as it streams in.
type Body = std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>>;

async fn open_list(
    client: &kube::Client,
    request: &kube::core::Request,
    lp: &ListParams,
    what: &str,
) -> Result<Body> {
    let req = request
        .list(lp)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    let body = client
        .request_stream(req)
        .await
        .map_err(api_err(what.to_owned()))?;
    Ok(Box::pin(body))
}

/// Reads the next bytes of a list body into `items`: false at its end.
async fn read_items(
    body: &mut Body,
    split: &mut Splitter,
    items: &mut Vec<String>,
    what: &str,
) -> Result<bool> {
    use futures::AsyncBufReadExt;
    let chunk = body.fill_buf().await.map_err(|e| Error::Api {
        operation: what.to_owned(),
        source: kube::Error::ReadEvents(e),
    })?;
    if chunk.is_empty() {
        return Ok(false);
    }
    let n = chunk.len();
    split
        .push(chunk, items)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    body.as_mut().consume(n);
    Ok(true)
}

/// How following a watch ended.
enum Followed {
    /// The connection ended: go on from this resourceVersion.
    Resume(String),
    /// The server no longer has the resourceVersion (410): list again.
    Expired,
    /// The request failed (after events up to this resourceVersion).
    Failed(Error, String),
    /// Nobody reads the events any more.
    Closed,
}

/// The task behind a [`RawWatch`].
struct Follower {
    client: kube::Client,
    request: kube::core::Request,
    label_selector: Option<String>,
    what: String,
    known: Known,
    tx: mpsc::Sender<Result<RawEvent>>,
}

/// The first wait before a failed watch tries again.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

impl Follower {
    /// Follows the kind until nobody reads: a list, then a watch from its resourceVersion,
    /// resumed from the last one seen, with a new list when the server has forgotten it.
    ///
    /// A list first, not a watch without a resourceVersion (which sends every object from the
    /// API server's watch cache, each encoded once for every watcher: a raw HTTPS watch of
    /// 5,000 GryviaAIJobs read with Python's `http.client` had its 5,000 `ADDED` events in
    /// 0.12 s, a raw GET of the same list took 0.22 s). Here the watch's events come one per
    /// chunk, and each chunk passes from the HTTP connection's task to this one: the watch
    /// started that way handed out about 21,000 events a second (the first after 80 to 90 ms,
    /// the 5,000th after 0.29 to 0.35 s), where started from a list, whose chunks hold many
    /// items each, the 5,000th came after 0.21 to 0.27 s.
    async fn run(mut self) {
        let mut from: Option<String> = None;
        let mut backoff = FIRST_BACKOFF;
        loop {
            let rv = match from.take() {
                Some(rv) => rv,
                None => match self.list().await {
                    Ok(Some(rv)) => rv,
                    Ok(None) => return,
                    Err(e) => {
                        if !self.fail(e, &mut backoff).await {
                            return;
                        }
                        continue;
                    }
                },
            };
            match self.follow(rv).await {
                Followed::Resume(next) => {
                    backoff = FIRST_BACKOFF;
                    from = Some(next);
                }
                Followed::Expired => from = None,
                Followed::Failed(e, next) => {
                    if !self.fail(e, &mut backoff).await {
                        return;
                    }
                    from = Some(next);
                }
                Followed::Closed => return,
            }
        }
    }

    /// Hands out an error, then waits before the next try: false when nobody reads.
    async fn fail(&self, e: Error, backoff: &mut Duration) -> bool {
        if self.tx.send(Err(e)).await.is_err() {
            return false;
        }
        tokio::time::sleep(*backoff).await;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        true
    }

    /// Hands out an event: false when nobody reads them any more.
    async fn send(&self, kind: EventType, object: Arc<str>) -> bool {
        self.tx.send(Ok((kind, object))).await.is_ok()
    }

    /// Lists every object, reporting what is new to [`Known`]: the list's resourceVersion, or
    /// `None` when nobody reads the events any more.
    async fn list(&mut self) -> Result<Option<String>> {
        let mut lp = ListParams::default();
        if let Some(sel) = &self.label_selector {
            lp = lp.labels(sel);
        }
        let mut body = open_list(&self.client, &self.request, &lp, &self.what).await?;
        let mut split = Splitter::default();
        self.known.begin_list();
        loop {
            let mut items = Vec::new();
            let more = read_items(&mut body, &mut split, &mut items, &self.what).await?;
            for item in items {
                let meta = Meta::of(&item)
                    .map_err(|e| Error::Invalid(format!("{}: an item: {e}", self.what)))?;
                let object: Arc<str> = item.into();
                if let Some(kind) = self.known.listed(&meta, &object)
                    && !self.send(kind, object).await
                {
                    return Ok(None);
                }
            }
            if !more {
                break;
            }
        }
        let rest = split
            .finish()
            .map_err(|e| Error::Invalid(format!("{}: {e}", self.what)))?;
        for (kind, object) in self.known.end_list() {
            if !self.send(kind, object).await {
                return Ok(None);
            }
        }
        Ok(Some(rest.resource_version))
    }

    /// Follows the changes after resourceVersion `rv` until the connection ends.
    async fn follow(&mut self, rv: String) -> Followed {
        use futures::{AsyncBufReadExt, TryStreamExt};
        let mut wp = WatchParams::default().timeout(WATCH_SECONDS);
        if let Some(sel) = &self.label_selector {
            wp = wp.labels(sel);
        }
        let req = match self.request.watch(&wp, &rv) {
            Ok(r) => r,
            Err(e) => {
                let e = Error::Invalid(format!("{}: {e}", self.what));
                return Followed::Failed(e, rv);
            }
        };
        let body = match self.client.request_stream(req).await {
            Ok(b) => b,
            Err(kube::Error::Api(s)) if s.code == 410 => return Followed::Expired,
            Err(source) => {
                let operation = self.what.clone();
                return Followed::Failed(Error::Api { operation, source }, rv);
            }
        };
        let mut last = rv;
        let mut lines = Box::pin(body.lines());
        // A connection that breaks off is resumed, like one the server ends.
        while let Ok(Some(line)) = lines.try_next().await {
            let (kind, object, meta) = match WatchLine::parse(&line) {
                Ok(p) => p,
                Err(e) => {
                    let e = Error::Invalid(format!("{}: an event: {e}", self.what));
                    return Followed::Failed(e, last);
                }
            };
            let deleted = match kind.as_ref() {
                "BOOKMARK" => {
                    last = meta.resource_version;
                    continue;
                }
                "ERROR" => {
                    let status: WatchStatus =
                        serde_json::from_str(object.get()).unwrap_or_default();
                    if status.code == 410 {
                        return Followed::Expired;
                    }
                    let e = Error::Invalid(format!(
                        "{}: the server ended the watch: {} ({})",
                        self.what, status.message, status.code
                    ));
                    return Followed::Failed(e, last);
                }
                "DELETED" => true,
                _ => false,
            };
            if !meta.resource_version.is_empty() {
                last.clone_from(&meta.resource_version);
            }
            let object: Arc<str> = object.get().into();
            if let Some(kind) = self.known.event(deleted, &meta, &object)
                && !self.send(kind, object).await
            {
                return Followed::Closed;
            }
        }
        Followed::Resume(last)
    }
}

/// One line of a watch response.
#[derive(serde::Deserialize)]
struct WatchLine<'a> {
    #[serde(rename = "type")]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

impl<'a> WatchLine<'a> {
    /// The event's type, its object's JSON and the object's identity.
    fn parse(
        line: &'a str,
    ) -> serde_json::Result<(
        std::borrow::Cow<'a, str>,
        &'a serde_json::value::RawValue,
        Meta,
    )> {
        let l: WatchLine<'a> = serde_json::from_str(line)?;
        let meta = Meta::of(l.object.get())?;
        Ok((l.kind, l.object, meta))
    }
}

/// The `Status` of a watch's `ERROR` event.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct WatchStatus {
    code: u16,
    message: String,
}

fn to_value(obj: DynamicObject, resource: &ApiResource) -> Result<Value> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let v = serde_json::to_value(obj).map_err(|source| Error::Serialize {
        what: format!("{} {name}", resource.kind),
        source,
    })?;
    Ok(with_identity(v, resource))
}

/// `obj` with `apiVersion` and `kind` of `resource` where it lacks them (items of a list of a
/// built-in kind carry neither).
fn with_identity(mut obj: Value, resource: &ApiResource) -> Value {
    if let Value::Object(m) = &mut obj {
        m.entry("apiVersion")
            .or_insert_with(|| Value::String(resource.api_version.clone()));
        m.entry("kind")
            .or_insert_with(|| Value::String(resource.kind.clone()));
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(uid: &str, rv: &str) -> (Meta, Arc<str>) {
        let text =
            json!({"metadata": {"name": uid, "uid": uid, "resourceVersion": rv}}).to_string();
        (Meta::of(&text).unwrap(), text.into())
    }

    fn name(o: &Arc<str>) -> String {
        Meta::of(o).unwrap().name
    }

    #[test]
    fn the_first_list_is_added_and_changes_are_modified() {
        let mut k = Known::default();
        k.begin_list();
        let (m, o) = obj("a", "1");
        assert_eq!(k.listed(&m, &o), Some(EventType::Added));
        assert!(k.end_list().is_empty());
        let (m, o) = obj("a", "2");
        assert_eq!(k.event(false, &m, &o), Some(EventType::Modified));
        // The same resourceVersion again (a reconnect's overlap) is not news.
        assert_eq!(k.event(false, &m, &o), None);
        let (m, o) = obj("b", "3");
        assert_eq!(k.event(false, &m, &o), Some(EventType::Added));
        let (m, o) = obj("a", "4");
        assert_eq!(k.event(true, &m, &o), Some(EventType::Deleted));
        // A deletion of what was never reported is not reported.
        let (m, o) = obj("z", "5");
        assert_eq!(k.event(true, &m, &o), None);
    }

    #[test]
    fn a_new_list_reports_only_what_changed_and_what_vanished() {
        let mut k = Known::default();
        k.begin_list();
        for (uid, rv) in [("a", "1"), ("b", "1"), ("c", "1")] {
            let (m, o) = obj(uid, rv);
            k.listed(&m, &o);
        }
        k.end_list();
        // The watch lost its place (410): a is unchanged, b changed, c is gone, d is new.
        k.begin_list();
        let (m, o) = obj("a", "1");
        assert_eq!(k.listed(&m, &o), None);
        let (m, o) = obj("b", "7");
        assert_eq!(k.listed(&m, &o), Some(EventType::Modified));
        let (m, o) = obj("d", "8");
        assert_eq!(k.listed(&m, &o), Some(EventType::Added));
        let gone = k.end_list();
        assert_eq!(gone.len(), 1);
        assert_eq!(
            (gone[0].0, name(&gone[0].1)),
            (EventType::Deleted, "c".to_owned())
        );
    }

    #[test]
    fn objects_without_a_uid_are_known_by_namespace_and_name() {
        let m =
            Meta::of(r#"{"metadata":{"name":"x","namespace":"n","resourceVersion":"1"}}"#).unwrap();
        assert_eq!(m.key(), "n/x");
        assert_eq!(Meta::of("{}").unwrap(), Meta::default());
        assert!(Meta::of("[1]").is_err());
    }

    #[test]
    fn meta_is_read_wherever_metadata_stands_and_only_up_to_its_end() {
        let want = Meta {
            uid: "u".into(),
            resource_version: "7".into(),
            name: "a".into(),
            namespace: "n".into(),
        };
        let meta =
            r#"{"uid":"u","resourceVersion":"7","name":"a","namespace":"n","labels":{"x":"y"}}"#;
        for json in [
            format!(r#"{{"metadata":{meta},"spec":{{"x":[1,{{"y":"}}"}}]}}}}"#),
            format!(
                r#"{{"apiVersion":"v1","kind":"K","spec":{{"metadata":{{}}}},"metadata":{meta}}}"#
            ),
            // An escaped key is the same key.
            format!(r#"{{"kind":"K","meta\u0064ata":{meta}}}"#),
            // What follows metadata is not read.
            format!(r#"{{"metadata":{meta},"spec":"#),
        ] {
            assert_eq!(Meta::of(&json).unwrap(), want, "{json}");
        }
        assert_eq!(
            Meta::of(r#"{"kind":"K","spec":{}}"#).unwrap(),
            Meta::default()
        );
        assert!(Meta::of(r#"{"kind":"K","spec":{}} x"#).is_err());
        assert!(Meta::of(r#"{"kind":"K","spec":"#).is_err());
        assert!(Meta::of(r#"{"metadata":{"name":1}}"#).is_err());
    }

    /// An HTTP server (a thread) that answers the requests of one watch from a script, as the
    /// API server would: each answer a status code and a body, sent with `Connection: close`.
    /// Out of script it holds the last connection open. The request targets come back in order.
    fn scripted_server(answers: Vec<(u16, String)>) -> (String, std::sync::mpsc::Receiver<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (seen, requests) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut answers = answers.into_iter();
            let mut held = Vec::new();
            for conn in listener.incoming() {
                let mut conn = conn.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let _ = seen.send(head.split(' ').nth(1).unwrap_or_default().to_owned());
                let Some((code, body)) = answers.next() else {
                    held.push(conn);
                    continue;
                };
                let reply = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{body}"
                );
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        (url, requests)
    }

    fn item(uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": uid, "namespace": "n", "uid": uid, "resourceVersion": rv}})
    }

    fn list_body(rv: &str, items: &[Value]) -> String {
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})
            .to_string()
    }

    fn line(kind: &str, object: &Value) -> String {
        format!("{}\n", json!({"type": kind, "object": object}))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_resumes_from_the_last_version_and_lists_again_after_410() {
        let bookmark = json!({"kind": "Pod", "metadata": {"resourceVersion": "12"}});
        let expired =
            json!({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"});
        let (url, requests) = scripted_server(vec![
            (200, list_body("10", &[item("a", "1"), item("b", "1")])),
            (
                200,
                line("MODIFIED", &item("a", "11")) + &line("BOOKMARK", &bookmark),
            ),
            (200, line("ERROR", &expired)),
            (200, list_body("13", &[item("a", "11"), item("c", "13")])),
        ]);
        let config = kube::Config::new(url.parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (tx, mut events) = mpsc::channel(16);
        let follower = Follower {
            client,
            request: kube::core::Request::new("/api/v1/namespaces/n/pods"),
            label_selector: Some("app=x".into()),
            what: "watch Pod".into(),
            known: Known::default(),
            tx,
        };
        let task = tokio::spawn(follower.run());
        let mut got = Vec::new();
        while got.len() < 5 {
            let (kind, object) = match events.recv().await.unwrap() {
                Ok(e) => e,
                Err(e) => panic!("{e}: {:?}", requests.try_iter().collect::<Vec<_>>()),
            };
            got.push((kind, name(&object)));
        }
        use EventType::*;
        assert_eq!(
            got,
            [
                (Added, "a"),
                (Added, "b"),
                (Modified, "a"),
                (Added, "c"),
                (Deleted, "b")
            ]
            .map(|(k, n)| (k, n.to_owned()))
        );
        // The watch after the last list is under way (held open by the server).
        let targets: Vec<String> = (0..5)
            .map(|_| requests.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        let rv = |t: &String| {
            t.split(['?', '&'])
                .find_map(|p| p.strip_prefix("resourceVersion="))
                .map(str::to_owned)
        };
        // A list, a watch from its version, one from the bookmark's, a list after the 410, a
        // watch from the new list's version; every request with the label selector.
        assert_eq!(
            targets
                .iter()
                .map(|t| (t.contains("watch=true"), rv(t)))
                .collect::<Vec<_>>(),
            vec![
                (false, None),
                (true, Some("10".into())),
                (true, Some("12".into())),
                (false, None),
                (true, Some("13".into())),
            ],
            "{targets:?}"
        );
        assert!(
            targets.iter().all(|t| t.contains("labelSelector=app%3Dx")),
            "{targets:?}"
        );
        task.abort();
    }

    #[test]
    fn group_version_splits_core_and_named_groups() {
        assert_eq!(group_version("v1"), ("", "v1"));
        assert_eq!(
            group_version("gryvia.io/v1alpha1"),
            ("gryvia.io", "v1alpha1")
        );
        assert_eq!(EventType::Deleted.as_str(), "DELETED");
    }
}
