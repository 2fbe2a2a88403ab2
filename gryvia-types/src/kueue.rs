//! The parts of Kueue's API (`kueue.x-k8s.io/v1beta2`, Kueue v0.17) that the Kueue integration
//! (`--kueue-integration`) writes and reads: ResourceFlavors, ClusterQueues, LocalQueues and
//! WorkloadPriorityClasses it derives from tenants, queues and priority tiers, and the Workloads
//! Kueue makes of batch Jobs.
//!
//! Only the fields Gryvia sets or reads are modelled; others are ignored when reading (serde
//! skips unknown fields) and never written (server-side apply leaves them to their owners).
//! The schemas are Kueue's own CRDs, applied as Kueue ships them; none is generated here.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// Kueue's API group.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The version Gryvia reads and writes (Kueue's storage version since v0.15).
pub const VERSION: &str = "v1beta2";
/// Label on a job naming its LocalQueue.
pub const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";
/// Label on a job naming its WorkloadPriorityClass.
pub const PRIORITY_CLASS: &str = "kueue.x-k8s.io/priority-class";
/// Workload conditions.
pub const QUOTA_RESERVED: &str = "QuotaReserved";
/// The Workload is admitted: its job may run.
pub const ADMITTED: &str = "Admitted";
/// The Workload was evicted (preempted, or its admission withdrawn); it is requeued.
pub const EVICTED: &str = "Evicted";
/// The Workload was preempted (reason `InClusterQueue`, `InCohortReclamation`, ...).
pub const PREEMPTED: &str = "Preempted";
/// The Workload's job finished.
pub const FINISHED: &str = "Finished";

/// A flavor of a resource: the nodes a job admitted to it goes to (their labels).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ResourceFlavor",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Labels of the nodes of this flavor (Kueue adds them to the admitted pods' nodeSelector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
}

/// A ClusterQueue: quota per flavor and resource, a cohort to borrow from, preemption rules.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "ClusterQueue",
    status = "QueueStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    /// Its cohort: queues of one cohort lend each other unused quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort_name: Option<String>,
    /// The namespaces whose LocalQueues may point at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// `StrictFIFO` or `BestEffortFIFO`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queueing_strategy: Option<String>,
    /// Quota.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_groups: Vec<ResourceGroup>,
    /// Preemption rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<ClusterQueuePreemption>,
}

/// Resources whose quota is given together, flavor by flavor (tried in order).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    /// The resources (every flavor lists each, in this order).
    pub covered_resources: Vec<String>,
    /// The flavors.
    pub flavors: Vec<FlavorQuotas>,
}

/// Quota of one flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    /// The ResourceFlavor.
    pub name: String,
    /// Quota per resource.
    pub resources: Vec<ResourceQuota>,
}

/// Quota of one resource of a flavor.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// The resource (`nvidia.com/gpu`, `cpu`, `memory`).
    pub name: String,
    /// Guaranteed.
    pub nominal_quota: Quantity,
    /// Most that may be borrowed from the cohort (unlimited when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// Most of the nominal quota that may be lent to the cohort (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// Preemption rules of a ClusterQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueuePreemption {
    /// `Never`, `LowerPriority` or `Any`: taking back lent quota from the cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_within_cohort: Option<String>,
    /// `Never`, `LowerPriority` or `LowerOrNewerEqualPriority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_cluster_queue: Option<String>,
}

/// What Kueue reports about a ClusterQueue or a LocalQueue.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// `Active` and its reason.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Workloads waiting.
    #[serde(default)]
    pub pending_workloads: i32,
    /// Workloads admitted.
    #[serde(default)]
    pub admitted_workloads: i32,
}

/// A LocalQueue: where jobs of a namespace enter their ClusterQueue.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "LocalQueue",
    namespaced,
    status = "QueueStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    /// The ClusterQueue.
    pub cluster_queue: String,
}

/// A WorkloadPriorityClass: the priority of the workloads whose job names it (label
/// [`PRIORITY_CLASS`]). Its fields are top level, not under `spec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClass {
    /// Name, labels.
    pub metadata: ObjectMeta,
    /// The priority (higher is admitted first and may preempt lower).
    pub value: i32,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl kube::Resource for WorkloadPriorityClass {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(&(): &()) -> std::borrow::Cow<'_, str> {
        "WorkloadPriorityClass".into()
    }
    fn group(&(): &()) -> std::borrow::Cow<'_, str> {
        GROUP.into()
    }
    fn version(&(): &()) -> std::borrow::Cow<'_, str> {
        VERSION.into()
    }
    fn plural(&(): &()) -> std::borrow::Cow<'_, str> {
        "workloadpriorityclasses".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A Workload: Kueue's record of a job waiting for or holding quota (read only here).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kueue.x-k8s.io",
    version = "v1beta2",
    kind = "Workload",
    namespaced,
    status = "WorkloadStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSpec {
    /// Its LocalQueue.
    #[serde(default)]
    pub queue_name: String,
    /// Its priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
}

/// What Kueue reports about a Workload.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// `QuotaReserved`, `Admitted`, `Evicted`, `Preempted`, `Requeued`, `Finished`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Where it was admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<WorkloadAdmission>,
}

/// Where a Workload was admitted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadAdmission {
    /// The ClusterQueue.
    #[serde(default)]
    pub cluster_queue: String,
    /// Flavors per pod set.
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignment>,
}

/// The flavors of one pod set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    /// The pod set (`main` for a batch Job).
    #[serde(default)]
    pub name: String,
    /// Flavor per resource.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// Pods admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i32>,
}
