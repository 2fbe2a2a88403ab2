//! One reading of each Kubernetes fact Gryvia's policies decide on, over the k8s-openapi
//! types: whether a node is quarantined, cordoned or in maintenance, its GPU product and
//! GPUs; a pod's phase, node and GPUs; a namespace's tenant.
//!
//! Every World of this crate (and every observer in `gryvia-client`) reads these facts
//! through the functions here, so that two controllers never disagree about the same node or
//! pod.
//!
//! What it is not: no policy. What to do with a quarantined node or a finished pod is for
//! the controllers to decide.

use std::collections::BTreeMap;
use std::fmt;

use gryvia_types::{CachedPod, labels};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    label(&node.metadata, key)
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// Whether `labels` carry every key and value of the equality selector `selector` (a
/// `nodeSelector` map; an empty one selects everything).
pub fn labels_match(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The health check that quarantined `node`: the value of its `gryvia.io/gpu-unhealthy`
/// taint with effect `NoSchedule` (the taint is the record of a quarantine, see
/// [`crate::health`]); `None` when the node is not quarantined.
pub fn quarantined_by(node: &Node) -> Option<String> {
    taints(node)
        .iter()
        .find(|t| t.key == labels::GPU_UNHEALTHY_TAINT && t.effect == labels::NO_SCHEDULE)
        .map(|t| t.value.clone().unwrap_or_default())
}

/// Whether `node` is cordoned (`spec.unschedulable`).
pub fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The reason `node` is in manual maintenance (its `gryvia.io/maintenance` annotation), when
/// it is.
pub fn maintenance_reason(node: &Node) -> Option<&str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::MAINTENANCE))
        .map(String::as_str)
}

/// Whether `node` is in manual maintenance (`gryvia maintenance start`): while it is, no
/// controller uncordons it.
pub fn in_maintenance(node: &Node) -> bool {
    maintenance_reason(node).is_some()
}

/// The reservation holding `node`: its `gryvia.io/reserved` label (the record of the hold;
/// the reservation controller sets the label and the taint together).
pub fn reserved_by(node: &Node) -> Option<String> {
    node_label(node, labels::RESERVED_TAINT).map(str::to_owned)
}

/// The reservation whose `gryvia.io/reserved` taint keeps other pods off `node` (any
/// effect), when it has one.
pub fn reservation_taint(node: &Node) -> Option<String> {
    taints(node)
        .iter()
        .find(|t| t.key == labels::RESERVED_TAINT)
        .map(|t| t.value.clone().unwrap_or_default())
}

/// The GPU product of `node` (the `nvidia.com/gpu.product` label of GPU feature discovery).
pub fn gpu_product(node: &Node) -> Option<&str> {
    gpu_product_of(&node.metadata)
}

/// [`gpu_product`] from a node's metadata alone (what a metadata-only cache of nodes holds).
pub fn gpu_product_of(node: &ObjectMeta) -> Option<&str> {
    label(node, labels::NVIDIA_GPU_PRODUCT)
}

/// A whole count of a quantity (0 when it is not one, as for `500m` or a malformed value).
fn count(q: Option<&Quantity>) -> Option<i64> {
    q.map(|q| q.0.trim().parse().unwrap_or(0))
}

fn node_resource(node: &Node, allocatable: bool) -> Option<&Quantity> {
    let status = node.status.as_ref()?;
    let map = if allocatable {
        status.allocatable.as_ref()
    } else {
        status.capacity.as_ref()
    };
    map?.get(labels::NVIDIA_GPU_RESOURCE)
}

/// The GPUs of `node` pods can be placed against: `status.allocatable` of `nvidia.com/gpu`,
/// which is what the scheduler counts (capacity less what the device plugin holds back, an
/// unhealthy GPU for example). Only when the node reports no allocatable GPUs at all is its
/// `status.capacity` read instead; 0 without either.
pub fn gpus_allocatable(node: &Node) -> i64 {
    count(node_resource(node, true))
        .or_else(|| count(node_resource(node, false)))
        .unwrap_or(0)
}

/// The GPUs `node` has (`status.capacity` of `nvidia.com/gpu`), counting those the device
/// plugin holds back. The health checks target nodes by it: a node whose every GPU is
/// unhealthy has none allocatable and is still a GPU node to check. `status.allocatable`
/// when the node reports no capacity; 0 without either.
pub fn gpus_capacity(node: &Node) -> i64 {
    count(node_resource(node, false))
        .or_else(|| count(node_resource(node, true)))
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Pods
// ---------------------------------------------------------------------------------------------

/// A pod's `status.phase`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum PodPhase {
    /// Accepted, not all containers running yet (also a pod without a phase).
    #[default]
    Pending,
    /// Bound to a node, a container running.
    Running,
    /// Every container ended with success.
    Succeeded,
    /// Every container ended, one with a failure.
    Failed,
    /// The state could not be obtained (or a phase this version does not know).
    Unknown,
}

impl PodPhase {
    /// Reads a phase as Kubernetes writes it; the empty text is Pending, anything unknown is
    /// Unknown.
    pub fn parse(text: &str) -> Self {
        match text {
            "" | "Pending" => PodPhase::Pending,
            "Running" => PodPhase::Running,
            "Succeeded" => PodPhase::Succeeded,
            "Failed" => PodPhase::Failed,
            _ => PodPhase::Unknown,
        }
    }

    /// The phase as Kubernetes writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }

    /// Succeeded or Failed: the pod runs no more and holds nothing.
    pub fn is_finished(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// Pending or Running: the pod is alive.
    pub fn is_live(self) -> bool {
        matches!(self, PodPhase::Pending | PodPhase::Running)
    }
}

impl fmt::Display for PodPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What Gryvia's policies read of a pod, from a whole k8s-openapi `Pod` (read from the API
/// for one job) or from a cache's [`CachedPod`] (every pod of a fleet, kept small).
pub trait PodView {
    /// The pod's metadata.
    fn pod_meta(&self) -> &ObjectMeta;
    /// `spec.nodeName`.
    fn node_name(&self) -> Option<&str>;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// Calls `f` with container index, resource name and quantity for what each container
    /// (not init containers) asks for: its request of a resource, or its limit where it sets
    /// no request (what the API server defaults the request to).
    fn each_asked(&self, f: &mut dyn FnMut(usize, &str, &Quantity));
}

impl PodView for Pod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn node_name(&self) -> Option<&str> {
        self.spec.as_ref().and_then(|s| s.node_name.as_deref())
    }
    fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
    fn each_asked(&self, f: &mut dyn FnMut(usize, &str, &Quantity)) {
        let Some(spec) = &self.spec else { return };
        for (i, c) in spec.containers.iter().enumerate() {
            for (name, q) in c.resources.iter().flat_map(gryvia_types::pods::asked) {
                f(i, name, q);
            }
        }
    }
}

impl PodView for CachedPod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }
    fn phase(&self) -> Option<&str> {
        self.phase.as_deref()
    }
    fn each_asked(&self, f: &mut dyn FnMut(usize, &str, &Quantity)) {
        for (i, c) in self.containers.iter().enumerate() {
            for (name, q) in c {
                f(i, name, q);
            }
        }
    }
}

/// A pod behind a reference or an `Arc` (as a cache's store hands it out) reads as the pod.
macro_rules! pod_view_through {
    ($($pointer:ty),*) => {$(
        impl<P: PodView + ?Sized> PodView for $pointer {
            fn pod_meta(&self) -> &ObjectMeta {
                (**self).pod_meta()
            }
            fn node_name(&self) -> Option<&str> {
                (**self).node_name()
            }
            fn phase(&self) -> Option<&str> {
                (**self).phase()
            }
            fn each_asked(&self, f: &mut dyn FnMut(usize, &str, &Quantity)) {
                (**self).each_asked(f);
            }
        }
    )*};
}
pod_view_through!(&P, std::sync::Arc<P>);

/// The phase of `pod` (Pending until the kubelet reports one).
pub fn pod_phase(pod: &(impl PodView + ?Sized)) -> PodPhase {
    pod.phase().map_or(PodPhase::Pending, PodPhase::parse)
}

/// Whether `pod` has finished (Succeeded or Failed).
pub fn finished(pod: &(impl PodView + ?Sized)) -> bool {
    pod_phase(pod).is_finished()
}

/// The node `pod` is bound to (`spec.nodeName`).
pub fn node_of(pod: &(impl PodView + ?Sized)) -> Option<&str> {
    pod.node_name()
}

/// The GPUs `pod` asks for: the sum over its containers of `nvidia.com/gpu` (see
/// [`PodView::each_asked`]; for an extended resource the request and the limit are equal when
/// both are set). Init containers are not counted: they run before the containers and hold
/// no GPU beside them.
pub fn gpus_held(pod: &(impl PodView + ?Sized)) -> i64 {
    let mut sum = 0;
    pod.each_asked(&mut |_, name, q| {
        if name == labels::NVIDIA_GPU_RESOURCE
            && let Ok(n) = q.0.trim().parse::<i64>()
        {
            sum += n;
        }
    });
    sum
}

/// Whether `pod` holds its GPUs now: bound to a node and not finished.
pub fn holds_gpus(pod: &(impl PodView + ?Sized)) -> bool {
    node_of(pod).is_some() && !finished(pod)
}

/// Whether `pod` is a static (mirror) pod, which the API cannot evict.
pub fn is_mirror(pod: &(impl PodView + ?Sized)) -> bool {
    pod.pod_meta()
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::MIRROR_POD))
}

/// Kind of the controller owning `pod` (`DaemonSet`, `Job`, ...), if any.
pub fn controller_kind(pod: &(impl PodView + ?Sized)) -> Option<&str> {
    pod.pod_meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str())
}

// ---------------------------------------------------------------------------------------------
// Namespaces
// ---------------------------------------------------------------------------------------------

/// The tenant a namespace belongs to, from its labels: the `gryvia.io/tenant` label, which
/// the tenant controller puts on `tenant-<name>` and which an administrator may put on any
/// namespace to give it to a tenant.
///
/// This is the rule quotas, admission, metering and budgets share. Two neighbours differ on
/// purpose: a usage record of a namespace without the label is booked to the namespace's own
/// name ([`crate::metering`]), and the eBPF collector lets a pod's own label override its
/// namespace's for traffic attribution.
pub fn tenant_of_namespace(labels: &BTreeMap<String, String>) -> Option<String> {
    labels.get(labels::TENANT).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node(v: Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn tainted(key: &str, value: &str, effect: &str) -> Node {
        node(json!({"metadata": {"name": "n"},
            "spec": {"taints": [{"key": key, "value": value, "effect": effect}]}}))
    }

    #[test]
    fn a_node_is_quarantined_by_the_no_schedule_taint_of_its_check() {
        assert_eq!(
            quarantined_by(&tainted(labels::GPU_UNHEALTHY_TAINT, "hc", "NoSchedule")).as_deref(),
            Some("hc")
        );
        assert_eq!(
            quarantined_by(&tainted(labels::GPU_UNHEALTHY_TAINT, "hc", "NoExecute")),
            None
        );
        assert_eq!(quarantined_by(&node(json!({"metadata": {}}))), None);
    }

    #[test]
    fn a_node_is_cordoned_when_it_is_unschedulable() {
        assert!(cordoned(&node(json!({"spec": {"unschedulable": true}}))));
        assert!(!cordoned(&node(json!({"spec": {}}))));
        assert!(!cordoned(&Node::default()));
    }

    #[test]
    fn maintenance_is_the_annotation_with_its_reason() {
        let n = node(json!({"metadata": {"annotations": {labels::MAINTENANCE: "new PSU"}}}));
        assert!(in_maintenance(&n));
        assert_eq!(maintenance_reason(&n), Some("new PSU"));
        assert!(!in_maintenance(&Node::default()));
    }

    #[test]
    fn a_reservation_holds_a_node_by_label_and_keeps_pods_off_by_taint() {
        let n = node(json!({"metadata": {"labels": {labels::RESERVED_TAINT: "r1"}}}));
        assert_eq!(reserved_by(&n).as_deref(), Some("r1"));
        assert_eq!(reservation_taint(&n), None);
        let t = tainted(labels::RESERVED_TAINT, "r2", "NoSchedule");
        assert_eq!(reservation_taint(&t).as_deref(), Some("r2"));
        assert_eq!(reserved_by(&t), None);
    }

    #[test]
    fn the_gpu_product_is_the_feature_discovery_label() {
        let n = node(json!({"metadata": {"labels": {labels::NVIDIA_GPU_PRODUCT: "H100"}}}));
        assert_eq!(gpu_product(&n), Some("H100"));
        assert_eq!(gpu_product(&Node::default()), None);
    }

    #[test]
    fn allocatable_gpus_are_what_the_scheduler_counts_with_capacity_as_fallback() {
        let both = node(json!({"status": {
            "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}}}));
        assert_eq!(gpus_allocatable(&both), 7);
        let capacity_only = node(json!({"status": {"capacity": {"nvidia.com/gpu": "8"}}}));
        assert_eq!(gpus_allocatable(&capacity_only), 8);
        let cpu = node(json!({"status": {"allocatable": {"cpu": "4"}}}));
        assert_eq!(gpus_allocatable(&cpu), 0);
        let broken = node(json!({"status": {"allocatable": {"nvidia.com/gpu": "lots"}}}));
        assert_eq!(gpus_allocatable(&broken), 0);
    }

    #[test]
    fn capacity_counts_the_gpus_the_device_plugin_holds_back() {
        let both = node(json!({"status": {
            "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "0"}}}));
        assert_eq!(gpus_capacity(&both), 8);
        let allocatable_only = node(json!({"status": {"allocatable": {"nvidia.com/gpu": "2"}}}));
        assert_eq!(gpus_capacity(&allocatable_only), 2);
        assert_eq!(gpus_capacity(&Node::default()), 0);
    }

    #[test]
    fn phases_read_as_kubernetes_writes_them() {
        for p in [
            PodPhase::Pending,
            PodPhase::Running,
            PodPhase::Succeeded,
            PodPhase::Failed,
            PodPhase::Unknown,
        ] {
            assert_eq!(PodPhase::parse(p.as_str()), p);
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(PodPhase::parse(""), PodPhase::Pending);
        assert_eq!(PodPhase::parse("Evicted"), PodPhase::Unknown);
        assert!(PodPhase::Failed.is_finished() && !PodPhase::Unknown.is_finished());
        assert!(PodPhase::Pending.is_live() && !PodPhase::Unknown.is_live());
    }

    #[test]
    fn a_pod_without_a_phase_is_pending_and_finished_pods_are_succeeded_or_failed() {
        assert_eq!(pod_phase(&Pod::default()), PodPhase::Pending);
        let done = pod(json!({"status": {"phase": "Succeeded"}}));
        assert_eq!(pod_phase(&done), PodPhase::Succeeded);
        assert!(finished(&done));
        assert!(!finished(&pod(json!({"status": {"phase": "Running"}}))));
    }

    #[test]
    fn a_pods_node_is_its_binding() {
        let p = pod(json!({"spec": {"nodeName": "n1", "containers": []}}));
        assert_eq!(node_of(&p), Some("n1"));
        assert_eq!(node_of(&Pod::default()), None);
    }

    #[test]
    fn a_pod_holds_the_gpus_of_its_containers_limits_else_requests() {
        let p = pod(json!({"spec": {
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            {"name": "c"}
        ]}}));
        assert_eq!(gpus_held(&p), 3, "init containers are not counted");
        assert_eq!(gpus_held(&Pod::default()), 0);
    }

    #[test]
    fn only_a_bound_unfinished_pod_holds_its_gpus() {
        let bound = |phase: &str| {
            pod(json!({"spec": {"nodeName": "n", "containers": []}, "status": {"phase": phase}}))
        };
        assert!(holds_gpus(&bound("Running")));
        assert!(holds_gpus(&bound("Pending")));
        assert!(!holds_gpus(&bound("Failed")));
        assert!(!holds_gpus(&pod(json!({"spec": {"containers": []}}))));
    }

    #[test]
    fn mirror_pods_carry_the_kubelets_annotation() {
        let m = pod(json!({"metadata": {"annotations": {labels::MIRROR_POD: "x"}}}));
        assert!(is_mirror(&m));
        assert!(!is_mirror(&Pod::default()));
    }

    #[test]
    fn the_controller_kind_is_the_owner_marked_controller() {
        let p = pod(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "1"},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "2", "controller": true}
        ]}}));
        assert_eq!(controller_kind(&p), Some("DaemonSet"));
        assert_eq!(controller_kind(&Pod::default()), None);
    }

    #[test]
    fn a_namespaces_tenant_is_its_tenant_label() {
        let labels = BTreeMap::from([(labels::TENANT.to_owned(), "ml".to_owned())]);
        assert_eq!(tenant_of_namespace(&labels).as_deref(), Some("ml"));
        assert_eq!(tenant_of_namespace(&BTreeMap::new()), None);
    }

    /// A container's resources as JSON: each of GPUs, CPU and memory may be a request, a
    /// limit, both (equal for GPUs, as the API server requires for extended resources) or
    /// absent.
    fn resources_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        (0u8..4, 0u32..9, 0u8..4, 1u32..64).prop_map(|(gpu_how, gpus, cpu_how, cpu)| {
            let mut limits = serde_json::Map::new();
            let mut requests = serde_json::Map::new();
            if gpu_how & 1 == 1 {
                limits.insert(labels::NVIDIA_GPU_RESOURCE.into(), json!(gpus.to_string()));
            }
            if gpu_how & 2 == 2 {
                requests.insert(labels::NVIDIA_GPU_RESOURCE.into(), json!(gpus.to_string()));
            }
            if cpu_how & 1 == 1 {
                limits.insert("cpu".into(), json!(format!("{}", cpu * 2)));
            }
            if cpu_how & 2 == 2 {
                requests.insert("cpu".into(), json!(cpu.to_string()));
            }
            let mut r = serde_json::Map::new();
            if !limits.is_empty() {
                r.insert("limits".into(), Value::Object(limits));
            }
            if gpu_how != 0 || cpu_how != 0 {
                r.insert("requests".into(), Value::Object(requests));
            }
            Value::Object(r)
        })
    }

    proptest::proptest! {
        /// The caches' `CachedPod` and the whole `Pod`, read from the same JSON, give every
        /// fact of this module alike.
        #[test]
        fn a_cached_pod_reads_as_the_whole_pod(
            containers in proptest::collection::vec(resources_json(), 0..4),
            node in proptest::option::of("[a-z]{1,3}"),
            phase in proptest::option::of(proptest::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", "Unknown"])),
            mirror in proptest::bool::ANY,
            owner in proptest::option::of(proptest::sample::select(vec!["Job", "DaemonSet"])),
        ) {
            let containers: Vec<Value> = containers
                .into_iter()
                .enumerate()
                .map(|(i, r)| json!({"name": format!("c{i}"), "image": "x", "resources": r}))
                .collect();
            let mut annotations = serde_json::Map::new();
            if mirror {
                annotations.insert(labels::MIRROR_POD.into(), json!("m"));
            }
            let owners: Vec<Value> = owner
                .iter()
                .map(|k| json!({"apiVersion": "v1", "kind": k, "name": "o", "uid": "u", "controller": true}))
                .collect();
            let v = json!({
                "metadata": {"name": "p", "namespace": "ns", "annotations": annotations, "ownerReferences": owners},
                "spec": {"nodeName": node, "containers": containers},
                "status": {"phase": phase},
            });
            let whole = pod(v.clone());
            let cached: CachedPod = serde_json::from_value(v).unwrap();
            proptest::prop_assert_eq!(pod_phase(&whole), pod_phase(&cached));
            proptest::prop_assert_eq!(finished(&whole), finished(&cached));
            proptest::prop_assert_eq!(node_of(&whole), node_of(&cached));
            proptest::prop_assert_eq!(gpus_held(&whole), gpus_held(&cached));
            proptest::prop_assert_eq!(holds_gpus(&whole), holds_gpus(&cached));
            proptest::prop_assert_eq!(is_mirror(&whole), is_mirror(&cached));
            proptest::prop_assert_eq!(controller_kind(&whole), controller_kind(&cached));
            let asked = |p: &dyn PodView| {
                let mut out = Vec::new();
                p.each_asked(&mut |i, n, q| out.push((i, n.to_owned(), q.0.clone())));
                out.sort();
                out
            };
            proptest::prop_assert_eq!(asked(&whole), asked(&cached));
            proptest::prop_assert_eq!(whole.metadata.owner_references, cached.metadata.owner_references);
        }
    }
}
