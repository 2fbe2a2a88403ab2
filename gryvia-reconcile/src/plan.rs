//! The Plan: what a reconcile decided, as data.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// Identifies a Kubernetes object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion`, for example `v1` or `gryvia.io/v1alpha1`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace; `None` for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// A reference to a namespaced object.
    pub fn namespaced(api_version: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: Some(namespace.to_owned()),
            name: name.to_owned(),
        }
    }

    /// A reference to a cluster-scoped object.
    pub fn cluster(api_version: &str, kind: &str, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: None,
            name: name.to_owned(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// A desired child object, applied with server-side apply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Child {
    /// Which object.
    pub object_ref: ObjectRef,
    /// The full desired object (`apiVersion`, `kind`, `metadata`, ...), only the fields the
    /// controller owns.
    pub object: Value,
    /// Whether the executor sets an owner reference to the reconciled object, so the child is
    /// garbage-collected with it. False for children that must outlive their owner (a tenant's
    /// namespace, which the deletion policy decides about).
    #[serde(default = "yes")]
    pub owned: bool,
}

fn yes() -> bool {
    true
}

impl Child {
    /// Builds a child from a JSON object that has `apiVersion`, `kind` and `metadata.name`
    /// (and `metadata.namespace` when namespaced).
    ///
    /// # Errors
    /// [`Error::Unnamed`] when `metadata.name` is missing.
    pub fn from_json(object: Value) -> Result<Self> {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let kind = text("/kind").unwrap_or_default();
        let name = text("/metadata/name").ok_or_else(|| Error::Unnamed(kind.clone()))?;
        Ok(Child {
            object_ref: ObjectRef {
                api_version: text("/apiVersion").unwrap_or_default(),
                kind,
                namespace: text("/metadata/namespace"),
                name,
            },
            object,
            owned: true,
        })
    }

    /// Marks the child as not owned by the reconciled object (see [`Child::owned`]).
    pub fn unowned(mut self) -> Self {
        self.owned = false;
        self
    }

    /// Builds a child from a typed object: a k8s-openapi kind or a Gryvia custom resource
    /// (anything with a static group, version and kind).
    ///
    /// # Errors
    /// [`Error::Unnamed`] when the object has no name, [`Error::Serialize`] when it does not
    /// serialize.
    pub fn from_resource<K>(resource: &K) -> Result<Self>
    where
        K: gryvia_types::core::Resource<DynamicType = ()> + Serialize,
    {
        let kind = K::kind(&()).into_owned();
        let api_version = K::api_version(&()).into_owned();
        let meta = resource.meta();
        let name = meta
            .name
            .clone()
            .ok_or_else(|| Error::Unnamed(kind.clone()))?;
        let mut object = serde_json::to_value(resource).map_err(|source| Error::Serialize {
            kind: kind.clone(),
            name: name.clone(),
            source,
        })?;
        // k8s-openapi kinds do not serialize their apiVersion and kind; custom resources do
        // (the same values).
        if let Value::Object(map) = &mut object {
            map.insert("apiVersion".to_owned(), Value::String(api_version.clone()));
            map.insert("kind".to_owned(), Value::String(kind.clone()));
        }
        Ok(Child {
            object_ref: ObjectRef {
                api_version,
                kind,
                namespace: meta.namespace.clone(),
                name,
            },
            object,
            owned: true,
        })
    }
}

/// Effect of a taint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods are not scheduled.
    NoSchedule,
    /// New pods avoid the node if they can.
    PreferNoSchedule,
    /// Running pods without a toleration are evicted.
    NoExecute,
}

/// A node taint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// An operation on a node.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum NodeOp {
    /// Mark the node unschedulable.
    Cordon {
        /// Node name.
        node: String,
    },
    /// Mark the node schedulable.
    Uncordon {
        /// Node name.
        node: String,
    },
    /// Add (or update) a taint.
    Taint {
        /// Node name.
        node: String,
        /// The taint.
        taint: Taint,
    },
    /// Remove the taint with this key and effect.
    RemoveTaint {
        /// Node name.
        node: String,
        /// Taint key.
        key: String,
        /// Taint effect.
        effect: TaintEffect,
    },
    /// Set a label.
    Label {
        /// Node name.
        node: String,
        /// Label key.
        key: String,
        /// Label value.
        value: String,
    },
    /// Remove a label.
    RemoveLabel {
        /// Node name.
        node: String,
        /// Label key.
        key: String,
    },
}

impl NodeOp {
    /// The node the operation applies to.
    pub fn node(&self) -> &str {
        match self {
            NodeOp::Cordon { node }
            | NodeOp::Uncordon { node }
            | NodeOp::Taint { node, .. }
            | NodeOp::RemoveTaint { node, .. }
            | NodeOp::Label { node, .. }
            | NodeOp::RemoveLabel { node, .. } => node,
        }
    }
}

/// A pod to evict through the Eviction API (which honours PodDisruptionBudgets).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Eviction {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub pod: String,
    /// Why (recorded in an Event).
    pub reason: String,
}

/// Type of a Kubernetes Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// A Kubernetes Event to record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Normal or Warning.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// Short CamelCase reason, for example `Cordoned`.
    pub reason: String,
    /// What happened.
    pub message: String,
    /// The object the event is about; the reconciled object when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regarding: Option<ObjectRef>,
}

/// An outbound webhook call (signed with the key in `secret`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Unique id, sent as a header so receivers can drop duplicates.
    pub id: String,
    /// Where to POST.
    pub url: String,
    /// Secret with the HMAC key: namespace, name and key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<(String, String, String)>,
    /// JSON body.
    pub body: Value,
    /// How long to wait for the receiver, milliseconds (the executor's default when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// An e-mail, sent through the operator's SMTP server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Email {
    /// Unique id: the Message-ID's local part, so receivers can drop duplicates.
    pub id: String,
    /// Recipients (addresses).
    pub to: Vec<String>,
    /// Subject line.
    pub subject: String,
    /// Plain-text body.
    pub text: String,
}

/// What came of delivering one [`Notification`] or [`Email`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The notification's id.
    pub id: String,
    /// The receiver's answer, when it answered: an HTTP status, or the SMTP server's reply code
    /// to an e-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Why it failed: no answer (connection refused, timeout, the signing key unreadable), or
    /// the SMTP server's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Delivery {
    /// Answered with a 2xx status.
    pub fn succeeded(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// Why it did not succeed, in a few words (`None` when it did).
    pub fn failure(&self) -> Option<String> {
        match (self.status, &self.error) {
            _ if self.succeeded() => None,
            (_, Some(e)) => Some(e.clone()),
            (Some(s), None) => Some(format!("answered HTTP {s}")),
            (None, None) => Some("no answer".to_owned()),
        }
    }
}

/// Reason of the Warning Event a Plan records for a child it could not build
/// ([`Plan::apply_built`]).
pub const CHILD_NOT_BUILT: &str = "RenderFailed";

/// What a reconcile decided. `S` is the status type of the reconciled object.
///
/// An empty Plan ([`Plan::is_noop`]) means "nothing to do"; the executor then makes no API
/// call at all.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan<S> {
    /// Children to create or update (server-side apply, owner reference to the object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply: Vec<Child>,
    /// Objects to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<ObjectRef>,
    /// New status of the object; `None` leaves it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<S>,
    /// Node operations, in order for each node (the executor may change several nodes at
    /// once); all of them are applied before any eviction.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_ops: Vec<NodeOp>,
    /// Pods to evict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evictions: Vec<Eviction>,
    /// Events to record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// Webhooks to call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<Notification>,
    /// E-mails to send.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emails: Vec<Email>,
    /// Reconcile again after this many milliseconds (on top of watch events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
}

impl<S> Default for Plan<S> {
    fn default() -> Self {
        Plan {
            apply: Vec::new(),
            delete: Vec::new(),
            status: None,
            node_ops: Vec::new(),
            evictions: Vec::new(),
            events: Vec::new(),
            notifications: Vec::new(),
            emails: Vec::new(),
            requeue_after_ms: None,
        }
    }
}

impl<S> Plan<S> {
    /// An empty Plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when the Plan asks for no change at all (a requeue alone is not a change).
    pub fn is_noop(&self) -> bool {
        self.apply.is_empty()
            && self.delete.is_empty()
            && self.status.is_none()
            && self.node_ops.is_empty()
            && self.evictions.is_empty()
            && self.events.is_empty()
            && self.notifications.is_empty()
            && self.emails.is_empty()
    }

    /// When to reconcile again.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after_ms.map(Duration::from_millis)
    }

    /// Asks for a reconcile after `after`; keeps the earlier of two requests.
    pub fn requeue(&mut self, after: Duration) -> &mut Self {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        self.requeue_after_ms = Some(self.requeue_after_ms.map_or(ms, |cur| cur.min(ms)));
        self
    }

    /// Adds a child to apply.
    pub fn apply_child(&mut self, child: Child) -> &mut Self {
        self.apply.push(child);
        self
    }

    /// Adds a child that was built from a typed object, or, when it could not be built, a
    /// Warning Event [`CHILD_NOT_BUILT`] that says which and why.
    ///
    /// # Guarantees
    /// This is the one failure policy of every reconcile's children: a child that cannot be
    /// built is never dropped silently and never panics; the rest of the Plan stands, and the
    /// Event tells the object's owner.
    pub fn apply_built(&mut self, child: Result<Child>) -> &mut Self {
        match child {
            Ok(c) => self.apply_child(c),
            Err(e) => self.event(EventType::Warning, CHILD_NOT_BUILT, e.to_string()),
        }
    }

    /// Adds an Event about the reconciled object.
    pub fn event(
        &mut self,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> &mut Self {
        self.events.push(Event {
            type_,
            reason: reason.to_owned(),
            message: message.into(),
            regarding: None,
        });
        self
    }

    /// Sets `desired` as the new status unless it equals `current`, so an unchanged status
    /// causes no patch.
    pub fn set_status_if_changed(&mut self, current: Option<&S>, desired: S) -> &mut Self
    where
        S: PartialEq,
    {
        if current != Some(&desired) {
            self.status = Some(desired);
        }
        self
    }

    /// Appends everything of `other` to this Plan; the earlier requeue wins and `other`'s
    /// status replaces this one's when it has one.
    pub fn merge(&mut self, other: Plan<S>) -> &mut Self {
        let requeue = other.requeue_after();
        self.apply.extend(other.apply);
        self.delete.extend(other.delete);
        if other.status.is_some() {
            self.status = other.status;
        }
        self.node_ops.extend(other.node_ops);
        self.evictions.extend(other.evictions);
        self.events.extend(other.events);
        self.notifications.extend(other.notifications);
        self.emails.extend(other.emails);
        if let Some(after) = requeue {
            self.requeue(after);
        }
        self
    }

    /// Sorts children, deletions and evictions by identity and removes duplicates, so two
    /// Plans built in different orders compare equal. Node operations and events keep their
    /// order (it matters: cordon before evict).
    pub fn normalize(&mut self) -> &mut Self {
        self.apply.sort_by(|a, b| a.object_ref.cmp(&b.object_ref));
        self.apply.dedup_by(|a, b| a.object_ref == b.object_ref);
        self.delete.sort();
        self.delete.dedup();
        self.evictions.sort();
        self.evictions.dedup();
        self
    }

    /// Converts the status type (for example to JSON for a generic executor).
    pub fn map_status<T>(self, f: impl FnOnce(S) -> T) -> Plan<T> {
        Plan {
            apply: self.apply,
            delete: self.delete,
            status: self.status.map(f),
            node_ops: self.node_ops,
            evictions: self.evictions,
            events: self.events,
            notifications: self.notifications,
            emails: self.emails,
            requeue_after_ms: self.requeue_after_ms,
        }
    }

    /// One line per action, for `--dry-run` output and logs.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for c in &self.apply {
            lines.push(format!("apply {}", c.object_ref));
        }
        for d in &self.delete {
            lines.push(format!("delete {d}"));
        }
        if self.status.is_some() {
            lines.push("update status".to_owned());
        }
        for op in &self.node_ops {
            lines.push(match op {
                NodeOp::Cordon { node } => format!("cordon node {node}"),
                NodeOp::Uncordon { node } => format!("uncordon node {node}"),
                NodeOp::Taint { node, taint } => {
                    format!(
                        "taint node {node} {}={}:{:?}",
                        taint.key, taint.value, taint.effect
                    )
                }
                NodeOp::RemoveTaint { node, key, effect } => {
                    format!("untaint node {node} {key}:{effect:?}")
                }
                NodeOp::Label { node, key, value } => format!("label node {node} {key}={value}"),
                NodeOp::RemoveLabel { node, key } => format!("unlabel node {node} {key}"),
            });
        }
        for e in &self.evictions {
            lines.push(format!(
                "evict pod {}/{} ({})",
                e.namespace, e.pod, e.reason
            ));
        }
        for e in &self.events {
            lines.push(format!("event {:?} {}: {}", e.type_, e.reason, e.message));
        }
        for n in &self.notifications {
            lines.push(format!("notify {} ({})", n.url, n.id));
        }
        for m in &self.emails {
            lines.push(format!("e-mail {} ({})", m.to.join(", "), m.id));
        }
        if let Some(ms) = self.requeue_after_ms {
            lines.push(format!("requeue after {ms}ms"));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn ns(name: &str) -> Child {
        Child::from_resource(&Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn an_empty_plan_is_a_noop_even_with_a_requeue() {
        let mut plan: Plan<()> = Plan::new();
        assert!(plan.is_noop());
        plan.requeue(Duration::from_secs(5));
        assert!(plan.is_noop());
        plan.event(EventType::Normal, "Seen", "hello");
        assert!(!plan.is_noop());
    }

    #[test]
    fn the_earlier_requeue_wins() {
        let mut plan: Plan<()> = Plan::new();
        plan.requeue(Duration::from_secs(30))
            .requeue(Duration::from_secs(5));
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
        plan.requeue(Duration::from_secs(60));
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn an_unchanged_status_is_not_written() {
        let mut plan: Plan<i32> = Plan::new();
        plan.set_status_if_changed(Some(&3), 3);
        assert!(plan.status.is_none());
        plan.set_status_if_changed(Some(&3), 4);
        assert_eq!(plan.status, Some(4));
        let mut fresh: Plan<i32> = Plan::new();
        fresh.set_status_if_changed(None, 1);
        assert_eq!(fresh.status, Some(1));
    }

    #[test]
    fn children_carry_api_version_kind_and_identity() {
        let child = ns("tenant-a");
        assert_eq!(
            child.object_ref,
            ObjectRef::cluster("v1", "Namespace", "tenant-a")
        );
        assert_eq!(child.object["apiVersion"], "v1");
        assert_eq!(child.object["kind"], "Namespace");
        assert_eq!(child.object_ref.to_string(), "Namespace/tenant-a");
    }

    #[test]
    fn a_custom_resource_child_carries_its_group_version_and_kind_too() {
        let job = gryvia_types::testing::ai_job("ns", "train", "img");
        let child = Child::from_resource(&job).unwrap();
        assert_eq!(
            child.object_ref,
            ObjectRef::namespaced("gryvia.io/v1alpha1", "GryviaAIJob", "ns", "train")
        );
        assert_eq!(child.object["kind"], "GryviaAIJob");
        let mut unnamed = job;
        unnamed.metadata.name = None;
        assert!(Child::from_resource(&unnamed).is_err());
    }

    #[test]
    fn an_unnamed_child_is_an_error() {
        let err = Child::from_resource(&Namespace::default()).unwrap_err();
        assert!(err.to_string().contains("Namespace"), "{err}");
    }

    #[test]
    fn a_child_that_cannot_be_built_becomes_a_warning_event() {
        let mut plan: Plan<()> = Plan::new();
        plan.apply_built(Child::from_resource(&Namespace::default()));
        plan.apply_built(Ok(ns("a")));
        assert_eq!(plan.apply.len(), 1);
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].type_, EventType::Warning);
        assert_eq!(plan.events[0].reason, CHILD_NOT_BUILT);
        assert!(plan.events[0].message.contains("Namespace"));
    }

    #[test]
    fn normalize_makes_order_irrelevant_and_drops_duplicates() {
        let mut a: Plan<()> = Plan::new();
        a.apply_child(ns("b"))
            .apply_child(ns("a"))
            .apply_child(ns("a"));
        let mut b: Plan<()> = Plan::new();
        b.apply_child(ns("a")).apply_child(ns("b"));
        a.normalize();
        b.normalize();
        assert_eq!(a, b);
        assert_eq!(a.apply.len(), 2);
    }

    #[test]
    fn merge_concatenates_and_keeps_the_earlier_requeue() {
        let mut a: Plan<i32> = Plan::new();
        a.apply_child(ns("a")).requeue(Duration::from_secs(10));
        let mut b: Plan<i32> = Plan::new();
        b.apply_child(ns("b")).requeue(Duration::from_secs(3));
        b.status = Some(7);
        a.merge(b);
        assert_eq!(a.apply.len(), 2);
        assert_eq!(a.status, Some(7));
        assert_eq!(a.requeue_after(), Some(Duration::from_secs(3)));
    }

    #[test]
    fn summary_lists_every_action_in_order() {
        let mut plan: Plan<()> = Plan::new();
        plan.node_ops.push(NodeOp::Cordon { node: "n1".into() });
        plan.node_ops.push(NodeOp::Taint {
            node: "n1".into(),
            taint: Taint {
                key: "k".into(),
                value: "v".into(),
                effect: TaintEffect::NoSchedule,
            },
        });
        plan.evictions.push(Eviction {
            namespace: "ns".into(),
            pod: "p".into(),
            reason: "drain".into(),
        });
        assert_eq!(
            plan.summary(),
            vec![
                "cordon node n1",
                "taint node n1 k=v:NoSchedule",
                "evict pod ns/p (drain)"
            ]
        );
        assert_eq!(plan.node_ops[1].node(), "n1");
    }

    #[test]
    fn a_plan_round_trips_through_json() {
        let mut plan: Plan<i32> = Plan::new();
        plan.apply_child(ns("a"))
            .event(EventType::Warning, "Bad", "x")
            .requeue(Duration::from_millis(1500));
        plan.status = Some(1);
        let json = serde_json::to_string(&plan).unwrap();
        let back: Plan<i32> = serde_json::from_str(&json).unwrap();
        assert_eq!(plan, back);
    }

    #[test]
    fn map_status_keeps_everything_else() {
        let mut plan: Plan<i32> = Plan::new();
        plan.status = Some(2);
        plan.requeue(Duration::from_secs(1));
        let mapped = plan.map_status(|s| s.to_string());
        assert_eq!(mapped.status.as_deref(), Some("2"));
        assert_eq!(mapped.requeue_after(), Some(Duration::from_secs(1)));
    }
}
