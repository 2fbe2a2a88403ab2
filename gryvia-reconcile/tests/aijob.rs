//! The AI job reconcile: rendering, phases, failure classification and retries.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, ObservedJob, ObservedNode, ObservedPod, backoff_limit, classify,
    merge_failures, render_job,
};
use gryvia_reconcile::{EventType, Plan, Reconcile};
use gryvia_types::k8s_openapi::api::batch::v1::Job;
use gryvia_types::k8s_openapi::api::core::v1::{Node, Pod};
use gryvia_types::testing::ai_job;
use gryvia_types::{FailureClass, GryviaAIJob, GryviaAIJobStatus, JobPhase, PodFailure};
use proptest::prelude::*;
use serde_json::{Value, json};

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap()
}

fn job_with(spec: Value) -> GryviaAIJob {
    let mut j = ai_job("team-a", "train", "trainer:1");
    let mut s = serde_json::to_value(&j.spec).unwrap();
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    j.spec = serde_json::from_value(s).unwrap();
    j
}

fn run(j: &GryviaAIJob, w: &AIJobWorld) -> Plan<GryviaAIJobStatus> {
    AIJobReconciler.reconcile(j, w, now())
}

fn child<'a, S>(plan: &'a Plan<S>, kind: &str) -> Option<&'a Value> {
    plan.apply
        .iter()
        .find(|c| c.object_ref.kind == kind)
        .map(|c| &c.object)
}

fn owned_job() -> ObservedJob {
    ObservedJob {
        owned: true,
        backoff_limit: 3,
        ..Default::default()
    }
}

fn pod(name: &str, node: Option<&str>, phase: &str) -> ObservedPod {
    ObservedPod {
        name: name.to_owned(),
        node: node.map(str::to_owned),
        phase: phase.to_owned(),
        ..Default::default()
    }
}

fn healthy(nodes: &[&str]) -> BTreeMap<String, ObservedNode> {
    nodes
        .iter()
        .map(|n| ((*n).to_owned(), ObservedNode::default()))
        .collect()
}

/// Reconciles, then feeds the resulting status back in, as the API server would.
fn settle(j: &mut GryviaAIJob, w: &AIJobWorld) -> Plan<GryviaAIJobStatus> {
    let plan = run(j, w);
    if let Some(s) = &plan.status {
        j.status = Some(s.clone());
    }
    plan
}

#[test]
fn a_one_worker_job_renders_a_non_indexed_job_with_gpu_limits_and_product_selector() {
    let j = job_with(
        json!({"gpus": 4, "gpuType": "NVIDIA-H100-80GB-HBM3", "retryLimit": 2,
        "command": ["python", "train.py"], "cpu": "8", "memory": "64Gi",
        "activeDeadlineSeconds": 3600, "ttlSecondsAfterFinished": 600}),
    );
    let plan = run(&j, &AIJobWorld::default());
    let job = child(&plan, "Job").unwrap();
    assert_eq!(job["metadata"]["name"], "train");
    assert_eq!(job["metadata"]["namespace"], "team-a");
    assert_eq!(job["spec"]["backoffLimit"], 2);
    assert_eq!(job["spec"]["completionMode"], "NonIndexed");
    assert_eq!(job["spec"]["completions"], 1);
    assert_eq!(job["spec"]["activeDeadlineSeconds"], 3600);
    assert_eq!(job["spec"]["ttlSecondsAfterFinished"], 600);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(
        pod["nodeSelector"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 4);
    assert_eq!(c["resources"]["requests"]["cpu"], "8");
    assert_eq!(c["resources"]["limits"]["memory"], "64Gi");
    assert_eq!(c["command"], json!(["python", "train.py"]));
    assert_eq!(
        job["spec"]["template"]["metadata"]["labels"]["gryvia.io/job-name"],
        "train"
    );
    assert!(
        pod["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "nvidia.com/gpu")
    );
    assert!(
        child(&plan, "Service").is_none(),
        "one worker needs no Service"
    );
}

#[test]
fn infrastructure_disruptions_are_ignored_by_the_pod_failure_policy() {
    let j = ai_job("ns", "train", "img");
    let job = render_job(&j, 3, None);
    assert_eq!(
        job["spec"]["podFailurePolicy"]["rules"][0],
        json!({"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})
    );
}

#[test]
fn a_multi_worker_job_is_indexed_with_a_headless_service_and_rank_environment() {
    let j = job_with(json!({"replicas": 4, "env": [{"name": "MASTER_PORT", "value": "1234"}]}));
    let plan = run(&j, &AIJobWorld::default());
    let job = child(&plan, "Job").unwrap();
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    assert_eq!(job["spec"]["parallelism"], 4);
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["subdomain"], "train");
    let env = pod["containers"][0]["env"].as_array().unwrap();
    let get = |n: &str| env.iter().filter(|e| e["name"] == n).collect::<Vec<_>>();
    assert_eq!(get("WORLD_SIZE")[0]["value"], "4");
    assert_eq!(get("MASTER_ADDR")[0]["value"], "train-0.train");
    assert_eq!(
        get("RANK")[0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    );
    assert_eq!(get("MASTER_PORT").len(), 1, "the user's MASTER_PORT wins");
    assert_eq!(get("MASTER_PORT")[0]["value"], "1234");
    let svc = child(&plan, "Service").unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["selector"]["gryvia.io/job-name"], "train");
}

#[test]
fn storage_becomes_a_claim_mounted_at_data_and_volumes_are_passed_through() {
    let j = job_with(json!({
        "storage": {"size": "100Gi", "storageClassName": "fast", "accessMode": "ReadWriteMany"},
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}, {"name": "cfg", "configMap": {"name": "c"}}],
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
    }));
    let plan = run(&j, &AIJobWorld::default());
    let pvc = child(&plan, "PersistentVolumeClaim").unwrap();
    assert_eq!(pvc["metadata"]["name"], "train-data");
    assert_eq!(pvc["spec"]["accessModes"], json!(["ReadWriteMany"]));
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "100Gi");
    assert_eq!(pvc["spec"]["storageClassName"], "fast");
    let pod = &child(&plan, "Job").unwrap()["spec"]["template"]["spec"];
    let vols = pod["volumes"].as_array().unwrap();
    assert!(
        vols.iter()
            .any(|v| v["name"] == "shm" && v["emptyDir"]["medium"] == "Memory")
    );
    assert!(
        vols.iter()
            .any(|v| v["name"] == "cfg" && v["configMap"]["name"] == "c")
    );
    assert!(
        vols.iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == "train-data")
    );
    let mounts = pod["containers"][0]["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/data"));
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/etc/cfg" && m["readOnly"] == true)
    );
}

#[test]
fn a_mount_at_data_next_to_storage_is_an_invalid_spec_naming_the_field() {
    let j = job_with(json!({
        "storage": {"size": "1Gi"},
        "volumes": [{"name": "x", "emptyDir": {}}],
        "volumeMounts": [{"name": "x", "mountPath": "/data"}],
    }));
    let plan = run(&j, &AIJobWorld::default());
    let status = plan.status.unwrap();
    assert_eq!(status.phase, Some(JobPhase::Failed));
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "InvalidSpec");
    assert!(
        ready.message.starts_with("spec.volumeMounts"),
        "{}",
        ready.message
    );
    assert!(
        plan.apply.is_empty(),
        "nothing is created for an invalid job"
    );
}

#[test]
fn the_priority_class_annotation_waits_for_the_class_then_sets_it_on_the_pods() {
    let mut j = ai_job("ns", "train", "img");
    j.metadata.annotations = Some(BTreeMap::from([(
        "gryvia.io/priority-class".to_owned(),
        "high".to_owned(),
    )]));
    let plan = run(&j, &AIJobWorld::default());
    assert!(child(&plan, "Job").is_none());
    let status = plan.status.unwrap();
    let sched = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!(sched.reason, "PriorityClassNotFound");
    assert!(plan.requeue_after_ms.is_some());

    let w = AIJobWorld {
        priority_class_exists: true,
        ..Default::default()
    };
    let plan = run(&j, &w);
    let job = child(&plan, "Job").unwrap();
    assert_eq!(job["spec"]["template"]["spec"]["priorityClassName"], "high");
    assert_eq!(
        plan.status.unwrap().priority_class_name.as_deref(),
        Some("high")
    );
}

#[test]
fn a_job_goes_pending_scheduled_running_succeeded_with_one_event_per_phase() {
    let mut j = ai_job("ns", "train", "img");
    let plan = settle(&mut j, &AIJobWorld::default());
    assert_eq!(j.status.as_ref().unwrap().phase, Some(JobPhase::Pending));
    assert!(plan.events.iter().any(|e| e.reason == "Pending"));

    let mut w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![pod("train-abc", Some("n1"), "Pending")],
        nodes: healthy(&["n1"]),
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    assert_eq!(j.status.as_ref().unwrap().phase, Some(JobPhase::Scheduled));
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].reason, "Scheduled");

    w.pods[0].phase = "Running".into();
    w.job.as_mut().unwrap().active = 1;
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.phase, Some(JobPhase::Running));
    assert_eq!(s.active, 1);
    assert_eq!(plan.events[0].reason, "Running");

    // Same world again: nothing to write, nothing to say.
    let plan = run(&j, &w);
    assert!(plan.status.is_none());
    assert!(plan.events.is_empty());

    // The worker succeeded before the batch Job says it is complete: still Running (not back
    // to Pending), no Event.
    w.pods[0].phase = "Succeeded".into();
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.phase, Some(JobPhase::Running));
    assert_eq!(
        s.message.as_deref(),
        Some("1 of 1 workers succeeded, waiting for the batch Job to complete")
    );
    assert!(plan.events.is_empty(), "{:?}", plan.events);

    let jb = w.job.as_mut().unwrap();
    jb.active = 0;
    jb.succeeded = 1;
    jb.complete = true;
    jb.finish_time = Some(now());
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.phase, Some(JobPhase::Succeeded));
    assert!(s.completion_time.is_some());
    assert!(
        s.conditions
            .iter()
            .any(|c| c.type_ == "Succeeded" && c.status == "True")
    );
    assert_eq!(plan.events[0].reason, "Succeeded");

    // Finished: the Job may go (TTL); nothing is re-created.
    let plan = run(&j, &AIJobWorld::default());
    assert!(plan.apply.is_empty());
    assert!(plan.status.is_none());
}

#[test]
fn an_unschedulable_worker_reports_the_schedulers_message_in_the_scheduled_condition() {
    let mut j = ai_job("ns", "train", "img");
    let mut p = pod("train-x", None, "Pending");
    p.unschedulable = Some("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.".into());
    let w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![p],
        ..Default::default()
    };
    settle(&mut j, &w);
    let s = j.status.unwrap();
    assert_eq!(s.phase, Some(JobPhase::Pending));
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!(c.status, "False");
    assert_eq!(c.reason, "Unschedulable");
    assert!(c.message.contains("Insufficient nvidia.com/gpu"));
    assert!(s.message.unwrap().starts_with("waiting for GPUs"));
}

#[test]
fn application_failures_count_as_retries_and_the_backoff_limit_stays_the_retry_limit() {
    let mut j = job_with(json!({"retryLimit": 2}));
    let mut p1 = pod("train-1", Some("n1"), "Failed");
    p1.exit_code = Some(3);
    let w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![p1, pod("train-2", Some("n1"), "Running")],
        nodes: healthy(&["n1"]),
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.retries, 1);
    assert_eq!(s.infrastructure_failures, 0);
    assert_eq!(s.failures[0].class, FailureClass::Application);
    assert_eq!(s.failures[0].reason, "exited with code 3");
    assert_eq!(child(&plan, "Job").unwrap()["spec"]["backoffLimit"], 2);
    let ev = plan
        .events
        .iter()
        .find(|e| e.reason == "PodFailed")
        .unwrap();
    assert_eq!(ev.type_, EventType::Warning);
    assert!(ev.message.contains("retry 1 of 2"), "{}", ev.message);
    // The same failure again is not reported twice.
    let plan = run(&j, &w);
    assert!(plan.events.iter().all(|e| e.reason != "PodFailed"));
}

#[test]
fn a_job_that_used_up_its_retries_fails_with_the_reason_and_the_count() {
    let mut j = job_with(json!({"retryLimit": 1}));
    let w = AIJobWorld {
        job: Some(ObservedJob {
            failed_condition: Some((
                "BackoffLimitExceeded".into(),
                "Job has reached the specified backoff limit".into(),
            )),
            failed: 2,
            ..owned_job()
        }),
        pods: vec![
            pod("train-1", Some("n1"), "Failed"),
            pod("train-2", Some("n1"), "Failed"),
        ],
        nodes: healthy(&["n1"]),
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    let s = j.status.unwrap();
    assert_eq!(s.phase, Some(JobPhase::Failed));
    assert_eq!(s.retries, 1, "retries never exceed retryLimit");
    let failed = s.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason, "BackoffLimitExceeded");
    assert!(
        failed
            .message
            .starts_with("2 failed pods used up retryLimit 1")
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "Failed" && e.type_ == EventType::Warning)
    );
}

#[test]
fn an_evicted_pod_is_an_infrastructure_failure_that_costs_no_retry_and_avoids_the_quarantined_node()
{
    let mut j = job_with(json!({"retryLimit": 0}));
    let mut evicted = pod("train-1", Some("bad"), "Failed");
    evicted.disruption = Some("EvictionByEvictionAPI".into());
    let mut nodes = healthy(&["good"]);
    nodes.insert(
        "bad".into(),
        ObservedNode {
            quarantined: Some("cluster-gpu-health".into()),
        },
    );
    let w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![evicted, pod("train-2", Some("good"), "Running")],
        nodes,
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    let s = j.status.unwrap();
    assert_eq!(s.retries, 0);
    assert_eq!(s.infrastructure_failures, 1);
    assert_eq!(s.avoided_nodes, vec!["bad".to_owned()]);
    assert_eq!(s.phase, Some(JobPhase::Running));
    // The pod failure policy already ignored it: the limit is unchanged.
    assert_eq!(child(&plan, "Job").unwrap()["spec"]["backoffLimit"], 0);
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "InfrastructureFailure")
    );
}

#[test]
fn a_crash_on_a_node_quarantined_later_is_reclassified_and_gives_the_retry_back() {
    let mut j = job_with(json!({"retryLimit": 1}));
    let mut crashed = pod("train-1", Some("n1"), "Failed");
    crashed.exit_code = Some(139);
    let mut w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![crashed, pod("train-2", Some("n2"), "Running")],
        nodes: healthy(&["n1", "n2"]),
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    assert_eq!(j.status.as_ref().unwrap().retries, 1);
    assert_eq!(child(&plan, "Job").unwrap()["spec"]["backoffLimit"], 1);

    // The health check quarantines n1 (its GPU had an XID error).
    w.nodes.get_mut("n1").unwrap().quarantined = Some("gpu".into());
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.retries, 0);
    assert_eq!(s.infrastructure_failures, 1);
    assert_eq!(s.failures[0].class, FailureClass::Infrastructure);
    assert_eq!(
        child(&plan, "Job").unwrap()["spec"]["backoffLimit"],
        2,
        "the Job controller counted it: one more attempt is allowed"
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.message.contains("now quarantined"))
    );

    // The node is released: the record stays infrastructure.
    w.nodes.get_mut("n1").unwrap().quarantined = None;
    let plan = settle(&mut j, &w);
    assert_eq!(j.status.as_ref().unwrap().retries, 0);
    assert_eq!(child(&plan, "Job").unwrap()["spec"]["backoffLimit"], 2);
}

#[test]
fn a_pod_whose_node_is_gone_or_that_the_kubelet_rejected_is_infrastructure() {
    let nodes = healthy(&["n1"]);
    let gone = pod("a", Some("vanished"), "Failed");
    assert_eq!(
        classify(&gone, &nodes).unwrap().class,
        FailureClass::Infrastructure
    );
    let mut rejected = pod("b", Some("n1"), "Failed");
    rejected.reason = Some("OutOfnvidia.com/gpu".into());
    assert_eq!(
        classify(&rejected, &nodes).unwrap().class,
        FailureClass::Infrastructure
    );
    let mut evicted = pod("c", Some("n1"), "Failed");
    evicted.reason = Some("Evicted".into());
    assert_eq!(
        classify(&evicted, &nodes).unwrap().class,
        FailureClass::Infrastructure
    );
    let app = pod("d", Some("n1"), "Failed");
    assert_eq!(
        classify(&app, &nodes).unwrap().class,
        FailureClass::Application
    );
    assert!(classify(&pod("e", Some("n1"), "Running"), &nodes).is_none());
}

#[test]
fn a_job_of_the_same_name_that_is_not_ours_is_reported_and_left_alone() {
    let mut j = ai_job("ns", "train", "img");
    let w = AIJobWorld {
        job: Some(ObservedJob::default()),
        ..Default::default()
    };
    let plan = settle(&mut j, &w);
    assert!(plan.apply.is_empty());
    let s = j.status.unwrap();
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!(c.reason, "JobConflict");
}

#[test]
fn a_batch_job_deleted_before_it_finished_fails_the_job_instead_of_running_it_twice() {
    let mut j = ai_job("ns", "train", "img");
    settle(&mut j, &AIJobWorld::default());
    assert_eq!(
        j.status.as_ref().unwrap().job_name.as_deref(),
        Some("train")
    );
    let w = AIJobWorld {
        job: Some(ObservedJob {
            active: 1,
            ..owned_job()
        }),
        pods: vec![pod("p", Some("n"), "Running")],
        nodes: healthy(&["n"]),
        ..Default::default()
    };
    settle(&mut j, &w);
    let plan = settle(&mut j, &AIJobWorld::default());
    assert!(plan.apply.is_empty());
    let s = j.status.unwrap();
    assert_eq!(s.phase, Some(JobPhase::Failed));
    assert!(s.conditions.iter().any(|c| c.reason == "JobDeleted"));
}

#[test]
fn pod_labels_and_annotations_reach_the_pods_and_the_template_label_is_kept() {
    let mut j = job_with(json!({"podLabels": {"team": "nlp"}, "podAnnotations": {"a": "b"}}));
    j.metadata.labels = Some(BTreeMap::from([(
        "gryvia.io/template".to_owned(),
        "t".to_owned(),
    )]));
    let job = render_job(&j, 1, None);
    let meta = &job["spec"]["template"]["metadata"];
    assert_eq!(meta["labels"]["team"], "nlp");
    assert_eq!(meta["labels"]["gryvia.io/template"], "t");
    assert_eq!(meta["annotations"]["a"], "b");
    assert_eq!(job["metadata"]["labels"]["gryvia.io/template"], "t");
}

#[test]
fn the_observed_summaries_read_jobs_pods_and_nodes() {
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "t", "ownerReferences": [{"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob", "name": "t", "uid": "u1"}]},
        "spec": {"backoffLimit": 4, "template": {}},
        "status": {"active": 1, "failed": 2, "conditions": [
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}
    }))
    .unwrap();
    let o = ObservedJob::of(&job, "u1");
    assert!(o.owned);
    assert_eq!(o.backoff_limit, 4);
    assert_eq!(
        o.failed_condition,
        Some(("DeadlineExceeded".into(), "too long".into()))
    );
    assert!(o.finish_time.is_some());
    assert!(!ObservedJob::of(&job, "other").owned);

    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "t-1"},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Failed", "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
        ], "containerStatuses": [{"name": "worker", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137}}}]}
    }))
    .unwrap();
    let op = ObservedPod::of(&p);
    assert_eq!(op.disruption.as_deref(), Some("EvictionByEvictionAPI"));
    assert_eq!(op.exit_code, Some(137));
    assert_eq!(op.node.as_deref(), Some("n1"));

    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "gryvia.io/gpu-unhealthy", "value": "hc", "effect": "NoSchedule"}]}
    }))
    .unwrap();
    assert_eq!(ObservedNode::of(&n).quarantined.as_deref(), Some("hc"));
}

fn failure(pod: &str, class: FailureClass, disrupted: bool) -> PodFailure {
    PodFailure {
        pod: pod.to_owned(),
        node: Some("n".into()),
        class,
        reason: if disrupted {
            "disrupted: X".into()
        } else {
            "x".into()
        },
        exit_code: None,
    }
}

proptest! {
    /// Infrastructure failures never use up a retry: the Job controller may count at most
    /// `retryLimit` application failures before the job fails, whatever else failed.
    #[test]
    fn the_backoff_limit_leaves_exactly_retry_limit_for_the_application(
        retry_limit in 0i32..20,
        kinds in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..40),
    ) {
        let failures: Vec<PodFailure> = kinds
            .iter()
            .enumerate()
            .map(|(i, (infra, disrupted))| {
                let class = if *infra { FailureClass::Infrastructure } else { FailureClass::Application };
                failure(&format!("p{i}"), class, *infra && *disrupted)
            })
            .collect();
        let counted_by_job_controller = failures
            .iter()
            .filter(|f| !f.reason.starts_with("disrupted:"))
            .count() as i32;
        let app = failures.iter().filter(|f| f.class == FailureClass::Application).count() as i32;
        let limit = backoff_limit(retry_limit, &failures);
        // The job fails when counted > limit; that happens exactly when app > retryLimit.
        prop_assert_eq!(counted_by_job_controller > limit, app > retry_limit);
    }

    /// Merging is idempotent and never drops or downgrades a recorded infrastructure failure.
    #[test]
    fn merging_failures_is_idempotent_and_monotone(
        phases in proptest::collection::vec((0u8..3, any::<bool>()), 0..20),
    ) {
        let pods: Vec<ObservedPod> = phases
            .iter()
            .enumerate()
            .map(|(i, (p, on_bad))| {
                let mut op = pod(&format!("p{i}"), Some(if *on_bad { "bad" } else { "ok" }), ["Failed", "Running", "Succeeded"][*p as usize]);
                if *p == 0 && i % 3 == 0 { op.disruption = Some("PreemptionByScheduler".into()); }
                op
            })
            .collect();
        let mut nodes = healthy(&["ok"]);
        nodes.insert("bad".into(), ObservedNode { quarantined: Some("hc".into()) });
        let w = AIJobWorld { pods, nodes, ..Default::default() };
        let once = merge_failures(&[], &w);
        let twice = merge_failures(&once, &w);
        prop_assert_eq!(&once, &twice);
        let released = AIJobWorld { nodes: healthy(&["ok", "bad"]), ..w.clone() };
        let after = merge_failures(&once, &released);
        for (a, b) in once.iter().zip(&after) {
            if a.class == FailureClass::Infrastructure {
                prop_assert_eq!(b.class, FailureClass::Infrastructure);
            }
        }
    }
}

#[test]
fn waiting_between_retries_is_pending_without_a_new_event() {
    let mut j = job_with(json!({"retryLimit": 3}));
    let mut w = AIJobWorld {
        job: Some(ObservedJob {
            active: 1,
            ..owned_job()
        }),
        pods: vec![pod("train-1", Some("n1"), "Running")],
        nodes: healthy(&["n1"]),
        ..Default::default()
    };
    settle(&mut j, &w);
    assert_eq!(j.status.as_ref().unwrap().phase, Some(JobPhase::Running));
    w.pods[0].phase = "Failed".into();
    w.job.as_mut().unwrap().active = 0;
    let plan = settle(&mut j, &w);
    let s = j.status.clone().unwrap();
    assert_eq!(s.phase, Some(JobPhase::Pending));
    assert_eq!(
        s.message.as_deref(),
        Some("waiting for the Job controller to retry a failed pod")
    );
    let reasons: Vec<&str> = plan.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, vec!["PodFailed"]);
}

#[test]
fn capacity_counts_free_gpus_per_node_and_says_why_a_node_takes_none() {
    use gryvia_reconcile::aijob::capacity;
    let node = |name: &str, extra: Value| -> Node {
        let mut n = json!({
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}
        });
        for (k, v) in extra.as_object().unwrap() {
            n["spec"][k] = v.clone();
        }
        serde_json::from_value(n).unwrap()
    };
    let gpu_pod = |node: &str, gpus: i32, phase: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    };
    let cpu: Node = serde_json::from_value(
        json!({"metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "4"}}}),
    )
    .unwrap();
    let nodes = vec![
        node("a", json!({})),
        node("b", json!({"unschedulable": true})),
        node(
            "c",
            json!({"taints": [{"key": "gryvia.io/gpu-unhealthy", "value": "hc", "effect": "NoSchedule"}]}),
        ),
        node(
            "d",
            json!({"taints": [{"key": "gryvia.io/reserved", "value": "r1", "effect": "NoSchedule"}]}),
        ),
        cpu,
    ];
    let pods = vec![
        gpu_pod("a", 3, "Running"),
        gpu_pod("a", 2, "Succeeded"),
        gpu_pod("b", 1, "Running"),
    ];
    let cap = capacity(&nodes, &pods);
    assert_eq!(cap.len(), 4, "the CPU node is left out");
    assert_eq!((cap[0].used, cap[0].free), (3, 5));
    assert_eq!(cap[1].unavailable.as_deref(), Some("cordoned"));
    assert_eq!((cap[1].used, cap[1].free), (1, 0));
    assert_eq!(cap[2].unavailable.as_deref(), Some("quarantined (hc)"));
    assert_eq!(cap[3].unavailable.as_deref(), Some("reserved (r1)"));
}

#[test]
fn logs_show_the_newest_bound_attempt_of_each_worker() {
    use gryvia_reconcile::aijob::newest_attempts;
    let p = |name: &str, index: &str, created: &str, node: Option<&str>| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created,
                         "annotations": {"batch.kubernetes.io/job-completion-index": index}},
            "spec": {"nodeName": node, "containers": []}
        }))
        .unwrap()
    };
    let pods = vec![
        p("w1-new", "1", "2026-12-02T10:05:00Z", Some("n")),
        p("w0-old", "0", "2026-12-02T10:00:00Z", Some("n")),
        p("w1-old", "1", "2026-12-02T10:00:00Z", Some("n")),
        p("w0-new", "0", "2026-12-02T10:05:00Z", Some("n")),
        p("w0-unbound", "0", "2026-12-02T10:09:00Z", None),
    ];
    let names = |v: Vec<Pod>| {
        v.into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(newest_attempts(pods.clone(), None)),
        vec!["w0-new", "w1-new"]
    );
    assert_eq!(names(newest_attempts(pods, Some(1))), vec!["w1-new"]);
}

fn admission(resource: &str, per_worker: i32, nodes: &[&str]) -> gryvia_types::JobAdmission {
    serde_json::from_value(json!({
        "queue": "ml", "gpuType": "*", "product": "NVIDIA-H100-80GB-HBM3", "resource": resource,
        "perWorker": per_worker, "milliGpus": 1000, "nodes": nodes,
        "admittedAt": "2026-12-03T12:00:00Z"
    }))
    .unwrap()
}

fn queued() -> AIJobWorld {
    AIJobWorld {
        queued: true,
        ..AIJobWorld::default()
    }
}

#[test]
fn a_queued_job_gets_no_batch_job_until_its_queue_admits_it() {
    let mut j = job_with(json!({"gpus": 8, "replicas": 2}));
    j.status = Some(
        serde_json::from_value(json!({"queue": {"queue": "ml", "position": 3,
            "reason": "needs 16 GPUs of H100; queue ml has 8 of 16 nominal free"}}))
        .unwrap(),
    );
    let plan = run(&j, &queued());
    assert!(
        plan.apply.is_empty(),
        "nothing runs before admission: {:?}",
        plan.apply
    );
    let st = plan.status.unwrap();
    assert_eq!(st.phase, Some(JobPhase::Pending));
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Queued"));
    assert_eq!(
        c.message, "waiting for queue ml to admit it (status.queue: position, why, expected start)",
        "the standing itself changes each cycle and is in status.queue"
    );
    assert!(
        st.queue.is_none() && st.admission.is_none(),
        "the queue's fields are the queue's to write"
    );
    // A released job's suspended batch Job goes.
    let w = AIJobWorld {
        job: Some(owned_job()),
        ..queued()
    };
    let plan = run(&j, &w);
    let deleted: Vec<String> = plan
        .delete
        .iter()
        .map(|d| format!("{}/{}", d.kind, d.name))
        .collect();
    assert_eq!(deleted, ["Job/train"]);
}

#[test]
fn an_admitted_job_runs_where_the_queue_placed_it_with_what_it_placed() {
    let mut j = job_with(json!({"gpus": 1, "gpuFraction": 0.5, "replicas": 2}));
    j.status = Some(GryviaAIJobStatus {
        admission: Some(admission("nvidia.com/mig-3g.40gb", 1, &["n2", "n1", "n2"])),
        ..Default::default()
    });
    let plan = run(&j, &queued());
    let batch = child(&plan, "Job").unwrap();
    let pod = &batch["spec"]["template"]["spec"];
    let limits = &pod["containers"][0]["resources"]["limits"];
    assert_eq!(limits, &json!({"nvidia.com/mig-3g.40gb": 1}));
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["n1", "n2"])
    );
    assert_eq!(
        pod["nodeSelector"]["nvidia.com/gpu.product"],
        "NVIDIA-H100-80GB-HBM3"
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert!(batch["spec"].get("suspend").is_none());
    let st = plan.status.unwrap();
    assert!(
        st.admission.is_none(),
        "not written back by the AI job controller"
    );
}

#[test]
fn a_preempted_job_is_suspended_and_says_why() {
    let mut j = job_with(json!({"gpus": 8, "preemptionGracePeriodSeconds": 120}));
    j.status = Some(GryviaAIJobStatus {
        admission: Some(admission("nvidia.com/gpu", 8, &["n1"])),
        preemption: Some(
            serde_json::from_value(json!({"by": "ml/urgent", "reason": "WithinQueue",
                "noticeAt": "2026-12-03T12:05:00Z", "graceSeconds": 120}))
            .unwrap(),
        ),
        ..Default::default()
    });
    let plan = run(
        &j,
        &AIJobWorld {
            job: Some(admitted_job()),
            ..queued()
        },
    );
    let batch = child(&plan, "Job").unwrap();
    assert_eq!(batch["spec"]["suspend"], true);
    assert_eq!(
        batch["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        120
    );
    let st = plan.status.unwrap();
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Preempted")
        .unwrap();
    assert_eq!(c.reason, "WithinQueue");
    assert_eq!(
        c.message,
        "preempted (WithinQueue) for ml/urgent: its workers got SIGTERM at 2026-12-03T12:05:00Z and 120 s to write a checkpoint; it queues again once they are gone"
    );
    assert_eq!(st.phase, Some(JobPhase::Pending));
}

/// The batch Job made for the admission of [`admission`].
fn admitted_job() -> ObservedJob {
    ObservedJob {
        admitted_at: Some("2026-12-03T12:00:00Z".to_owned()),
        ..owned_job()
    }
}

fn preempted(j: &mut GryviaAIJob) {
    j.status = Some(GryviaAIJobStatus {
        admission: Some(admission("nvidia.com/gpu", 4, &["n1", "n1"])),
        preemption: Some(
            serde_json::from_value(json!({"by": "ml/urgent", "reason": "WithinQueue",
                "noticeAt": "2026-12-03T12:05:00Z", "graceSeconds": 30}))
            .unwrap(),
        ),
        job_name: Some("train".to_owned()),
        ..Default::default()
    });
}

#[test]
fn workers_stopped_by_a_preemption_use_no_retry_and_a_failing_batch_job_does_not_end_the_job() {
    let mut j = job_with(json!({"gpus": 4, "replicas": 2, "retryLimit": 0}));
    preempted(&mut j);
    // One worker carries the notice; the other was stopped before the notice reached it.
    let mut noticed = pod("train-0-a", Some("n1"), "Failed");
    noticed.exit_code = Some(143);
    noticed.preempted = Some("ml/urgent".to_owned());
    let mut stopped = pod("train-1-b", Some("n1"), "Failed");
    stopped.exit_code = Some(137);
    stopped.deleting = true;
    let w = AIJobWorld {
        job: Some(ObservedJob {
            failed: 2,
            failed_condition: Some(("BackoffLimitExceeded".to_owned(), "2 failed".to_owned())),
            ..admitted_job()
        }),
        pods: vec![noticed, stopped],
        nodes: healthy(&["n1"]),
        ..queued()
    };
    let st = run(&j, &w).status.unwrap();
    assert_eq!(st.retries, 0);
    assert_eq!(
        st.phase,
        Some(JobPhase::Pending),
        "not Failed: it queues again"
    );
    assert_eq!(st.failures.len(), 2);
    for f in &st.failures {
        assert_eq!(f.class, FailureClass::Infrastructure);
        assert_eq!(f.reason, "preempted for ml/urgent");
    }
    assert!(
        st.avoided_nodes.is_empty(),
        "a preemption says nothing about the node"
    );
    // Read back from the status, the cause is the same.
    let cause = gryvia_reconcile::aijob::FailureCause::of_recorded(&st.failures[0]);
    assert!(!cause.counted_by_job_controller());
}

#[test]
fn a_requeued_job_waits_without_a_batch_job_and_its_next_admission_makes_a_new_one() {
    let mut j = job_with(json!({"gpus": 4}));
    // Released: the queue cleared the admission; its suspended Job is still there.
    j.status = Some(GryviaAIJobStatus {
        job_name: Some("train".to_owned()),
        queue: Some(
            serde_json::from_value(json!({"queue": "ml", "position": 1, "reason": "r"})).unwrap(),
        ),
        ..Default::default()
    });
    let w = AIJobWorld {
        job: Some(ObservedJob {
            suspended: true,
            ..admitted_job()
        }),
        ..queued()
    };
    let plan = run(&j, &w);
    assert_eq!(plan.delete.len(), 1);
    let st = plan.status.unwrap();
    assert_eq!(st.job_name, None, "its absence from now on is expected");
    // Admitted again before that Job was gone: the Job of the old admission is replaced.
    let mut again = j.clone();
    again.status = Some(GryviaAIJobStatus {
        job_name: Some("train".to_owned()),
        admission: Some(gryvia_types::JobAdmission {
            admitted_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-03T13:00:00Z".parse().unwrap(),
            ),
            ..admission("nvidia.com/gpu", 4, &["n2"])
        }),
        ..Default::default()
    });
    let plan = run(&again, &w);
    assert!(plan.apply.is_empty(), "{:?}", plan.apply);
    assert_eq!(plan.delete.len(), 1);
    let st = plan.status.unwrap();
    assert_eq!(st.phase, Some(JobPhase::Pending));
    assert_eq!(st.job_name, None);
    assert!(
        st.message
            .unwrap()
            .contains("the admission of 2026-12-03T12:00:00Z")
    );
    // Once it is gone, the new one is made, with the new admission's time on it.
    if let Some(st) = again.status.as_mut() {
        st.job_name = None;
    }
    let plan = run(&again, &queued());
    let batch = child(&plan, "Job").unwrap();
    let made_for = batch["metadata"]["annotations"]["gryvia.io/admitted-at"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(made_for.starts_with("2026-12-03T13:00:00Z/"), "{made_for}");
    assert_ne!(plan.status.unwrap().phase, Some(JobPhase::Failed));
    // That Job is the one for this admission: applied, not replaced.
    let w = AIJobWorld {
        job: Some(ObservedJob {
            admitted_at: Some(made_for),
            ..owned_job()
        }),
        ..queued()
    };
    let plan = run(&again, &w);
    assert!(plan.delete.is_empty(), "{:?}", plan.delete);
    assert!(child(&plan, "Job").is_some());
}

#[test]
fn a_job_admitted_again_within_the_second_to_other_nodes_gets_a_new_batch_job() {
    let mut j = job_with(json!({"gpus": 4}));
    let first = admission("nvidia.com/gpu", 4, &["n1"]);
    let made_for = gryvia_reconcile::aijob::admission_id(&first);
    // The same whole second, other nodes: a new admission, whose template the Job made for
    // the first cannot take.
    j.status = Some(GryviaAIJobStatus {
        job_name: Some("train".to_owned()),
        admission: Some(admission("nvidia.com/gpu", 4, &["n2"])),
        ..Default::default()
    });
    let w = AIJobWorld {
        job: Some(ObservedJob {
            admitted_at: Some(made_for.clone()),
            ..owned_job()
        }),
        ..queued()
    };
    let plan = run(&j, &w);
    assert!(plan.apply.is_empty(), "{:?}", plan.apply);
    assert_eq!(plan.delete.len(), 1);
    assert!(
        plan.status
            .unwrap()
            .message
            .unwrap()
            .contains("the admission of 2026-12-03T12:00:00Z)")
    );
    // The same admission: the Job stays; so does one whose annotation, from before the hash,
    // has the time alone.
    j.status.as_mut().unwrap().admission = Some(first);
    for said in [made_for, "2026-12-03T12:00:00Z".to_owned()] {
        let w = AIJobWorld {
            job: Some(ObservedJob {
                admitted_at: Some(said),
                ..owned_job()
            }),
            ..queued()
        };
        let plan = run(&j, &w);
        assert!(plan.delete.is_empty(), "{:?}", plan.delete);
    }
}

#[test]
fn a_job_running_before_its_namespace_got_a_queue_runs_on() {
    let j = job_with(json!({"gpus": 4}));
    let w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![pod("train-a", Some("n1"), "Running")],
        nodes: healthy(&["n1"]),
        ..queued()
    };
    let plan = run(&j, &w);
    assert!(plan.delete.is_empty());
    assert!(child(&plan, "Job").is_some());
    // Not yet placed: it is stopped and queues.
    let w = AIJobWorld {
        job: Some(owned_job()),
        pods: vec![pod("train-a", None, "Pending")],
        ..queued()
    };
    assert_eq!(run(&j, &w).delete.len(), 1);
}

#[test]
fn the_workers_of_an_admitted_job_can_read_a_preemption_notice() {
    let mut j = job_with(json!({"gpus": 8}));
    j.status = Some(GryviaAIJobStatus {
        admission: Some(admission("nvidia.com/gpu", 8, &["n1"])),
        ..Default::default()
    });
    let batch = render_job(&j, 3, None);
    let pod = &batch["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0],
        json!({"name": "gryvia-notice", "downwardAPI": {"items": [{"path": "preemption",
            "fieldRef": {"fieldPath": "metadata.annotations['gryvia.io/preemption-notice']"}}]}})
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0],
        json!({"name": "gryvia-notice", "mountPath": "/etc/gryvia/notice", "readOnly": true})
    );
    let unqueued = job_with(json!({"gpus": 8}));
    assert!(
        render_job(&unqueued, 3, None)["spec"]["template"]["spec"]
            .get("volumes")
            .is_none()
    );
    let mut clash =
        job_with(json!({"gpus": 8, "volumes": [{"name": "gryvia-notice", "emptyDir": {}}]}));
    clash.status = None;
    assert_eq!(
        gryvia_reconcile::aijob::invalid_spec(&clash).as_deref(),
        Some("spec.volumes: the name gryvia-notice is reserved for the preemption notice")
    );
}

#[test]
fn a_job_waiting_past_its_tiers_sla_is_marked_breached_once_and_one_started_in_time_is_not() {
    use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut j = job_with(json!({}));
    j.metadata.annotations = Some(BTreeMap::from([(
        "gryvia.io/priority-class".to_owned(),
        "gold".to_owned(),
    )]));
    j.metadata.creation_timestamp = Some(Time(now() - jiff::SignedDuration::from_secs(100)));
    let w = AIJobWorld {
        sla_seconds: Some(300),
        ..AIJobWorld::default()
    };
    let cond = |p: &Plan<GryviaAIJobStatus>| {
        p.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "SLABreached")
                .cloned()
        })
    };
    // Waiting 100 s of 300: nothing yet, a reconcile asked for when the SLA runs out.
    let p = run(&j, &w);
    assert!(cond(&p).is_none());
    assert!(
        p.requeue_after_ms.unwrap() <= 201_000,
        "{:?}",
        p.requeue_after_ms
    );
    // Waiting 400 s: breached, with a Warning Event.
    j.metadata.creation_timestamp = Some(Time(now() - jiff::SignedDuration::from_secs(400)));
    let p = run(&j, &w);
    let c = cond(&p).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "QueueTimeExceeded")
    );
    assert_eq!(
        c.message,
        "waited 400 s and has not started, past tier gold's SLA of 300 s (sla.maxQueueSeconds)"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "SLABreached" && e.type_ == EventType::Warning)
    );
    // Recorded once: the next reconcile keeps it and raises no Event.
    j.status = p.status.clone();
    let again = run(&j, &w);
    assert!(again.events.iter().all(|e| e.reason != "SLABreached"));
    assert_eq!(
        again
            .status
            .as_ref()
            .map_or(&j.status.as_ref().unwrap().conditions, |s| &s.conditions)
            .iter()
            .filter(|c| c.type_ == "SLABreached")
            .count(),
        1
    );
    // Started after 60 s: within the SLA.
    let mut on_time = job_with(json!({}));
    on_time.metadata.annotations = j.metadata.annotations.clone();
    on_time.metadata.creation_timestamp = Some(Time(now() - jiff::SignedDuration::from_secs(400)));
    on_time.status = Some(GryviaAIJobStatus {
        start_time: Some(Time(now() - jiff::SignedDuration::from_secs(340))),
        phase: Some(JobPhase::Running),
        ..GryviaAIJobStatus::default()
    });
    let c = cond(&run(&on_time, &w)).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "StartedInTime")
    );
    assert_eq!(
        c.message,
        "started after 60 s, within tier gold's SLA of 300 s"
    );
    // No SLA: no condition.
    assert!(cond(&run(&on_time, &AIJobWorld::default())).is_none());
}

#[test]
fn the_pods_carry_the_jobs_type_classification_and_reservation() {
    let mut j = job_with(json!({"type": "batch-inference"}));
    j.metadata.labels = Some(BTreeMap::from([(
        "gryvia.io/data-classification".to_owned(),
        "restricted".to_owned(),
    )]));
    j.metadata.annotations = Some(BTreeMap::from([(
        "gryvia.io/reservation".to_owned(),
        "r1".to_owned(),
    )]));
    let batch = render_job(&j, 0, None);
    let labels = &batch["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["gryvia.io/job-type"], "batch-inference");
    assert_eq!(labels["gryvia.io/data-classification"], "restricted");
    assert_eq!(labels["gryvia.io/reservation"], "r1");
    let plain = render_job(&job_with(json!({})), 0, None);
    let labels = plain["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    assert!(!labels.contains_key("gryvia.io/job-type"));
}
