//! An example of plugging a third-party reconciler into Gryvia's runtime.
//!
//! The policy: a Namespace annotated `example.gryvia.io/gpus: "<N>"` gets a ResourceQuota
//! `example-gpu-quota` limiting `requests.nvidia.com/gpu` to N; removing the annotation removes
//! the quota; a malformed value is reported as a Warning Event and changes nothing.
//!
//! It is written the way Gryvia's own controllers are: a pure [`Reconcile`] implementation
//! (unit-tested without a cluster), an [`Observe`] implementation (here trivial: the namespace
//! itself is the whole world), and the runtime from `gryvia-client` doing the rest (watches,
//! server-side apply, events, backoff, metrics, leader election).

pub mod load;

use gryvia_client::runtime::Observe;
use gryvia_reconcile::{Child, EventType, ObjectRef, Plan, Reconcile, Timestamp};
use k8s_openapi::api::core::v1::Namespace;
use serde_json::json;

/// The annotation read by the example.
pub const ANNOTATION: &str = "example.gryvia.io/gpus";
/// Name of the ResourceQuota it manages.
pub const QUOTA: &str = "example-gpu-quota";

/// The example's pure policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct NamespaceGpuQuota;

impl Reconcile for NamespaceGpuQuota {
    type Object = Namespace;
    type World = ();
    type Status = ();

    fn name(&self) -> &'static str {
        "example-namespace-gpu-quota"
    }

    fn reconcile(&self, ns: &Namespace, _world: &(), _now: Timestamp) -> Plan<()> {
        let mut plan = Plan::new();
        let name = ns.metadata.name.clone().unwrap_or_default();
        let value = ns
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION));
        match value.map(|v| v.parse::<u32>()) {
            None => plan
                .delete
                .push(ObjectRef::namespaced("v1", "ResourceQuota", &name, QUOTA)),
            Some(Ok(gpus)) => {
                let quota = json!({
                    "apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": { "name": QUOTA, "namespace": name },
                    "spec": { "hard": { "requests.nvidia.com/gpu": gpus.to_string() } }
                });
                if let Ok(child) = Child::from_json(quota) {
                    plan.apply_child(child);
                }
            }
            Some(Err(_)) => {
                plan.event(
                    EventType::Warning,
                    "InvalidAnnotation",
                    format!(
                        "{ANNOTATION}: {:?} is not a whole number of GPUs",
                        value.map(String::as_str).unwrap_or("")
                    ),
                );
            }
        }
        plan
    }
}

/// The example's observe half: the namespace is all the reconcile needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoWorld;

#[async_trait::async_trait]
impl Observe for NoWorld {
    type Object = Namespace;
    type World = ();

    async fn observe(&self, _ns: &Namespace) -> gryvia_client::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(annotation: Option<&str>) -> Namespace {
        serde_json::from_value(json!({
            "metadata": { "name": "team-a", "annotations": annotation.map(|a| json!({ ANNOTATION: a })).unwrap_or(json!({})) }
        }))
        .unwrap_or_default()
    }

    #[test]
    fn an_annotated_namespace_gets_a_gpu_quota() {
        let plan = NamespaceGpuQuota.reconcile(&ns(Some("4")), &(), Timestamp::UNIX_EPOCH);
        assert_eq!(plan.apply.len(), 1);
        assert_eq!(
            plan.apply[0].object["spec"]["hard"]["requests.nvidia.com/gpu"],
            "4"
        );
        assert_eq!(
            plan.apply[0].object_ref.namespace.as_deref(),
            Some("team-a")
        );
    }

    #[test]
    fn without_the_annotation_the_quota_is_removed() {
        let plan = NamespaceGpuQuota.reconcile(&ns(None), &(), Timestamp::UNIX_EPOCH);
        assert_eq!(
            plan.delete,
            vec![ObjectRef::namespaced(
                "v1",
                "ResourceQuota",
                "team-a",
                QUOTA
            )]
        );
    }

    #[test]
    fn a_malformed_value_is_an_event_and_nothing_else() {
        let plan = NamespaceGpuQuota.reconcile(&ns(Some("lots")), &(), Timestamp::UNIX_EPOCH);
        assert!(plan.apply.is_empty() && plan.delete.is_empty());
        assert_eq!(plan.events[0].reason, "InvalidAnnotation");
    }
}
