//! [`CachedPod`]: what Gryvia's controllers read of a pod, read straight from the API's JSON.
//!
//! An operator that watches every pod of a fleet holds tens of thousands of them. A typed
//! k8s-openapi `Pod` takes about 9 KiB in memory even with the fields nobody reads dropped (its
//! structs are large: a `Container` alone is 2 KiB of mostly empty options, and each resource
//! list is a B-tree node); a `CachedPod` is deserialized from the same JSON but keeps only the
//! metadata, the node, the phase and what each container asks for, so nothing else is ever
//! allocated. The policies of `gryvia-reconcile` read pods through its `facts::PodView`, which
//! both types implement.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::core::{NamespaceResourceScope, Resource};
use serde::{Deserialize, Deserializer};

/// The annotations a [`CachedPod`] keeps: those Gryvia's policies read of any pod (whether it
/// is a static pod, which cannot be evicted). Every other annotation is left out (a B-tree
/// node of annotations is half a KiB even for one entry).
pub const KEPT_ANNOTATIONS: [&str; 1] = [crate::labels::MIRROR_POD];

/// A pod as the operators' caches hold it: its metadata (without managed fields and with only
/// the [`KEPT_ANNOTATIONS`]), the node it is bound to, its phase, its own address, and what each
/// of its containers (not init containers) asks for. Listed and watched as `v1` `pods`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    /// The pod's metadata, without managed fields, with only the [`KEPT_ANNOTATIONS`].
    pub metadata: ObjectMeta,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.podIP`, when the pod has an address of its own (not `spec.hostNetwork`, whose
    /// address is its node's).
    pub pod_ip: Option<String>,
    /// Per container (`spec.containers`, in order): the resources it asks for, each its
    /// request, or its limit where it sets no request (the API server defaults a missing
    /// request to the limit; for extended resources such as GPUs the two must be equal).
    pub containers: Vec<Vec<(String, Quantity)>>,
}

impl CachedPod {
    /// The quantity of `resource` container `c` asks for ([`CachedPod::containers`]).
    pub fn asks(&self, c: usize, resource: &str) -> Option<&Quantity> {
        self.containers
            .get(c)?
            .iter()
            .find(|(name, _)| name == resource)
            .map(|(_, q)| q)
    }
}

/// The metadata of a pod as JSON has it, without `managedFields` (never allocated).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaJson {
    name: Option<String>,
    namespace: Option<String>,
    generate_name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ContainerJson {
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecJson {
    node_name: Option<String>,
    #[serde(default)]
    host_network: bool,
    #[serde(default)]
    containers: Vec<ContainerJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusJson {
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

#[derive(Deserialize)]
struct PodJson {
    metadata: Option<MetaJson>,
    spec: Option<SpecJson>,
    status: Option<StatusJson>,
}

/// What a container with `resources` asks for: its requests, then the limits of resources it
/// sets no request for (what the API server defaults such a request to). The one reading of
/// [`CachedPod::containers`] and of a whole pod's containers alike.
pub fn asked(resources: &ResourceRequirements) -> impl Iterator<Item = (&String, &Quantity)> {
    let requests = resources.requests.as_ref();
    requests.into_iter().flatten().chain(
        resources
            .limits
            .iter()
            .flatten()
            .filter(move |(name, _)| requests.is_none_or(|r| !r.contains_key(*name))),
    )
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pod = PodJson::deserialize(d)?;
        let metadata = pod.metadata.map_or_else(ObjectMeta::default, |m| {
            let annotations = m
                .annotations
                .map(|mut a| {
                    a.retain(|k, _| KEPT_ANNOTATIONS.contains(&k.as_str()));
                    a
                })
                .filter(|a| !a.is_empty());
            ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                generate_name: m.generate_name,
                uid: m.uid,
                resource_version: m.resource_version,
                generation: m.generation,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                labels: m.labels,
                annotations,
                owner_references: m.owner_references,
                finalizers: m.finalizers,
                managed_fields: None,
                self_link: None,
            }
        });
        let host_network = pod.spec.as_ref().is_some_and(|s| s.host_network);
        let (node_name, containers) = pod.spec.map_or((None, Vec::new()), |s| {
            let containers: Vec<_> = s
                .containers
                .iter()
                .map(|c| {
                    c.resources.as_ref().map_or_else(Vec::new, |r| {
                        asked(r).map(|(n, q)| (n.clone(), q.clone())).collect()
                    })
                })
                .collect();
            (s.node_name, containers)
        });
        let (phase, pod_ip) = pod.status.map_or((None, None), |s| {
            (s.phase, s.pod_ip.filter(|_| !host_network))
        });
        Ok(CachedPod {
            metadata,
            node_name,
            phase,
            pod_ip,
            containers,
        })
    }
}

impl Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group((): &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version((): &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn api_version((): &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural((): &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(v: serde_json::Value) -> CachedPod {
        serde_json::from_value(v).expect("a pod")
    }

    #[test]
    fn keeps_metadata_node_phase_and_what_containers_ask_for() {
        let p = pod(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "w-0", "namespace": "team", "uid": "u1", "resourceVersion": "7",
                "labels": {"gryvia.io/job-name": "train"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}",
                    "batch.kubernetes.io/job-completion-index": "0", "kubernetes.io/config.mirror": "x"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j", "controller": true}],
                "deletionTimestamp": "2026-12-04T05:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {
                "nodeName": "gpu-node-3",
                "volumes": [{"name": "v", "emptyDir": {}}],
                "containers": [
                    {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}],
                     "resources": {"limits": {"nvidia.com/gpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "512Mi"}}},
                    {"name": "b", "image": "y"},
                ],
                "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
        }));
        assert_eq!(p.metadata.name.as_deref(), Some("w-0"));
        assert_eq!(p.metadata.resource_version.as_deref(), Some("7"));
        assert!(p.metadata.deletion_timestamp.is_some());
        assert!(p.metadata.managed_fields.is_none());
        let annotations = p.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["kubernetes.io/config.mirror"],
            "only the annotations read"
        );
        assert_eq!(p.metadata.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(p.node_name.as_deref(), Some("gpu-node-3"));
        assert_eq!(p.phase.as_deref(), Some("Running"));
        assert_eq!(p.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(p.containers.len(), 2);
        // A request wins over the limit; a limit alone counts as the request.
        assert_eq!(p.asks(0, "memory"), Some(&Quantity("512Mi".into())));
        assert_eq!(p.asks(0, "nvidia.com/gpu"), Some(&Quantity("2".into())));
        assert_eq!(p.asks(0, "cpu"), Some(&Quantity("1".into())));
        assert!(p.containers[1].is_empty());
        assert_eq!(p.asks(2, "cpu"), None);
    }

    #[test]
    fn a_host_network_pods_address_is_its_nodes_not_its_own() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "agent"},
            "spec": {"nodeName": "n1", "hostNetwork": true},
            "status": {"podIP": "192.168.0.4"},
        }));
        assert_eq!(p.pod_ip, None);
    }

    #[test]
    fn a_pod_with_nothing_set_is_empty_not_an_error() {
        let p = pod(serde_json::json!({"metadata": {"name": "p", "annotations": {"a": "b"}}}));
        assert_eq!(p.metadata.annotations, None);
        assert_eq!(p.node_name, None);
        assert_eq!(p.phase, None);
        assert!(p.containers.is_empty());
        assert_eq!(CachedPod::kind(&()), "Pod");
        assert_eq!(
            CachedPod::url_path(&(), Some("ns")),
            "/api/v1/namespaces/ns/pods"
        );
    }
}
