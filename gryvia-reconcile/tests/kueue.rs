//! The Kueue integration's policy: what tenants, queues and tiers become in Kueue, what a
//! Workload says about a job, and how the AI job reconcile submits a job to Kueue.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::{BTreeMap, BTreeSet};

use gryvia_reconcile::aijob::{
    AIJobReconciler, AIJobWorld, KueueJobWorld, ObservedJob, ObservedPod,
};
use gryvia_reconcile::kueue::{
    self, ANY_FLAVOR, KueueWorld, LOCAL_QUEUE, ObservedWorkload, WorkloadCondition, desired,
    flavor_of, standing,
};
use gryvia_reconcile::{EventType, Reconcile};
use gryvia_types::kueue::ClusterQueue;
use gryvia_types::scheduling::{GryviaPriority, GryviaQueue};
use gryvia_types::testing::ai_job;
use gryvia_types::{FailureClass, GryviaTenant, JobPhase};
use serde_json::{Value, json};

const H100: &str = "NVIDIA-H100-80GB-HBM3";
const A100: &str = "NVIDIA-A100-SXM4-40GB";

fn tenant(name: &str, spec: Value) -> GryviaTenant {
    let mut spec = spec;
    spec["displayName"] = json!(name);
    serde_json::from_value(
        json!({"metadata": {"name": name, "uid": format!("uid-{name}")}, "spec": spec}),
    )
    .unwrap()
}

fn queue(name: &str, spec: Value) -> GryviaQueue {
    serde_json::from_value(
        json!({"metadata": {"name": name, "uid": format!("uid-{name}")}, "spec": spec}),
    )
    .unwrap()
}

fn tier(name: &str, value: i32) -> GryviaPriority {
    serde_json::from_value(
        json!({"metadata": {"name": name, "uid": "u"}, "spec": {"value": value}}),
    )
    .unwrap()
}

fn world() -> KueueWorld {
    KueueWorld {
        gpus_per_product: BTreeMap::from([(H100.to_owned(), 32), (A100.to_owned(), 16)]),
        ..KueueWorld::default()
    }
}

fn cq<'a>(d: &'a kueue::Desired, name: &str) -> &'a ClusterQueue {
    d.cluster_queues
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no ClusterQueue {name}"))
}

/// (flavor, nominal, borrowing, lending) of the GPUs of a ClusterQueue.
fn gpu_quotas(c: &ClusterQueue) -> Vec<(String, String, Option<String>, Option<String>)> {
    c.spec
        .resource_groups
        .iter()
        .flat_map(|g| &g.flavors)
        .map(|f| {
            let r = f
                .resources
                .iter()
                .find(|r| r.name == "nvidia.com/gpu")
                .unwrap();
            (
                f.name.clone(),
                r.nominal_quota.0.clone(),
                r.borrowing_limit.as_ref().map(|q| q.0.clone()),
                r.lending_limit.as_ref().map(|q| q.0.clone()),
            )
        })
        .collect()
}

#[test]
fn a_flavor_is_named_after_its_product_in_lower_case() {
    assert_eq!(flavor_of(H100), "gpu-nvidia-h100-80gb-hbm3");
    assert_eq!(flavor_of("Tesla T4 (PCIe)"), "gpu-tesla-t4--pcie");
}

#[test]
fn a_tenant_tree_shares_a_cohort_and_each_product_gets_its_quota() {
    let mut w = world();
    w.tenants = vec![
        tenant("research", json!({"quotas": {"gpusPerType": {H100: 16}}})),
        tenant(
            "vision",
            json!({"parentTenant": "research", "quotas": {"concurrentGPUs": 4}}),
        ),
        tenant("solo", json!({})),
        tenant("orphan", json!({"parentTenant": "gone"})),
    ];
    let d = desired(&w);
    // Flavors: one per product, with the product as node label.
    let flavors: Vec<&str> = d
        .flavors
        .iter()
        .map(|f| f.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(flavors, vec![flavor_of(A100), flavor_of(H100)]);
    let research = cq(&d, "tenant-research");
    assert_eq!(
        research.spec.cohort_name.as_deref(),
        Some("tenants-research")
    );
    // gpusPerType for the product named, every GPU of the cluster for the other.
    assert_eq!(
        gpu_quotas(research),
        vec![
            (flavor_of(A100), "16".to_owned(), None, None),
            (flavor_of(H100), "16".to_owned(), None, None),
        ]
    );
    let vision = cq(&d, "tenant-vision");
    assert_eq!(vision.spec.cohort_name.as_deref(), Some("tenants-research"));
    assert!(
        gpu_quotas(vision).iter().all(|q| q.1 == "4"),
        "concurrentGPUs per product"
    );
    let preemption = vision.spec.preemption.clone().unwrap();
    assert_eq!(preemption.reclaim_within_cohort.as_deref(), Some("Any"));
    assert_eq!(
        preemption.within_cluster_queue.as_deref(),
        Some("LowerPriority")
    );
    // A tenant alone has no cohort; a missing parent is a problem, not a cohort.
    assert_eq!(cq(&d, "tenant-solo").spec.cohort_name, None);
    assert_eq!(cq(&d, "tenant-orphan").spec.cohort_name, None);
    assert_eq!(d.problems.len(), 1);
    assert!(
        d.problems[0].contains("GryviaTenant orphan: spec.parentTenant \"gone\""),
        "{:?}",
        d.problems
    );
    // Each tenant namespace has Gryvia's LocalQueue to its ClusterQueue, owned by the tenant.
    let lq = d
        .local_queues
        .iter()
        .find(|l| l.metadata.namespace.as_deref() == Some("tenant-vision"))
        .unwrap();
    assert_eq!(lq.metadata.name.as_deref(), Some(LOCAL_QUEUE));
    assert_eq!(lq.spec.cluster_queue, "tenant-vision");
    assert_eq!(
        lq.metadata.owner_references.as_ref().unwrap()[0].kind,
        "GryviaTenant"
    );
    // CPU and memory are covered, beyond any job.
    assert_eq!(
        research.spec.resource_groups[0].covered_resources,
        vec!["nvidia.com/gpu", "cpu", "memory"]
    );
}

#[test]
fn a_queue_maps_to_a_cluster_queue_and_wins_its_namespaces() {
    let mut w = world();
    w.tenants = vec![tenant("ml", json!({}))];
    w.queues = vec![
        queue(
            "a-prod",
            json!({"namespaces": ["tenant-ml", "shared"], "cohort": "org",
                   "queueingStrategy": "BestEffortFIFO",
                   "preemption": {"withinQueue": "LowerPriority", "reclaimWithinCohort": true},
                   "resources": [{"gpuType": H100, "nominal": 8, "borrowingLimit": 4, "lendingLimit": 2},
                                 {"gpuType": "*", "nominal": 2}]}),
        ),
        queue(
            "b-dev",
            json!({"namespaces": ["shared", "dev"],
                   "resources": [{"gpuType": H100, "nominal": 4, "borrowingLimit": 4}]}),
        ),
    ];
    let d = desired(&w);
    let prod = cq(&d, "queue-a-prod");
    assert_eq!(prod.spec.cohort_name.as_deref(), Some("org"));
    assert_eq!(
        prod.spec.queueing_strategy.as_deref(),
        Some("BestEffortFIFO")
    );
    assert_eq!(
        gpu_quotas(prod),
        vec![
            (
                flavor_of(H100),
                "8".to_owned(),
                Some("4".to_owned()),
                Some("2".to_owned())
            ),
            (ANY_FLAVOR.to_owned(), "2".to_owned(), None, None),
        ]
    );
    let p = prod.spec.preemption.clone().unwrap();
    assert_eq!(p.within_cluster_queue.as_deref(), Some("LowerPriority"));
    assert_eq!(p.reclaim_within_cohort.as_deref(), Some("Any"));
    // Without a cohort Kueue takes no borrowing limit; StrictFIFO and Never by default.
    let dev = cq(&d, "queue-b-dev");
    assert_eq!(
        gpu_quotas(dev),
        vec![(flavor_of(H100), "4".to_owned(), None, None)]
    );
    assert_eq!(dev.spec.queueing_strategy.as_deref(), Some("StrictFIFO"));
    assert_eq!(
        dev.spec
            .preemption
            .clone()
            .unwrap()
            .within_cluster_queue
            .as_deref(),
        Some("Never")
    );
    // The any-product flavor selects every GPU node.
    assert!(
        d.flavors
            .iter()
            .any(|f| f.metadata.name.as_deref() == Some(ANY_FLAVOR))
    );
    // LocalQueues: the queue wins the tenant's namespace; a namespace of two queues goes to the
    // first by name, and the second is a problem.
    let to: BTreeMap<&str, &str> = d
        .local_queues
        .iter()
        .map(|l| {
            (
                l.metadata.namespace.as_deref().unwrap(),
                l.spec.cluster_queue.as_str(),
            )
        })
        .collect();
    assert_eq!(
        to,
        BTreeMap::from([
            ("dev", "queue-b-dev"),
            ("shared", "queue-a-prod"),
            ("tenant-ml", "queue-a-prod")
        ])
    );
    assert_eq!(d.problems.len(), 1);
    assert!(
        d.problems[0].starts_with("GryviaQueue b-dev: spec.namespaces: shared"),
        "{:?}",
        d.problems
    );
}

#[test]
fn tiers_and_job_priorities_become_workload_priority_classes() {
    let mut w = world();
    w.priorities = vec![tier("prod", 1000)];
    w.job_priorities = BTreeSet::from([
        (None, 50),
        (Some("prod".to_owned()), 90),
        (Some("missing".to_owned()), 10),
    ]);
    let d = desired(&w);
    let classes: BTreeMap<&str, i32> = d
        .priority_classes
        .iter()
        .map(|c| (c.metadata.name.as_deref().unwrap(), c.value))
        .collect();
    assert_eq!(
        classes,
        BTreeMap::from([
            ("gryvia-priority-50", 50),
            ("prod", 1000),
            ("prod-priority-90", 1090)
        ])
    );
    assert_eq!(kueue::priority_class(Some("prod"), 90), "prod-priority-90");
}

fn cond(type_: &str, status: bool, reason: &str, message: &str) -> WorkloadCondition {
    WorkloadCondition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

fn workload(conditions: Vec<WorkloadCondition>) -> ObservedWorkload {
    ObservedWorkload {
        name: "job-train-abcde".to_owned(),
        cluster_queue: None,
        flavors: Vec::new(),
        conditions,
    }
}

/// A Workload Kueue evicted for a higher-priority one of its ClusterQueue.
fn evicted_workload() -> ObservedWorkload {
    workload(vec![
        cond(
            "Evicted",
            true,
            "Preempted",
            "Preempted to accommodate a workload",
        ),
        cond(
            "Preempted",
            true,
            "InClusterQueue",
            "Preempted to accommodate a workload (UID: u) due to prioritization in the ClusterQueue",
        ),
    ])
}

/// The batch Job a plan applies.
fn batch_job<S>(plan: &gryvia_reconcile::Plan<S>) -> &Value {
    &plan
        .apply
        .iter()
        .find(|c| c.object_ref.kind == "Job")
        .unwrap()
        .object
}

#[test]
fn a_workload_says_where_the_job_stands_and_evictions_are_counted() {
    let none = standing("gryvia", None, None);
    assert_eq!(none.state, "Pending");
    assert!(none.message.unwrap().contains("make the Workload"));
    let waiting = workload(vec![cond(
        "QuotaReserved",
        false,
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu-x, 4 more needed",
    )]);
    let w = standing("gryvia", Some(&waiting), None);
    assert_eq!(w.state, "Pending");
    assert!(w.message.as_deref().unwrap().contains("4 more needed"));
    let mut admitted = workload(vec![
        cond("QuotaReserved", true, "QuotaReserved", ""),
        cond("Admitted", true, "Admitted", "admitted"),
    ]);
    admitted.cluster_queue = Some("queue-a".to_owned());
    admitted.flavors = vec!["gpu-x".to_owned()];
    let a = standing("gryvia", Some(&admitted), Some(&w));
    assert_eq!(
        (a.state.as_str(), a.cluster_queue.as_deref(), a.evictions),
        ("Admitted", Some("queue-a"), 0)
    );
    let mut evicted = evicted_workload();
    evicted.conditions.insert(
        0,
        cond(
            "QuotaReserved",
            false,
            "Pending",
            "insufficient unused quota",
        ),
    );
    let e = standing("gryvia", Some(&evicted), Some(&a));
    assert_eq!(e.state, "Evicted");
    assert_eq!(e.reason.as_deref(), Some("InClusterQueue"));
    assert!(
        e.message
            .as_deref()
            .unwrap()
            .contains("requeued: insufficient"),
        "{e:?}"
    );
    assert_eq!(e.evictions, 1);
    // Still evicted on the next look: not counted twice.
    assert_eq!(standing("gryvia", Some(&evicted), Some(&e)).evictions, 1);
}

fn kueue_world(
    job: Option<ObservedJob>,
    workload: Option<ObservedWorkload>,
    class: bool,
) -> AIJobWorld {
    AIJobWorld {
        job,
        kueue: Some(KueueJobWorld {
            local_queue: Some(LOCAL_QUEUE.to_owned()),
            priority_class_exists: class,
            workload,
        }),
        ..AIJobWorld::default()
    }
}

#[test]
fn a_job_goes_to_kueue_suspended_and_labelled_and_waits_with_kueues_word() {
    let job = ai_job("ml", "train", "img");
    // Its WorkloadPriorityClass first.
    let plan = AIJobReconciler.reconcile(
        &job,
        &kueue_world(None, None, false),
        jiff::Timestamp::UNIX_EPOCH,
    );
    assert!(plan.apply.is_empty());
    assert!(
        plan.status
            .unwrap()
            .message
            .unwrap()
            .contains("WorkloadPriorityClass \"gryvia-priority-50\"")
    );
    // Then a suspended batch Job for the LocalQueue.
    let plan = AIJobReconciler.reconcile(
        &job,
        &kueue_world(None, None, true),
        jiff::Timestamp::UNIX_EPOCH,
    );
    let batch = batch_job(&plan);
    assert_eq!(batch["spec"]["suspend"], json!(true));
    assert_eq!(
        batch["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        json!("gryvia")
    );
    assert_eq!(
        batch["metadata"]["labels"]["kueue.x-k8s.io/priority-class"],
        json!("gryvia-priority-50")
    );
    // Kueue has not admitted it: Pending, Scheduled=False/Queued with Kueue's message.
    let suspended = ObservedJob {
        owned: true,
        suspended: true,
        kueue_queue: Some("gryvia".to_owned()),
        ..ObservedJob::default()
    };
    let waiting = workload(vec![cond(
        "QuotaReserved",
        false,
        "Pending",
        "insufficient unused quota, 4 more needed",
    )]);
    let plan = AIJobReconciler.reconcile(
        &job,
        &kueue_world(Some(suspended.clone()), Some(waiting), true),
        jiff::Timestamp::UNIX_EPOCH,
    );
    let batch = batch_job(&plan);
    assert_eq!(
        batch["spec"]["suspend"],
        json!(true),
        "what Kueue set stays"
    );
    let status = plan.status.unwrap();
    assert_eq!(status.phase, Some(JobPhase::Pending));
    let scheduled = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Scheduled")
        .unwrap();
    assert_eq!(scheduled.reason, "Queued");
    assert!(scheduled.message.contains("4 more needed"), "{scheduled:?}");
    assert_eq!(status.kueue.unwrap().state, "Pending");
    // Admitted: Kueue unsuspended the Job; the apply keeps it so.
    let running = ObservedJob {
        suspended: false,
        active: 1,
        ..suspended
    };
    let admitted = workload(vec![
        cond("QuotaReserved", true, "", ""),
        cond("Admitted", true, "Admitted", ""),
    ]);
    let plan = AIJobReconciler.reconcile(
        &job,
        &kueue_world(Some(running), Some(admitted), true),
        jiff::Timestamp::UNIX_EPOCH,
    );
    let batch = batch_job(&plan);
    assert_eq!(batch["spec"]["suspend"], json!(false));
    assert_eq!(plan.status.unwrap().kueue.unwrap().state, "Admitted");
}

#[test]
fn a_kueue_eviction_is_a_preemption_that_uses_no_retry() {
    let mut job = ai_job("ml", "train", "img");
    let before = gryvia_types::GryviaAIJobStatus {
        kueue: Some(standing(
            "gryvia",
            Some(&workload(vec![cond("Admitted", true, "", "")])),
            None,
        )),
        ..gryvia_types::GryviaAIJobStatus::default()
    };
    job.status = Some(before);
    let evicted = evicted_workload();
    let stopping = ObservedJob {
        owned: true,
        suspended: true,
        kueue_queue: Some("gryvia".to_owned()),
        ..ObservedJob::default()
    };
    let mut world = kueue_world(Some(stopping), Some(evicted), true);
    world.pods = vec![ObservedPod {
        name: "train-0".to_owned(),
        node: Some("n1".to_owned()),
        phase: "Failed".to_owned(),
        deleting: true,
        exit_code: Some(143),
        ..ObservedPod::default()
    }];
    let plan = AIJobReconciler.reconcile(&job, &world, jiff::Timestamp::UNIX_EPOCH);
    assert!(
        plan.events
            .iter()
            .any(|e| e.type_ == EventType::Warning && e.reason == "Preempted")
    );
    let status = plan.status.unwrap();
    assert_eq!(status.retries, 0);
    assert_eq!(status.failures.len(), 1);
    assert_eq!(status.failures[0].class, FailureClass::Infrastructure);
    let preempted = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Preempted")
        .unwrap();
    assert_eq!(
        (preempted.status.as_str(), preempted.reason.as_str()),
        ("True", "InClusterQueue")
    );
    assert_eq!(status.phase, Some(JobPhase::Pending));
    assert_eq!(status.kueue.unwrap().evictions, 1);
}

#[test]
fn a_job_goes_to_the_queue_its_batch_job_was_made_for_else_its_label_else_the_namespaces() {
    use gryvia_reconcile::kueue::{covers, local_queue_for};
    let q = queue(
        "q",
        json!({"namespaces": ["ml"], "resources": [{"gpuType": H100, "nominal": 8}]}),
    );
    assert!(covers("ml", [&q], std::iter::empty()));
    assert!(covers("tenant-vision", [], ["vision"].into_iter()));
    assert!(!covers("other", [&q], ["vision"].into_iter()));
    // A batch Job keeps the LocalQueue it was made for, or none (made before Kueue).
    assert_eq!(
        local_queue_for(Some(Some("lq")), None, true, true).as_deref(),
        Some("lq")
    );
    assert_eq!(local_queue_for(Some(None), Some("mine"), true, true), None);
    // A new one: the job's label, Gryvia's LocalQueue, `default`, or none.
    assert_eq!(
        local_queue_for(None, Some("mine"), true, true).as_deref(),
        Some("mine")
    );
    assert_eq!(
        local_queue_for(None, None, true, true).as_deref(),
        Some(LOCAL_QUEUE)
    );
    assert_eq!(
        local_queue_for(None, None, false, true).as_deref(),
        Some("default")
    );
    assert_eq!(local_queue_for(None, None, false, false), None);
}

#[test]
fn the_world_counts_gpus_per_product_and_the_priorities_of_unfinished_jobs() {
    let node = |name: &str, product: &str, gpus: u32| -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus.to_string()}}
        }))
        .unwrap()
    };
    let mut done = ai_job("ml", "done", "img");
    done.spec.priority = 7;
    done.status = Some(gryvia_types::GryviaAIJobStatus {
        phase: Some(JobPhase::Succeeded),
        ..gryvia_types::GryviaAIJobStatus::default()
    });
    let mut tiered = ai_job("ml", "tiered", "img");
    tiered.metadata.annotations = Some(BTreeMap::from([(
        "gryvia.io/priority-class".to_owned(),
        "prod".to_owned(),
    )]));
    let mut leaving = tenant("leaving", json!({}));
    leaving.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    let w = KueueWorld::of(
        &[tenant("ml", json!({})), leaving],
        &[],
        &[],
        &[node("a", H100, 8), node("b", H100, 8), node("c", A100, 4)],
        &[ai_job("ml", "plain", "img"), tiered, done],
    );
    assert_eq!(
        w.gpus_per_product,
        BTreeMap::from([(A100.to_owned(), 4), (H100.to_owned(), 16)])
    );
    assert_eq!(
        w.job_priorities,
        BTreeSet::from([(None, 50), (Some("prod".to_owned()), 50)])
    );
    let names: Vec<&str> = w
        .tenants
        .iter()
        .filter_map(|t| t.metadata.name.as_deref())
        .collect();
    assert_eq!(names, vec!["ml"], "a tenant being deleted gets no queue");
}

#[test]
fn a_local_queue_waits_for_its_namespace_and_says_so() {
    use gryvia_types::kueue::{LocalQueue, LocalQueueSpec};
    let lq = |ns: &str| {
        let mut q = LocalQueue::new(
            LOCAL_QUEUE,
            LocalQueueSpec {
                cluster_queue: "c".into(),
            },
        );
        q.metadata.namespace = Some(ns.to_owned());
        q
    };
    let mut d = kueue::Desired {
        local_queues: vec![lq("tenant-a"), lq("tenant-gone")],
        ..kueue::Desired::default()
    };
    d.wait_for_namespaces(|ns| ns == "tenant-a");
    let kept: Vec<Option<String>> = d
        .local_queues
        .iter()
        .map(|q| q.metadata.namespace.clone())
        .collect();
    assert_eq!(kept, vec![Some("tenant-a".to_owned())]);
    assert_eq!(
        d.problems,
        vec!["namespace tenant-gone does not exist yet: its LocalQueue gryvia waits for it"]
    );
}
