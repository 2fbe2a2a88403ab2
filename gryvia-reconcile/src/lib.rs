//! Gryvia's policy, as pure functions.
//!
//! Every Gryvia controller is split in three (see `DESIGN.md`, section 2):
//!
//! 1. **observe** (`gryvia-client`): read the object and the part of the world it needs from
//!    the watch caches into a plain struct, the *world*;
//! 2. **decide** (this crate): [`Reconcile::reconcile`]`(&object, &world, now) -> `[`Plan`],
//!    a pure function;
//! 3. **act** (`gryvia-client`): apply the Plan.
//!
//! What this crate is: the [`Plan`] type and the [`Reconcile`] contract, and (as capabilities
//! land) the reconcilers and plug-in policies themselves. What it is not: it does no IO, has
//! no async runtime, no Kubernetes client, no clock (time comes in as `now`) and no global
//! randomness (a seed comes in as an argument). CI fails the build when `tokio`, `hyper`,
//! `reqwest` or `kube-client` appear in its dependency tree.
//!
//! Because a Plan is data, the same reconcile runs unchanged in an operator, a unit test, the
//! Python SDK, a `--dry-run` and a what-if simulation.

pub mod admission;
pub mod aijob;
pub mod budget;
pub mod component_health;
pub mod cron;
pub mod delivery;
pub mod facts;
pub mod gateway;
pub mod health;
pub mod hooks;
pub mod invoice;
pub mod kueue;
pub mod maintenance;
pub mod metering;
pub mod network;
pub mod network_health;
pub mod plan;
pub mod priority;
pub mod queue;
pub mod registry;
pub mod reservation;
pub mod serving;
pub mod storage_health;
pub mod template;
pub mod tenancy;
pub mod tuner;
pub mod workflow;
pub mod workspace;

pub use plan::{
    Child, Delivery, Email, Event, EventType, Eviction, NodeOp, Notification, ObjectRef, Plan,
    Taint, TaintEffect,
};

/// A point in time, passed into every reconcile.
pub type Timestamp = jiff::Timestamp;

/// Errors of this crate. Invalid user input is never an error: it is a status condition
/// (`Ready=False`, reason `InvalidSpec`) in the Plan.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A desired child could not be turned into JSON.
    #[error("serialize child {kind}/{name}: {source}")]
    Serialize {
        /// Kind of the child.
        kind: String,
        /// Name of the child.
        name: String,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// A desired child lacks a name.
    #[error("child of kind {0} has no metadata.name")]
    Unnamed(String),
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The reconcile contract: a pure function from an object, the observed world and the current
/// time to a [`Plan`].
///
/// # Guarantees an implementation must give
/// - Deterministic: the same inputs give the same Plan (use `BTreeMap`s and sorted `Vec`s).
/// - Idempotent: once the world reflects a Plan, reconciling again gives a Plan with nothing
///   to do but (possibly) a requeue.
/// - Level-triggered: everything is derived from `object` and `world`, never from having seen
///   an event.
/// - No IO, no clock, no randomness without a seed in `world` or `self`.
pub trait Reconcile {
    /// The reconciled custom resource.
    type Object;
    /// What the reconcile needs to know about the rest of the cluster.
    type World;
    /// The status the Plan writes back.
    type Status;

    /// Name of the controller (its field manager and metric label).
    fn name(&self) -> &'static str;

    /// Decides what should be done.
    fn reconcile(
        &self,
        object: &Self::Object,
        world: &Self::World,
        now: Timestamp,
    ) -> Plan<Self::Status>;

    /// The finalizer this controller puts on its objects, when their deletion needs a
    /// decision ([`Reconcile::cleanup`]). `None` (the default): no finalizer.
    fn finalizer(&self) -> Option<&'static str> {
        None
    }

    /// Records what came of the Plan's notifications and e-mails in the Plan before the
    /// executor applies it (its status, events, requeue).
    ///
    /// The executor delivers a Plan's notifications and e-mails before anything else and hands
    /// their outcomes here. A controller that keeps its own delivery state (attempts, backoff, giving
    /// up) records them and returns true. The default returns false: the executor then fails
    /// the reconcile when a delivery failed, so it is retried with backoff (at least once).
    fn record_deliveries(
        &self,
        object: &Self::Object,
        plan: &mut Plan<Self::Status>,
        deliveries: &[Delivery],
        now: Timestamp,
    ) -> bool {
        let _ = (object, plan, deliveries, now);
        false
    }

    /// The status to record when applying the Plan failed (an API server or an admission
    /// webhook refused a child, for example), so the object says why instead of only the
    /// operator's log. `None` (the default) records nothing; either way the reconcile is
    /// retried with backoff.
    fn record_failure(
        &self,
        object: &Self::Object,
        error: &str,
        now: Timestamp,
    ) -> Option<Self::Status> {
        let _ = (object, error, now);
        None
    }

    /// Decides what to do when the object is being deleted (only called with a finalizer).
    /// The executor removes the finalizer after applying this Plan. The default does nothing.
    fn cleanup(
        &self,
        object: &Self::Object,
        world: &Self::World,
        now: Timestamp,
    ) -> Plan<Self::Status> {
        let _ = (object, world, now);
        Plan::new()
    }
}
