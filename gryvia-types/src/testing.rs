//! Fixture builders shared by reconcile tests, client tests, benches and the Python SDK's
//! tests (feature `testing`). Each returns a valid object with sensible defaults; tests then
//! change the field they are about.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::{
    CheckType, GpuObservation, GryviaAIJob, GryviaAIJobSpec, GryviaGpuNode, GryviaGpuNodeSpec,
    GryviaGpuNodeStatus, GryviaHealthCheck, GryviaHealthCheckSpec, GryviaTenant, GryviaTenantSpec,
    HealthCheckItem, HealthTarget, OnFailure, TargetType, TenantQuotas, Threshold,
};

fn meta(namespace: Option<&str>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        generation: Some(1),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

/// A one-worker, one-GPU job running `image` in `namespace`.
pub fn ai_job(namespace: &str, name: &str, image: &str) -> GryviaAIJob {
    let spec: GryviaAIJobSpec = serde_json::from_value(serde_json::json!({ "image": image }))
        .unwrap_or_else(|e| unreachable!("a job with only an image always decodes: {e}"));
    GryviaAIJob {
        metadata: meta(Some(namespace), name),
        spec,
        status: None,
    }
}

/// A tenant allowed `gpus` concurrent GPUs.
pub fn tenant(name: &str, gpus: i32) -> GryviaTenant {
    let spec = GryviaTenantSpec {
        display_name: name.to_owned(),
        members: Vec::new(),
        quotas: Some(TenantQuotas {
            concurrent_gpus: Some(gpus),
            ..Default::default()
        }),
        priorities: None,
        storage_quotas: Default::default(),
        billing: None,
        governance: None,
        parent_tenant: None,
        network_policy: None,
        notifications: None,
        allowed_skus: Vec::new(),
        deletion_policy: Default::default(),
    };
    GryviaTenant {
        metadata: meta(None, name),
        spec,
        status: None,
    }
}

/// A cluster-wide health check with one check of `check` failing above `max`.
pub fn health_check(name: &str, check: CheckType, max: f64) -> GryviaHealthCheck {
    let spec = GryviaHealthCheckSpec {
        target: HealthTarget {
            type_: TargetType::Cluster,
            nodes: Vec::new(),
            node_selector: Default::default(),
        },
        schedule: "*/5 * * * *".to_owned(),
        checks: vec![HealthCheckItem {
            name: "check".to_owned(),
            type_: check,
            threshold: Threshold {
                max: Some(max),
                min: None,
                warning: None,
            },
        }],
        stale_after_seconds: 300,
        on_failure: OnFailure::default(),
        remediation: None,
        max_quarantined_percent: 25,
        suspend: false,
    };
    GryviaHealthCheck {
        metadata: meta(None, name),
        spec,
        status: None,
    }
}

/// A healthy, cool, idle GPU observed at `at`.
pub fn gpu(index: i32, at: jiff::Timestamp) -> GpuObservation {
    GpuObservation {
        index,
        uuid: format!("GPU-{index:08}"),
        product: Some("NVIDIA H100 80GB HBM3".to_owned()),
        temperature_c: Some(40),
        utilization_percent: Some(0),
        memory_used_mib: Some(0),
        memory_total_mib: Some(81559),
        ecc_single_bit: Some(0),
        ecc_double_bit: Some(0),
        nvlink: None,
        power_draw_watts: Some(70.0),
        power_limit_watts: Some(700.0),
        xid_events: Vec::new(),
        observed_at: Time(at),
    }
}

/// A GryviaGpuNode for `node` with `gpus` healthy GPUs observed at `at`.
pub fn gpu_node(node: &str, gpus: i32, at: jiff::Timestamp) -> GryviaGpuNode {
    GryviaGpuNode {
        metadata: meta(None, node),
        spec: GryviaGpuNodeSpec {
            node_name: node.to_owned(),
            report_interval_seconds: 30,
            remediation_request: None,
        },
        status: Some(GryviaGpuNodeStatus {
            gpus: (0..gpus).map(|i| gpu(i, at)).collect(),
            gpu_count: Some(gpus),
            source: Some("file:fixture".to_owned()),
            observed_at: Some(Time(at)),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_objects_with_names_and_defaults() {
        let job = ai_job("ns", "j", "img");
        assert_eq!(job.spec.gpus, 1);
        assert_eq!(job.spec.priority, 50);
        assert_eq!(job.metadata.namespace.as_deref(), Some("ns"));
        let node = gpu_node("n", 8, jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(node.status.unwrap().gpus.len(), 8);
        assert_eq!(tenant("t", 4).spec.quotas.unwrap().concurrent_gpus, Some(4));
        assert_eq!(
            health_check("h", CheckType::GpuTemperature, 90.0)
                .spec
                .checks
                .len(),
            1
        );
    }
}
