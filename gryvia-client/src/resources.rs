//! Objects of any kind, addressed by `apiVersion` and `kind`: the generic client under the
//! SDKs (the Python `gryvia.Client` is a thin layer over it).
//!
//! Kinds are resolved once through API discovery (so Gryvia kinds and built-in kinds work the
//! same, namespaced or cluster-scoped) and cached per client. Objects travel as JSON values;
//! typing them is the caller's business (`gryvia_types::crds::typed_value` for Gryvia kinds).
//! A watch turns the kube-runtime watcher's re-lists into the events a user expects: `Added`
//! for an object first seen, `Modified` when its resourceVersion changed, `Deleted` when it is
//! gone, including objects that disappeared while the watch was reconnecting.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use futures::{Stream, StreamExt};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

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

/// Turns the watcher's events into [`EventType`]s. Pure: tested without a cluster.
#[derive(Debug, Default)]
pub struct WatchState {
    /// Known objects: uid -> (resourceVersion, last object).
    known: BTreeMap<String, (String, Value)>,
    /// Uids seen since the current re-list started (`Some` while a re-list is under way).
    relisting: Option<std::collections::BTreeSet<String>>,
}

fn uid_rv(obj: &Value) -> (String, String) {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let uid = s("/metadata/uid");
    // Objects without a uid (never from a real server) are keyed by namespace/name.
    let key = if uid.is_empty() {
        format!("{}/{}", s("/metadata/namespace"), s("/metadata/name"))
    } else {
        uid
    };
    (key, s("/metadata/resourceVersion"))
}

impl WatchState {
    /// The events one watcher event stands for.
    pub fn step(&mut self, event: watcher::Event<Value>) -> Vec<(EventType, Value)> {
        match event {
            watcher::Event::Init => {
                self.relisting = Some(Default::default());
                Vec::new()
            }
            watcher::Event::InitApply(obj) => {
                let (uid, _) = uid_rv(&obj);
                if let Some(seen) = &mut self.relisting {
                    seen.insert(uid);
                }
                self.apply(obj).into_iter().collect()
            }
            watcher::Event::Apply(obj) => self.apply(obj).into_iter().collect(),
            watcher::Event::InitDone => {
                let Some(seen) = self.relisting.take() else {
                    return Vec::new();
                };
                let gone: Vec<String> = self
                    .known
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                gone.into_iter()
                    .filter_map(|k| self.known.remove(&k))
                    .map(|(_, obj)| (EventType::Deleted, obj))
                    .collect()
            }
            watcher::Event::Delete(obj) => {
                let (uid, _) = uid_rv(&obj);
                self.known.remove(&uid);
                vec![(EventType::Deleted, obj)]
            }
        }
    }

    fn apply(&mut self, obj: Value) -> Option<(EventType, Value)> {
        let (uid, rv) = uid_rv(&obj);
        let kind = match self.known.get(&uid) {
            None => EventType::Added,
            Some((old, _)) if *old == rv => return None,
            Some(_) => EventType::Modified,
        };
        self.known.insert(uid, (rv, obj.clone()));
        Some((kind, obj))
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

    /// The JSON body of a list request, in one namespace or (without one) in all of them:
    /// for callers that decode it themselves (`gryvia_types::crds::typed_list`).
    ///
    /// # Errors
    /// [`Error::Api`] when the list fails, or a discovery error.
    pub async fn list_body(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<(String, Kind)> {
        let k = self.kind(api_version, kind).await?;
        let ns = if k.namespaced { namespace } else { None };
        let url = <DynamicObject as kube::Resource>::url_path(&k.resource, ns);
        let mut lp = ListParams::default();
        if let Some(sel) = label_selector {
            lp = lp.labels(sel);
        }
        let request = kube::core::Request::new(url)
            .list(&lp)
            .map_err(|e| Error::Invalid(format!("list {kind}: {e}")))?;
        let body = self
            .client
            .request_text(request)
            .await
            .map_err(api_err(format!("list {kind}")))?;
        Ok((body, k))
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

    /// Watches objects of a kind (one namespace, or all): the current objects as `Added`,
    /// then every change. Reconnects by itself; ends only when dropped.
    ///
    /// # Errors
    /// The stream yields [`Error::Api`] when the watch fails and a discovery error first
    /// when the kind is unknown.
    pub async fn watch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<impl Stream<Item = Result<(EventType, Value)>> + Send + 'static + use<>> {
        let (api, k) = self.api(api_version, kind, namespace, true).await?;
        let mut config = watcher::Config::default();
        if let Some(sel) = label_selector {
            config = config.labels(sel);
        }
        let what = format!("watch {kind}");
        let resource = k.resource.clone();
        let mut state = WatchState::default();
        Ok(watcher(api, config)
            .default_backoff()
            .flat_map(move |event| {
                let out: Vec<Result<(EventType, Value)>> = match event {
                    Ok(e) => {
                        let v = |o: DynamicObject| to_value(o, &resource).unwrap_or(Value::Null);
                        let mapped = match e {
                            watcher::Event::Init => watcher::Event::Init,
                            watcher::Event::InitDone => watcher::Event::InitDone,
                            watcher::Event::InitApply(o) => watcher::Event::InitApply(v(o)),
                            watcher::Event::Apply(o) => watcher::Event::Apply(v(o)),
                            watcher::Event::Delete(o) => watcher::Event::Delete(v(o)),
                        };
                        state.step(mapped).into_iter().map(Ok).collect()
                    }
                    Err(e) => vec![Err(Error::Invalid(format!("{what}: {e}")))],
                };
                futures::stream::iter(out)
            }))
    }
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

    fn obj(uid: &str, rv: &str) -> Value {
        json!({"metadata": {"name": uid, "uid": uid, "resourceVersion": rv}})
    }

    fn types(events: &[(EventType, Value)]) -> Vec<(EventType, String)> {
        events
            .iter()
            .map(|(t, o)| (*t, o["metadata"]["name"].as_str().unwrap_or("").to_owned()))
            .collect()
    }

    #[test]
    fn the_initial_list_is_added_and_changes_are_modified() {
        let mut s = WatchState::default();
        assert!(s.step(watcher::Event::Init).is_empty());
        let a = s.step(watcher::Event::InitApply(obj("a", "1")));
        assert_eq!(types(&a), vec![(EventType::Added, "a".into())]);
        assert!(s.step(watcher::Event::InitDone).is_empty());
        let m = s.step(watcher::Event::Apply(obj("a", "2")));
        assert_eq!(types(&m), vec![(EventType::Modified, "a".into())]);
        let b = s.step(watcher::Event::Apply(obj("b", "3")));
        assert_eq!(types(&b), vec![(EventType::Added, "b".into())]);
        let d = s.step(watcher::Event::Delete(obj("a", "4")));
        assert_eq!(types(&d), vec![(EventType::Deleted, "a".into())]);
    }

    #[test]
    fn a_relist_reports_only_what_changed_and_what_vanished() {
        let mut s = WatchState::default();
        s.step(watcher::Event::Init);
        s.step(watcher::Event::InitApply(obj("a", "1")));
        s.step(watcher::Event::InitApply(obj("b", "1")));
        s.step(watcher::Event::InitDone);
        // The watch reconnects: a is unchanged, b is gone, c is new.
        s.step(watcher::Event::Init);
        assert!(s.step(watcher::Event::InitApply(obj("a", "1"))).is_empty());
        let c = s.step(watcher::Event::InitApply(obj("c", "5")));
        assert_eq!(types(&c), vec![(EventType::Added, "c".into())]);
        let done = s.step(watcher::Event::InitDone);
        assert_eq!(types(&done), vec![(EventType::Deleted, "b".into())]);
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
