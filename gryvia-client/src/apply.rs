//! The act half of the reconcile contract: applying a [`Plan`] to the cluster.
//!
//! Children are applied with server-side apply under the controller's field manager (one per
//! controller), with an owner reference to the reconciled object unless the Plan says
//! otherwise; deletions ignore objects already gone; the status is applied to the status
//! subresource (so fields the controller stopped setting are removed), and only when the Plan
//! has one; node operations patch the Node; evictions go through the Eviction API, so
//! PodDisruptionBudgets are honoured and a blocked eviction is reported, never forced; Events
//! are recorded through `events.k8s.io`. Every call runs under a timeout.
//!
//! A dry-run executor ([`Executor::dry_run`]) logs each Plan it is given and acts on nothing:
//! what Gryvia would do on this cluster.
//!
//! With the operator's caches ([`Executor::with_caches`]) an apply that could change nothing is
//! not sent: the same body as the executor's last apply to that object while the object still
//! holds what that apply set. For a child, the cache shows it as the apply left it
//! ([`applied_version`]: for an object with a generation, the same generation, labels,
//! annotations, owner references and finalizers, so a batch Job's status moving under it
//! changes nothing; else the same resourceVersion). For a status, the reconciled object's
//! status holds every field of the body as sent. Any other writer's change to what was applied
//! shows, and the next apply goes out. A tenant reconciled at every pod placed otherwise re-sent
//! its namespace, quota, limits and status each time: four requests that changed nothing; an
//! AI job re-sent its batch Job at every change of the Job's status.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gryvia_reconcile::{Child, EventType, Eviction, NodeOp, ObjectRef, Plan, Taint, TaintEffect};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, Patch,
    PatchParams,
};
use kube::discovery::Scope;
use kube::runtime::events::{Event, EventType as KubeEventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tracing::{debug, info, warn};

use crate::{Error, Result};

/// Timeout of every API call the executor makes.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// How many nodes the executor changes at the same time.
pub const NODE_PARALLELISM: usize = 8;

/// An API resource and whether it is namespaced.
type KindInfo = (ApiResource, bool);

/// What applying a Plan did that the caller may want to know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Pods whose eviction a PodDisruptionBudget blocked (namespace/name); retried on the
    /// next reconcile.
    pub blocked_evictions: Vec<String>,
    /// Pods whose eviction the API server accepted (namespace/name).
    pub evicted: Vec<String>,
}

/// Applies Plans for one controller.
#[derive(Clone)]
pub struct Executor {
    client: kube::Client,
    field_manager: String,
    recorder: Recorder,
    kinds: Arc<Mutex<HashMap<(String, String), KindInfo>>>,
    /// Objects a delete found already gone, and when: repeated deletes of absent children
    /// (a Plan says "must not exist" on every reconcile) are skipped for [`GONE_TTL`].
    gone: Arc<Mutex<HashMap<ObjectRef, std::time::Instant>>>,
    /// Per object (its status under the `/status` kind suffix): the hash of the last body
    /// applied, what the apply left (for a status, the resourceVersion; for a child,
    /// [`applied_version`]) and when.
    applied: Arc<std::sync::Mutex<HashMap<ObjectRef, Applied>>>,
    caches: Option<crate::cache::Caches>,
    mailer: Option<crate::mail::Mailer>,
    dry_run: bool,
}

/// What an apply of an object is remembered against: for an object with a generation, its
/// uid, generation, and a hash of its labels, annotations, owner references and finalizers
/// (what an apply sets besides the spec, whose changes move the generation; a status
/// change moves neither); else its resourceVersion.
pub fn applied_version(meta: &ObjectMeta) -> Option<String> {
    use std::hash::{Hash, Hasher};
    let Some(generation) = meta.generation else {
        return meta.resource_version.clone();
    };
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.finalizers.hash(&mut h);
    for o in meta.owner_references.iter().flatten() {
        (&o.api_version, &o.kind, &o.name, &o.uid, o.controller).hash(&mut h);
    }
    Some(format!(
        "{}/{generation}/{:x}",
        meta.uid.as_deref().unwrap_or_default(),
        h.finish()
    ))
}

/// Whether `object` holds every field of `applied` with its value (objects field by field;
/// lists and values whole; a null in `applied`, a field absent).
fn holds(object: &Value, applied: &Value) -> bool {
    match (object, applied) {
        (Value::Object(have), Value::Object(want)) => want.iter().all(|(k, v)| match v {
            Value::Null => have.get(k).is_none_or(Value::is_null),
            _ => have.get(k).is_some_and(|h| holds(h, v)),
        }),
        _ => object == applied,
    }
}

/// The last apply to an object: its body's hash, what it left the object at and when.
type Applied = (u64, String, std::time::Instant);

/// A hash of a body to apply.
fn body_hash(body: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.to_string().hash(&mut h);
    h.finish()
}

/// How long a delete that found its object gone is remembered.
pub const GONE_TTL: Duration = Duration::from_secs(300);

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

async fn timed<T>(
    operation: impl Into<String>,
    fut: impl Future<Output = kube::Result<T>>,
) -> Result<T> {
    let operation = operation.into();
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(Error::Api { operation, source }),
        Err(_) => Err(Error::Timeout {
            what: operation,
            after: CALL_TIMEOUT,
        }),
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Api { source: kube::Error::Api(s), .. } if s.code == 404)
}

impl Executor {
    /// An executor whose field manager and event reporter are `field_manager`.
    pub fn new(client: kube::Client, field_manager: &str) -> Self {
        let reporter = Reporter {
            controller: field_manager.to_owned(),
            instance: std::env::var("POD_NAME")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok()),
        };
        Executor {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            field_manager: field_manager.to_owned(),
            kinds: Arc::default(),
            gone: Arc::default(),
            applied: Arc::default(),
            caches: None,
            mailer: None,
            dry_run: false,
        }
    }

    /// Leaves out applies that could change nothing, telling so from `caches` (see the module
    /// documentation).
    #[must_use]
    pub fn with_caches(mut self, caches: crate::cache::Caches) -> Self {
        self.caches = Some(caches);
        self
    }

    /// Sends a Plan's e-mails with `mailer` (without one, every e-mail fails saying so).
    pub fn with_mailer(mut self, mailer: Option<crate::mail::Mailer>) -> Self {
        self.mailer = mailer;
        self
    }

    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef, Applied>> {
        self.applied
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the last apply of `hash` to `r` left it at `version` (so it is still as applied).
    fn unchanged_since_applied(&self, r: &ObjectRef, hash: u64, version: Option<&str>) -> bool {
        version.is_some_and(|v| {
            self.applied()
                .get(r)
                .is_some_and(|(h, at, _)| *h == hash && at == v)
        })
    }

    /// Whether the status of `owner` (as the reconcile read it) still holds what the last
    /// status apply to it sent, and that was `status` (hashed `hash`): then applying it again
    /// changes nothing, whoever else wrote the object since (the queue scheduler writes
    /// `status.queue` of the jobs this executor writes the rest of).
    fn status_holds<K: Resource<DynamicType = ()> + Serialize>(
        &self,
        r: &ObjectRef,
        hash: u64,
        owner: &K,
        status: &Value,
    ) -> bool {
        if self.applied().get(r).is_none_or(|(h, _, _)| *h != hash) {
            return false;
        }
        serde_json::to_value(owner).is_ok_and(|o| holds(&o["status"], status))
    }

    /// The ref [`Executor::applied`] keeps a status write of `owner` under.
    fn status_ref<K: Resource<DynamicType = ()>>(owner: &K) -> ObjectRef {
        let name = owner.meta().name.clone().unwrap_or_default();
        let kind = format!("{}/status", K::kind(&()));
        match owner.meta().namespace.as_deref() {
            Some(ns) => ObjectRef::namespaced(&K::api_version(&()), &kind, ns, &name),
            None => ObjectRef::cluster(&K::api_version(&()), &kind, &name),
        }
    }

    /// The resourceVersion this executor's last status write left `obj` at, and when it was
    /// made; `None` when it wrote no status of it (or its last write failed).
    pub fn status_written_at<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
    ) -> Option<(String, std::time::Instant)> {
        self.applied()
            .get(&Self::status_ref(obj))
            .map(|(_, version, at)| (version.clone(), *at))
    }

    fn remember_applied(&self, r: &ObjectRef, hash: u64, version: Option<String>) {
        match version {
            Some(v) => self
                .applied()
                .insert(r.clone(), (hash, v, std::time::Instant::now())),
            None => self.applied().remove(r),
        };
    }

    /// With `true`, [`Executor::apply`] logs each Plan (at info, with every action) and acts
    /// on nothing.
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// Whether this executor only logs.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// The Kubernetes client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Resolves `apiVersion` + `kind` to the API resource (cached after the first lookup).
    async fn resource(&self, api_version: &str, kind: &str) -> Result<(ApiResource, bool)> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.kinds.lock().await.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, caps) = timed(
            format!("discover {api_version} {kind}"),
            kube::discovery::pinned_kind(&self.client, &gvk),
        )
        .await?;
        let found = (ar, caps.scope == Scope::Namespaced);
        self.kinds.lock().await.insert(key, found.clone());
        Ok(found)
    }

    async fn dynamic_api(&self, r: &ObjectRef) -> Result<Api<DynamicObject>> {
        let (ar, namespaced) = self.resource(&r.api_version, &r.kind).await?;
        Ok(match (&r.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &ar),
            _ => Api::all_with(self.client.clone(), &ar),
        })
    }

    /// Applies `plan` for `owner`.
    ///
    /// # Errors
    /// The first API error; what was applied before it stays applied (Plans are idempotent,
    /// the next reconcile finishes the rest).
    pub async fn apply<K, S>(&self, owner: &K, plan: &Plan<S>) -> Result<Outcome>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + Serialize
            + std::fmt::Debug,
        K::Scope: crate::ScopeApi,
        S: Serialize,
    {
        let mut outcome = Outcome::default();
        if self.dry_run {
            if !plan.is_noop() {
                info!(
                    controller = %self.field_manager,
                    object = %format!("{}/{}", owner.meta().namespace.as_deref().unwrap_or(""), owner.name_any()),
                    actions = ?plan.summary(),
                    "dry run: would apply plan"
                );
            }
            return Ok(outcome);
        }
        for child in &plan.apply {
            self.apply_child(owner, child).await?;
        }
        for r in &plan.delete {
            self.delete(r).await?;
        }
        self.node_ops(&plan.node_ops).await?;
        let evicted = self.evict(&plan.evictions).await?;
        outcome.blocked_evictions = evicted.blocked_evictions;
        outcome.evicted = evicted.evicted;
        let reference = owner.object_ref(&());
        for ev in &plan.events {
            let reference = match &ev.regarding {
                Some(r) => ObjectReference {
                    api_version: Some(r.api_version.clone()),
                    kind: Some(r.kind.clone()),
                    namespace: r.namespace.clone(),
                    name: Some(r.name.clone()),
                    ..Default::default()
                },
                None => reference.clone(),
            };
            let event = Event {
                type_: match ev.type_ {
                    EventType::Normal => KubeEventType::Normal,
                    EventType::Warning => KubeEventType::Warning,
                },
                reason: ev.reason.clone(),
                note: Some(ev.message.chars().take(1024).collect()),
                action: ev.reason.clone(),
                secondary: None,
            };
            timed(
                format!("record event {}", ev.reason),
                self.recorder.publish(&event, &reference),
            )
            .await?;
        }
        if let Some(status) = &plan.status {
            self.apply_status(owner, status).await?;
        }
        if !plan.notifications.is_empty() {
            let deliveries = self.deliver(&plan.notifications).await;
            crate::webhook::first_failure(&plan.notifications, &deliveries)?;
        }
        if !plan.emails.is_empty() {
            let deliveries = self.send_emails(&plan.emails).await;
            crate::webhook::first_mail_failure(&plan.emails, &deliveries)?;
        }
        Ok(outcome)
    }

    /// Applies `children` as they are (owner references, if any, are in each object) and
    /// deletes `deletes` (one already gone is skipped): for a controller that reconciles a
    /// whole set of objects rather than the children of one. A dry-run executor logs only.
    ///
    /// # Errors
    /// The first API error; what was done before it stays done.
    pub async fn apply_set(&self, children: &[Child], deletes: &[ObjectRef]) -> Result<()> {
        if self.dry_run {
            if !children.is_empty() || !deletes.is_empty() {
                info!(
                    controller = %self.field_manager,
                    apply = ?children.iter().map(|c| c.object_ref.to_string()).collect::<Vec<_>>(),
                    delete = ?deletes.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "dry run: would apply and delete"
                );
            }
            return Ok(());
        }
        for child in children {
            self.apply_object(child, &child.object).await?;
        }
        for r in deletes {
            self.delete(r).await?;
        }
        Ok(())
    }

    /// Deletes `r` in the background; one already gone (or seen gone lately) is skipped.
    async fn delete(&self, r: &ObjectRef) -> Result<()> {
        if self
            .gone
            .lock()
            .await
            .get(r)
            .is_some_and(|t| t.elapsed() < GONE_TTL)
        {
            return Ok(());
        }
        let api = self.dynamic_api(r).await?;
        match timed(
            format!("delete {r}"),
            api.delete(&r.name, &DeleteParams::background()),
        )
        .await
        {
            Ok(_) => {
                self.applied().remove(r);
                debug!(object = %r, "deleted");
                Ok(())
            }
            Err(e) if is_not_found(&e) => {
                self.gone
                    .lock()
                    .await
                    .insert(r.clone(), std::time::Instant::now());
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Asks the Eviction API to evict each pod: PodDisruptionBudgets are honoured (a refusal
    /// is reported in [`Outcome::blocked_evictions`], never forced) and pods already gone are
    /// skipped. A dry-run executor logs and evicts nothing.
    ///
    /// # Errors
    /// The first API failure other than a budget's refusal or a pod already gone.
    pub async fn evict(&self, evictions: &[Eviction]) -> Result<Outcome> {
        let mut outcome = Outcome::default();
        for ev in evictions {
            let key = format!("{}/{}", ev.namespace, ev.pod);
            if self.dry_run {
                info!(pod = %key, reason = %ev.reason, "dry run: would evict");
                continue;
            }
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ev.namespace);
            match timed(
                format!("evict pod {key}"),
                pods.evict(&ev.pod, &EvictParams::default()),
            )
            .await
            {
                Ok(_) => outcome.evicted.push(key),
                Err(Error::Api {
                    source: kube::Error::Api(s),
                    ..
                }) if s.code == 429 => {
                    warn!(pod = %ev.pod, namespace = %ev.namespace, "eviction blocked by a PodDisruptionBudget");
                    outcome.blocked_evictions.push(key);
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(outcome)
    }

    /// Delivers `notifications` (signed webhooks), each once, and returns what came of each
    /// in order; logs every outcome. A dry-run executor logs them and delivers none (the
    /// result is then empty).
    pub async fn deliver(
        &self,
        notifications: &[gryvia_reconcile::Notification],
    ) -> Vec<gryvia_reconcile::Delivery> {
        if self.dry_run {
            for n in notifications {
                info!(url = %n.url, id = %n.id, "dry run: would notify");
            }
            return Vec::new();
        }
        let deliveries = crate::webhook::deliver_each(&self.client, notifications).await;
        for (n, d) in notifications.iter().zip(&deliveries) {
            match d.failure() {
                None => {
                    info!(id = %d.id, url = %n.url, status = ?d.status, "notification delivered")
                }
                Some(reason) => {
                    warn!(id = %d.id, url = %n.url, %reason, "notification not delivered")
                }
            }
        }
        deliveries
    }

    /// Sends `emails`, each once, and returns what came of each in order; logs every outcome.
    /// A dry-run executor logs them and sends none (the result is then empty).
    pub async fn send_emails(
        &self,
        emails: &[gryvia_reconcile::Email],
    ) -> Vec<gryvia_reconcile::Delivery> {
        if self.dry_run {
            for m in emails {
                info!(to = ?m.to, id = %m.id, "dry run: would send e-mail");
            }
            return Vec::new();
        }
        let mut deliveries = Vec::with_capacity(emails.len());
        for m in emails {
            let d = match &self.mailer {
                Some(mailer) => mailer.send(m).await,
                None => gryvia_reconcile::Delivery {
                    id: m.id.clone(),
                    status: None,
                    error: Some("no SMTP server configured".to_owned()),
                },
            };
            match d.failure() {
                None => info!(id = %d.id, to = ?m.to, status = ?d.status, "e-mail sent"),
                Some(reason) => warn!(id = %d.id, to = ?m.to, %reason, "e-mail not sent"),
            }
            deliveries.push(d);
        }
        deliveries
    }

    async fn apply_child<K>(&self, owner: &K, child: &Child) -> Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        let mut object = child.object.clone();
        if child.owned
            && let Some(owner_ref) = owner.controller_owner_ref(&())
        {
            object["metadata"]["ownerReferences"] = json!([owner_ref]);
        }
        self.apply_object(child, &object).await
    }

    /// Applies `object` (the object of `child`, perhaps with an owner reference) with
    /// server-side apply, forcing conflicts.
    async fn apply_object(&self, child: &Child, object: &Value) -> Result<()> {
        let r = &child.object_ref;
        self.gone.lock().await.remove(r);
        let hash = body_hash(object);
        let cached = self.caches.as_ref().and_then(|c| {
            c.applied_version(&r.api_version, &r.kind, r.namespace.as_deref(), &r.name)
        });
        if self.unchanged_since_applied(r, hash, cached.as_deref()) {
            return Ok(());
        }
        let api = self.dynamic_api(r).await?;
        let params = PatchParams::apply(&self.field_manager).force();
        let result = timed(
            format!("apply {r}"),
            api.patch(&r.name, &params, &Patch::Apply(object)),
        )
        .await;
        match result {
            Ok(obj) => {
                self.remember_applied(r, hash, applied_version(&obj.metadata));
                Ok(())
            }
            Err(e) => {
                self.applied().remove(r);
                Err(e)
            }
        }
    }

    async fn apply_status<K, S>(&self, owner: &K, status: &S) -> Result<()>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + Serialize
            + std::fmt::Debug,
        K::Scope: crate::ScopeApi,
        S: Serialize,
    {
        let api: Api<K> = crate::api_for(self.client.clone(), owner);
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        let params = PatchParams::apply(&self.field_manager).force();
        let name = owner.name_any();
        let r = Self::status_ref(owner);
        let hash = body_hash(&body);
        if self.caches.is_some() && self.status_holds(&r, hash, owner, &body["status"]) {
            return Ok(());
        }
        let result = timed(
            format!("apply status of {} {name}", K::kind(&())),
            api.patch_status(&name, &params, &Patch::Apply(&body)),
        )
        .await;
        match result {
            Ok(obj) => {
                self.remember_applied(&r, hash, obj.meta().resource_version.clone());
                Ok(())
            }
            Err(e) => {
                self.applied().remove(&r);
                // The object was deleted meanwhile (its last finalizer went): nothing to record
                // on.
                if is_not_found(&e) { Ok(()) } else { Err(e) }
            }
        }
    }

    /// Applies node operations: in order on each node (cordon before taint), up to
    /// [`NODE_PARALLELISM`] nodes at a time (a burst of quarantines is bound by API round
    /// trips). A cordon followed by a taint change is one write (`spec.unschedulable` and the
    /// taints together), read from the cache when it holds the node: a quarantine is one round
    /// trip, not three.
    async fn node_ops(&self, ops: &[NodeOp]) -> Result<()> {
        use futures::StreamExt;
        let mut by_node: Vec<Vec<NodeOp>> = Vec::new();
        for op in ops {
            match by_node.iter_mut().find(|l| l[0].node() == op.node()) {
                Some(list) => list.push(op.clone()),
                None => by_node.push(vec![op.clone()]),
            }
        }
        // Owned data in every future: the runtime's future must be Send for any lifetime.
        let results: Vec<Result<()>> = futures::stream::iter(by_node.into_iter().map(|list| {
            let this = self.clone();
            async move {
                let mut i = 0;
                while i < list.len() {
                    let cordon = match &list[i] {
                        NodeOp::Cordon { .. } => Some(true),
                        NodeOp::Uncordon { .. } => Some(false),
                        _ => None,
                    };
                    match (cordon, list.get(i + 1)) {
                        (Some(c), Some(NodeOp::Taint { node, taint })) => {
                            this.update_taints(node, Some(c), |t| set_taint(t, taint))
                                .await?;
                            i += 2;
                        }
                        (Some(c), Some(NodeOp::RemoveTaint { node, key, effect })) => {
                            this.update_taints(node, Some(c), |t| remove_taint(t, key, *effect))
                                .await?;
                            i += 2;
                        }
                        _ => {
                            this.node_op(&list[i]).await?;
                            i += 1;
                        }
                    }
                }
                Ok(())
            }
        }))
        .buffer_unordered(NODE_PARALLELISM)
        .collect()
        .await;
        results.into_iter().collect()
    }

    async fn node_op(&self, op: &NodeOp) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = op.node();
        match op {
            NodeOp::Cordon { .. } | NodeOp::Uncordon { .. } => {
                let unschedulable = matches!(op, NodeOp::Cordon { .. });
                let patch = json!({ "spec": { "unschedulable": unschedulable } });
                timed(
                    format!("cordon={unschedulable} node {name}"),
                    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?;
            }
            NodeOp::Label { key, value, .. } => {
                let patch = json!({ "metadata": { "labels": { key: value } } });
                timed(
                    format!("label node {name}"),
                    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?;
            }
            NodeOp::RemoveLabel { key, .. } => {
                let patch = json!({ "metadata": { "labels": { key: null } } });
                timed(
                    format!("unlabel node {name}"),
                    nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
                )
                .await?;
            }
            NodeOp::Taint { taint, .. } => {
                self.update_taints(name, None, |taints| set_taint(taints, taint))
                    .await?
            }
            NodeOp::RemoveTaint { key, effect, .. } => {
                self.update_taints(name, None, |taints| remove_taint(taints, key, *effect))
                    .await?;
            }
        }
        Ok(())
    }

    /// Read-modify-write of a node's taints (and, with `unschedulable`, its cordon) with an
    /// optimistic-concurrency precondition, retried on conflict. The first read is the
    /// cache's when it holds the node (a conflict rereads from the API server).
    async fn update_taints(
        &self,
        name: &str,
        unschedulable: Option<bool>,
        change: impl Fn(&mut Vec<k8s_openapi::api::core::v1::Taint>) -> bool,
    ) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        for attempt in 0..5 {
            let cached = (attempt == 0)
                .then(|| self.caches.as_ref()?.cached::<Node>(None, name))
                .flatten();
            let node = match cached {
                Some(node) => node,
                None => Arc::new(timed(format!("read node {name}"), nodes.get(name)).await?),
            };
            let spec = node.spec.as_ref();
            let mut taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
            let taints_changed = change(&mut taints);
            let cordon_changed = unschedulable
                .is_some_and(|u| spec.and_then(|s| s.unschedulable).unwrap_or(false) != u);
            if !taints_changed && !cordon_changed {
                return Ok(());
            }
            let mut patch = json!({
                "metadata": { "resourceVersion": node.resource_version() },
                "spec": { "taints": taints }
            });
            if let Some(u) = unschedulable {
                patch["spec"]["unschedulable"] = json!(u);
            }
            match timed(
                format!("taint node {name}"),
                nodes.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await
            {
                Ok(_) => return Ok(()),
                Err(Error::Api {
                    source: kube::Error::Api(s),
                    ..
                }) if s.code == 409 && attempt < 4 => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn effect_str(e: TaintEffect) -> &'static str {
    match e {
        TaintEffect::NoSchedule => "NoSchedule",
        TaintEffect::PreferNoSchedule => "PreferNoSchedule",
        TaintEffect::NoExecute => "NoExecute",
    }
}

/// Adds or updates `taint`; false when it was already there unchanged.
fn set_taint(taints: &mut Vec<k8s_openapi::api::core::v1::Taint>, taint: &Taint) -> bool {
    let effect = effect_str(taint.effect);
    if let Some(t) = taints
        .iter_mut()
        .find(|t| t.key == taint.key && t.effect == effect)
    {
        if t.value.as_deref().unwrap_or("") == taint.value {
            return false;
        }
        t.value = Some(taint.value.clone());
        return true;
    }
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: taint.key.clone(),
        value: Some(taint.value.clone()),
        effect: effect.to_owned(),
        time_added: None,
    });
    true
}

/// Removes the taint `key:effect`; false when it was not there.
fn remove_taint(
    taints: &mut Vec<k8s_openapi::api::core::v1::Taint>,
    key: &str,
    effect: TaintEffect,
) -> bool {
    let before = taints.len();
    taints.retain(|t| !(t.key == key && t.effect == effect_str(effect)));
    taints.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_are_added_once_and_removed_by_key_and_effect() {
        let mut taints = Vec::new();
        let t = Taint {
            key: "gryvia.io/gpu-unhealthy".into(),
            value: "ecc".into(),
            effect: TaintEffect::NoSchedule,
        };
        assert!(set_taint(&mut taints, &t));
        assert!(
            !set_taint(&mut taints, &t),
            "setting the same taint again changes nothing"
        );
        assert_eq!(taints.len(), 1);
        assert!(!remove_taint(
            &mut taints,
            "gryvia.io/gpu-unhealthy",
            TaintEffect::NoExecute
        ));
        assert!(remove_taint(
            &mut taints,
            "gryvia.io/gpu-unhealthy",
            TaintEffect::NoSchedule
        ));
        assert!(taints.is_empty());
    }

    #[test]
    fn a_status_holds_what_was_applied_whatever_else_it_has() {
        let applied = json!({"phase": "Running", "active": 2, "failure": null,
                             "conditions": [{"type": "Running", "status": "True"}]});
        let object = json!({"phase": "Running", "active": 2, "queue": {"position": 3},
                            "conditions": [{"type": "Running", "status": "True"}]});
        assert!(holds(&object, &applied));
        // A field of its own changed, a list changed, a field it removed is back: not held.
        let changed = json!({"phase": "Succeeded", "active": 2,
                             "conditions": [{"type": "Running", "status": "True"}]});
        assert!(!holds(&changed, &applied));
        let more = json!({"phase": "Running", "active": 2, "conditions": [
            {"type": "Running", "status": "True"}, {"type": "Ready", "status": "True"}]});
        assert!(!holds(&more, &applied));
        let back = json!({"phase": "Running", "active": 2, "failure": "oom",
                          "conditions": [{"type": "Running", "status": "True"}]});
        assert!(!holds(&back, &applied));
        assert!(!holds(&Value::Null, &applied));
    }

    #[test]
    fn an_apply_is_remembered_against_the_generation_and_metadata_not_the_status() {
        let meta = |rv: &str, generation: Option<i64>, label: &str| ObjectMeta {
            uid: Some("u1".into()),
            resource_version: Some(rv.into()),
            generation,
            labels: Some([("app".to_owned(), label.to_owned())].into()),
            ..ObjectMeta::default()
        };
        // The status moved (a new resourceVersion): the same.
        assert_eq!(
            applied_version(&meta("10", Some(1), "a")),
            applied_version(&meta("11", Some(1), "a"))
        );
        // The spec (generation) or a label changed: different.
        assert_ne!(
            applied_version(&meta("10", Some(1), "a")),
            applied_version(&meta("12", Some(2), "a"))
        );
        assert_ne!(
            applied_version(&meta("10", Some(1), "a")),
            applied_version(&meta("12", Some(1), "b"))
        );
        // Without a generation: the resourceVersion.
        assert_eq!(
            applied_version(&meta("10", None, "a")).as_deref(),
            Some("10")
        );
    }
}
