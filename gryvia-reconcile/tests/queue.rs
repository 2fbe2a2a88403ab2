//! The native queue scheduler's admission cycle: quota, cohorts, gangs, order, preemption,
//! fractions, backfill and why-pending, on plain inputs.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::queue::{
    Fraction, JobInfo, JobKey, JobState, NodeCapacity, ONE_GPU, QueueInfo, QueueWorld, QuotaEntry,
    Share, Slot, Unavailable, Used, cycle, expected_start,
};
use gryvia_types::scheduling::QueueingStrategy;

const H100: &str = "NVIDIA-H100-80GB-HBM3";

fn now() -> jiff::Timestamp {
    "2026-12-03T12:00:00Z".parse().unwrap()
}

fn at(minutes: i64) -> jiff::Timestamp {
    now()
        .checked_add(jiff::SignedDuration::from_mins(minutes))
        .unwrap()
}

fn queue(name: &str, nominal: i64) -> QueueInfo {
    QueueInfo {
        name: name.into(),
        namespaces: vec![name.into()],
        cohort: None,
        resources: vec![QuotaEntry {
            gpu_type: H100.into(),
            nominal: nominal * ONE_GPU,
            borrowing_limit: None,
            lending_limit: None,
        }],
        strategy: QueueingStrategy::StrictFIFO,
        preempt_lower_priority: false,
        reclaim_within_cohort: false,
        gang_admission: true,
    }
}

fn in_cohort(mut q: QueueInfo, cohort: &str) -> QueueInfo {
    q.cohort = Some(cohort.into());
    q
}

fn node(name: &str, gpus: u32) -> NodeCapacity {
    NodeCapacity {
        name: name.into(),
        product: Some(H100.into()),
        allocatable: Used(BTreeMap::from([(Slot::Gpu, gpus)])),
        gpu_memory_mib: Some(81_559),
        ..NodeCapacity::default()
    }
}

/// A pending job in namespace `ns`, created `age` minutes before now.
fn job(ns: &str, name: &str, workers: u32, gpus: u32, age: i64) -> JobInfo {
    JobInfo {
        key: JobKey::new(ns, name),
        created: at(-age),
        class_value: 0,
        priority: 50,
        gpu_type: Some(H100.into()),
        workers,
        share: Share::Gpus(gpus),
        reservation: None,
        expected_seconds: None,
        grace_seconds: 30,
        state: JobState::Pending,
        live: BTreeMap::new(),
        node_selector: BTreeMap::new(),
        tolerations: Vec::new(),
        sla_seconds: None,
        quota_override_percent: 0,
    }
}

fn world(queues: Vec<QueueInfo>, nodes: Vec<NodeCapacity>, jobs: Vec<JobInfo>) -> QueueWorld {
    QueueWorld {
        queues,
        jobs,
        nodes,
    }
}

/// The world after a cycle's decisions are written and the workers of admitted jobs run on
/// their planned nodes; preempted jobs keep their workers until `release` says they are gone.
fn apply(w: &mut QueueWorld, c: &gryvia_reconcile::queue::Cycle) {
    for a in &c.admitted {
        let j = w.jobs.iter_mut().find(|j| j.key == a.job).unwrap();
        j.state = JobState::Admitted(a.admission.clone());
        j.live = BTreeMap::new();
        for n in &a.admission.nodes {
            *j.live.entry(n.clone()).or_insert(0) += 1;
        }
    }
    for p in &c.preempted {
        let j = w.jobs.iter_mut().find(|j| j.key == p.job).unwrap();
        let JobState::Admitted(a) = j.state.clone() else {
            panic!("{} preempted while not admitted", p.job)
        };
        j.state = JobState::Preempting(a, p.notice.clone());
    }
    for r in &c.released {
        let j = w.jobs.iter_mut().find(|j| j.key == *r).unwrap();
        j.state = JobState::Pending;
        j.live.clear();
    }
}

/// The workers of every preempted job end.
fn workers_of_preempted_end(w: &mut QueueWorld) {
    for j in &mut w.jobs {
        if matches!(j.state, JobState::Preempting(..)) {
            j.live.clear();
        }
    }
}

fn admitted(c: &gryvia_reconcile::queue::Cycle) -> Vec<String> {
    c.admitted.iter().map(|a| a.job.name.clone()).collect()
}

fn reason<'a>(c: &'a gryvia_reconcile::queue::Cycle, ns: &str, name: &str) -> &'a str {
    &c.pending[&JobKey::new(ns, name)].reason
}

#[test]
fn a_queue_admits_up_to_its_nominal_quota_and_says_why_the_rest_waits() {
    let w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8), node("n2", 8)],
        vec![
            job("ml", "a", 1, 4, 3),
            job("ml", "b", 1, 4, 2),
            job("ml", "c", 1, 4, 1),
        ],
    );
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["a", "b"]);
    assert_eq!(
        reason(&c, "ml", "c"),
        format!("needs 4 GPUs of {H100}; queue ml has 0 of 8 nominal free")
    );
    let st = &c.pending[&JobKey::new("ml", "c")];
    assert_eq!((st.queue.as_str(), st.position), ("ml", 1));
    assert_eq!(st.expected_start, None, "no running job has a known end");
    let q = &c.queues["ml"];
    assert_eq!((q.pending, q.admitted), (1, 2));
    assert_eq!(q.entries[H100], (8 * ONE_GPU, 0, 0));
}

#[test]
fn queues_of_a_cohort_borrow_unused_quota_within_the_limits() {
    let jobs = || {
        vec![
            job("a", "a1", 1, 8, 5),
            job("a", "a2", 1, 4, 4),
            job("a", "a3", 1, 2, 3),
        ]
    };
    let nodes = || vec![node("n1", 8), node("n2", 8), node("n3", 8)];
    // No limits: a borrows all of b's idle 8.
    let c = cycle(
        &world(
            vec![in_cohort(queue("a", 8), "c"), in_cohort(queue("b", 8), "c")],
            nodes(),
            jobs(),
        ),
        now(),
    );
    assert_eq!(admitted(&c), ["a1", "a2", "a3"]);
    assert_eq!(c.queues["a"].entries[H100], (14 * ONE_GPU, 6 * ONE_GPU, 0));
    assert_eq!(c.queues["b"].entries[H100], (0, 0, 6 * ONE_GPU));
    // a's borrowing limit of 4.
    let mut a = in_cohort(queue("a", 8), "c");
    a.resources[0].borrowing_limit = Some(4 * ONE_GPU);
    let c = cycle(
        &world(vec![a, in_cohort(queue("b", 8), "c")], nodes(), jobs()),
        now(),
    );
    assert_eq!(admitted(&c), ["a1", "a2"]);
    assert_eq!(
        reason(&c, "a", "a3"),
        format!(
            "needs 2 GPUs of {H100}; queue a has 0 of 8 nominal free, cohort c lends 4 (borrowing limit 4)"
        )
    );
    // b lends at most 2.
    let mut b = in_cohort(queue("b", 8), "c");
    b.resources[0].lending_limit = Some(2 * ONE_GPU);
    let c = cycle(
        &world(vec![in_cohort(queue("a", 8), "c"), b], nodes(), jobs()),
        now(),
    );
    assert_eq!(admitted(&c), ["a1"], "a2 (4) does not fit in the 2 b lends");
    assert_eq!(
        reason(&c, "a", "a3"),
        "behind a/a2, which does not fit yet (StrictFIFO)"
    );
}

#[test]
fn strict_fifo_never_passes_a_blocked_head_and_best_effort_does() {
    let jobs = vec![job("ml", "big", 1, 8, 3), job("ml", "small", 1, 2, 1)];
    let nodes = vec![node("n1", 4)];
    let c = cycle(
        &world(vec![queue("ml", 16)], nodes.clone(), jobs.clone()),
        now(),
    );
    assert!(c.admitted.is_empty());
    assert_eq!(
        reason(&c, "ml", "small"),
        "behind ml/big, which does not fit yet (StrictFIFO)"
    );
    assert_eq!(c.pending[&JobKey::new("ml", "small")].position, 2);
    let mut q = queue("ml", 16);
    q.strategy = QueueingStrategy::BestEffortFIFO;
    let c = cycle(&world(vec![q], nodes, jobs), now());
    assert_eq!(admitted(&c), ["small"]);
    assert_eq!(
        reason(&c, "ml", "big"),
        format!("needs 1 worker x 8 GPUs of {H100}; room for 0 workers on 1 node of {H100}")
    );
}

#[test]
fn order_is_class_value_then_priority_then_age() {
    let mut old_low = job("ml", "old-low", 1, 8, 10);
    old_low.priority = 10;
    let mut new_high = job("ml", "new-high", 1, 8, 1);
    new_high.priority = 90;
    let mut classed = job("ml", "classed", 1, 8, 0);
    classed.priority = 0;
    classed.class_value = 1000;
    let same_a = job("ml", "same-a", 1, 8, 5);
    let c = cycle(
        &world(
            vec![queue("ml", 8)],
            vec![node("n1", 8)],
            vec![old_low, new_high, classed, same_a],
        ),
        now(),
    );
    assert_eq!(admitted(&c), ["classed"]);
    let pos = |n: &str| c.pending[&JobKey::new("ml", n)].position;
    assert_eq!((pos("new-high"), pos("same-a"), pos("old-low")), (1, 2, 3));
}

#[test]
fn a_gang_waits_whole_without_holding_gpus_then_starts_whole() {
    // 16 workers x 1 GPU... here 2 workers x 8 GPUs on one free node and one half-busy node.
    let mut busy = node("n2", 8);
    busy.used = Used(BTreeMap::from([(Slot::Gpu, 4)]));
    let mut w = world(
        vec![queue("ml", 16)],
        vec![node("n1", 8), busy],
        vec![job("ml", "gang", 2, 8, 1)],
    );
    let c = cycle(&w, now());
    assert!(c.admitted.is_empty(), "never half-placed");
    assert_eq!(
        reason(&c, "ml", "gang"),
        format!("needs 2 workers x 8 GPUs of {H100}; room for 1 worker on 2 nodes of {H100}")
    );
    assert_eq!(
        c.queues["ml"].entries[H100].0, 0,
        "a waiting gang holds no quota"
    );
    w.nodes[1].used = Used::default();
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["gang"]);
    assert_eq!(c.admitted[0].admission.nodes, ["n1", "n2"]);
    assert_eq!(c.admitted[0].admission.resource, "nvidia.com/gpu");
    assert_eq!(c.admitted[0].admission.per_worker, 8);
}

#[test]
fn quarantined_cordoned_and_reserved_nodes_are_not_capacity() {
    let mut q = node("q", 8);
    q.unavailable = Some(Unavailable::Quarantined);
    let mut c1 = node("c", 8);
    c1.unavailable = Some(Unavailable::Cordoned);
    let mut r = node("r", 8);
    r.reserved_by = Some("team-x".into());
    let w = world(
        vec![queue("ml", 16)],
        vec![q, c1, r.clone()],
        vec![job("ml", "j", 1, 8, 1)],
    );
    let c = cycle(&w, now());
    assert_eq!(
        reason(&c, "ml", "j"),
        format!(
            "needs 1 worker x 8 GPUs of {H100}; room for 0 workers on 3 nodes of {H100}: 1 quarantined, 1 cordoned, 1 reserved"
        )
    );
    // The reservation's own job may use its node.
    let mut mine = job("ml", "mine", 1, 8, 1);
    mine.reservation = Some("team-x".into());
    let c = cycle(&world(vec![queue("ml", 16)], vec![r], vec![mine]), now());
    assert_eq!(admitted(&c), ["mine"]);
}

#[test]
fn a_higher_priority_job_preempts_the_fewest_newest_lower_priority_jobs() {
    let mut q = queue("ml", 8);
    q.preempt_lower_priority = true;
    let mut w = world(
        vec![q],
        vec![node("n1", 8)],
        vec![
            job("ml", "low-old", 1, 2, 30),
            job("ml", "low-mid", 1, 2, 20),
            job("ml", "low-big", 1, 4, 10),
        ],
    );
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["low-old", "low-mid", "low-big"]);
    apply(&mut w, &c);
    let mut urgent = job("ml", "urgent", 1, 4, 0);
    urgent.priority = 90;
    w.jobs.push(urgent);
    let c = cycle(&w, now());
    assert!(c.admitted.is_empty());
    let victims: Vec<_> = c.preempted.iter().map(|p| p.job.name.as_str()).collect();
    assert_eq!(victims, ["low-big"], "one job of 4 rather than two of 2");
    let n = &c.preempted[0].notice;
    assert_eq!(
        (n.by.as_str(), n.reason.as_str(), n.grace_seconds),
        ("ml/urgent", "WithinQueue", 30)
    );
    assert_eq!(
        reason(&c, "ml", "urgent"),
        "preempting 1 job (ml/low-big); starts when their GPUs are released"
    );
    assert_eq!(
        c.pending[&JobKey::new("ml", "urgent")]
            .expected_start
            .as_ref()
            .map(|t| t.0),
        Some(
            at(0)
                .checked_add(jiff::SignedDuration::from_secs(30))
                .unwrap()
        ),
        "after the victim's grace period"
    );
    apply(&mut w, &c);
    // The victim's workers are still there: nobody else is preempted, nothing double-counted.
    let c = cycle(&w, now());
    assert!(c.preempted.is_empty() && c.admitted.is_empty());
    assert_eq!(
        reason(&c, "ml", "urgent"),
        "waiting for 1 preempted job to release their GPUs"
    );
    assert_eq!(c.queues["ml"].entries[H100].0, 8 * ONE_GPU);
    workers_of_preempted_end(&mut w);
    let c = cycle(&w, now());
    assert_eq!(c.released, [JobKey::new("ml", "low-big")]);
    assert_eq!(
        admitted(&c),
        ["urgent"],
        "the victim queues again behind it"
    );
    assert!(reason(&c, "ml", "low-big").starts_with("needs 4 GPUs"));
}

#[test]
fn a_lender_reclaims_its_quota_from_borrowers() {
    let mut b = in_cohort(queue("b", 8), "c");
    b.reclaim_within_cohort = true;
    let mut w = world(
        vec![in_cohort(queue("a", 8), "c"), b],
        vec![node("n1", 8), node("n2", 8)],
        vec![
            job("a", "a1", 1, 8, 3),
            job("a", "a2", 1, 4, 2),
            job("a", "a3", 1, 4, 1),
        ],
    );
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["a1", "a2", "a3"]);
    apply(&mut w, &c);
    w.jobs.push(job("b", "mine", 1, 4, 0));
    let c = cycle(&w, now());
    let victims: Vec<_> = c
        .preempted
        .iter()
        .map(|p| (p.job.name.as_str(), p.notice.reason.as_str()))
        .collect();
    assert_eq!(victims, [("a3", "Reclaim")], "the newest borrower's job");
    apply(&mut w, &c);
    workers_of_preempted_end(&mut w);
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["mine"]);
    assert_eq!(c.queues["a"].entries[H100], (12 * ONE_GPU, 4 * ONE_GPU, 0));
    assert_eq!(
        reason(&c, "a", "a3"),
        format!("needs 4 GPUs of {H100}; queue a has 0 of 8 nominal free, cohort c lends 0")
    );
}

#[test]
fn without_reclaim_a_lender_waits_for_its_borrowed_quota() {
    let mut w = world(
        vec![in_cohort(queue("a", 8), "c"), in_cohort(queue("b", 8), "c")],
        vec![node("n1", 8), node("n2", 8)],
        vec![job("a", "a1", 2, 8, 3)],
    );
    let c = cycle(&w, now());
    apply(&mut w, &c);
    w.jobs.push(job("b", "mine", 1, 4, 0));
    let c = cycle(&w, now());
    assert!(c.preempted.is_empty() && c.admitted.is_empty());
    assert_eq!(
        reason(&c, "b", "mine"),
        format!("needs 4 GPUs of {H100}; queue b has 8 of 8 nominal free, cohort c lends 0")
    );
}

#[test]
fn two_half_gpu_jobs_share_one_gpu_by_time_slicing_and_quota_counts_halves() {
    let shared = NodeCapacity {
        name: "ts".into(),
        product: Some(H100.into()),
        allocatable: Used(BTreeMap::from([(Slot::Shared, 2)])),
        replicas: 2,
        ..NodeCapacity::default()
    };
    let half = |n: &str, age| {
        let mut j = job("ml", n, 1, 1, age);
        j.share = Share::Fraction(Fraction::Half);
        j
    };
    let c = cycle(
        &world(
            vec![queue("ml", 1)],
            vec![shared],
            vec![half("h1", 3), half("h2", 2), half("h3", 1)],
        ),
        now(),
    );
    assert_eq!(admitted(&c), ["h1", "h2"]);
    for a in &c.admitted {
        assert_eq!(
            (
                a.admission.resource.as_str(),
                a.admission.per_worker,
                a.admission.milli_gpus
            ),
            ("nvidia.com/gpu.shared", 1, 500)
        );
        assert_eq!(a.admission.nodes, ["ts"]);
    }
    assert_eq!(
        reason(&c, "ml", "h3"),
        format!("needs 0.5 GPUs of {H100}; queue ml has 0 of 1 nominal free")
    );
}

#[test]
fn a_fraction_takes_the_mig_slice_of_its_size() {
    let mig = NodeCapacity {
        name: "mig".into(),
        product: Some(H100.into()),
        allocatable: Used(BTreeMap::from([
            (Slot::Mig("1g.10gb".into()), 7),
            (Slot::Mig("3g.40gb".into()), 2),
        ])),
        gpu_memory_mib: Some(81_559),
        ..NodeCapacity::default()
    };
    let mut half = job("ml", "half", 1, 1, 2);
    half.share = Share::Fraction(Fraction::Half);
    let mut eighth = job("ml", "eighth", 1, 1, 1);
    eighth.share = Share::Fraction(Fraction::Eighth);
    let c = cycle(
        &world(vec![queue("ml", 8)], vec![mig], vec![half, eighth]),
        now(),
    );
    let got: Vec<_> = c
        .admitted
        .iter()
        .map(|a| a.admission.resource.as_str())
        .collect();
    assert_eq!(got, ["nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"]);
}

#[test]
fn backfill_starts_a_small_job_only_when_it_does_not_delay_the_blocked_head() {
    let mut q = queue("ml", 24);
    q.strategy = QueueingStrategy::BestEffortFIFO;
    let mut w = world(
        vec![q],
        vec![node("n1", 8), node("n2", 8)],
        vec![job("ml", "running", 1, 8, 60)],
    );
    w.jobs[0].expected_seconds = Some(3600);
    let c = cycle(&w, now());
    apply(&mut w, &c);
    // The head needs both nodes whole: it can start when `running` ends, in an hour.
    w.jobs.push(job("ml", "head", 2, 8, 10));
    let mut short = job("ml", "short", 1, 4, 5);
    short.expected_seconds = Some(1800);
    let mut long = job("ml", "long", 1, 4, 4);
    long.expected_seconds = Some(7200);
    let unknown = job("ml", "unknown", 1, 4, 3);
    w.jobs.extend([short, long, unknown]);
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["short"], "ends before the head can start");
    assert_eq!(
        reason(&c, "ml", "long"),
        "fits, but would delay the expected start of ml/head"
    );
    assert_eq!(
        reason(&c, "ml", "unknown"),
        "fits, but would delay the expected start of ml/head"
    );
    assert_eq!(
        c.pending[&JobKey::new("ml", "head")]
            .expected_start
            .as_ref()
            .map(|t| t.0),
        Some(at(60))
    );
    assert_eq!(
        expected_start(&w, &JobKey::new("ml", "head"), now()),
        Some(at(60))
    );
}

#[test]
fn a_job_without_gpus_is_admitted_without_quota() {
    let c = cycle(
        &world(
            vec![queue("ml", 0)],
            vec![],
            vec![job("ml", "cpu", 2, 0, 1)],
        ),
        now(),
    );
    assert_eq!(admitted(&c), ["cpu"]);
    assert_eq!(c.admitted[0].admission.milli_gpus, 0);
}

#[test]
fn a_namespace_listed_by_two_queues_belongs_to_the_first_by_name() {
    let mut b = queue("b", 8);
    b.namespaces = vec!["a".into()];
    let c = cycle(
        &world(
            vec![b, queue("a", 8)],
            vec![node("n1", 8)],
            vec![job("a", "j", 1, 8, 1)],
        ),
        now(),
    );
    assert_eq!(c.admitted[0].admission.queue, "a");
    assert_eq!(
        c.problems["b"],
        ["namespace a is also listed by queue a, which holds its jobs"]
    );
}

#[test]
fn a_job_type_the_queue_has_no_quota_for_is_named() {
    let mut j = job("ml", "a100", 1, 1, 1);
    j.gpu_type = Some("NVIDIA-A100".into());
    let c = cycle(
        &world(vec![queue("ml", 8)], vec![node("n1", 8)], vec![j]),
        now(),
    );
    assert_eq!(
        reason(&c, "ml", "a100"),
        "queue ml has no quota for GPU type NVIDIA-A100"
    );
}

#[test]
fn a_second_cycle_over_what_the_first_wrote_changes_nothing() {
    let mut q = queue("ml", 16);
    q.preempt_lower_priority = true;
    let mut w = world(
        vec![q],
        vec![node("n1", 8), node("n2", 8)],
        vec![
            job("ml", "a", 1, 8, 3),
            job("ml", "b", 2, 4, 2),
            job("ml", "c", 1, 8, 1),
        ],
    );
    let c1 = cycle(&w, now());
    apply(&mut w, &c1);
    let c2 = cycle(&w, now());
    assert!(c2.admitted.is_empty() && c2.preempted.is_empty() && c2.released.is_empty());
    assert_eq!(c1.pending, c2.pending);
}

#[test]
fn a_cycle_reads_and_writes_json_with_resource_names_and_job_keys_as_text() {
    let w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8)],
        vec![job("ml", "a", 1, 4, 1), job("ml", "b", 1, 8, 0)],
    );
    let json = serde_json::to_value(&w).unwrap();
    assert_eq!(
        json["nodes"][0]["allocatable"],
        serde_json::json!({"nvidia.com/gpu": 8})
    );
    assert_eq!(json["jobs"][0]["key"], "ml/a");
    let back: QueueWorld = serde_json::from_value(json).unwrap();
    assert_eq!(back, w);
    let c = serde_json::to_value(cycle(&w, now())).unwrap();
    assert_eq!(c["admitted"][0]["job"], "ml/a");
    assert!(
        c["pending"]["ml/b"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("needs 8 GPUs")
    );
    let bad: Result<QueueWorld, _> = serde_json::from_value(serde_json::json!({
        "queues": [], "jobs": [], "nodes": [{"name": "n", "allocatable": {"cpu": 8}}]
    }));
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("\"cpu\" is not a GPU resource")
    );
}

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_world_is_read_from_queues_jobs_priorities_nodes_and_pods() {
    use gryvia_reconcile::queue::world_of;
    let queue: gryvia_types::scheduling::GryviaQueue = from_json(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQueue", "metadata": {"name": "ml"},
        "spec": {"namespaces": ["ml"], "resources": [{"gpuType": H100, "nominal": 16}],
                 "preemption": {"withinQueue": "LowerPriority"}}
    }));
    let priority: gryvia_types::scheduling::GryviaPriority = from_json(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority", "metadata": {"name": "urgent"},
        "spec": {"value": 1000}
    }));
    let job = |name: &str, ns: &str, status: serde_json::Value| -> gryvia_types::GryviaAIJob {
        from_json(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2026-12-03T11:00:00Z",
                         "annotations": {"gryvia.io/priority-class": "urgent"}},
            "spec": {"image": "i", "gpus": 4, "replicas": 2, "gpuType": H100},
            "status": status
        }))
    };
    let admission = serde_json::json!({"queue": "ml", "gpuType": H100, "product": H100,
        "resource": "nvidia.com/gpu", "perWorker": 4, "milliGpus": 8000, "nodes": ["n1", "n1"],
        "admittedAt": "2026-12-03T11:30:00Z"});
    let jobs = vec![
        job("running", "ml", serde_json::json!({"admission": admission})),
        job("waiting", "ml", serde_json::json!({})),
        job("done", "ml", serde_json::json!({"phase": "Succeeded"})),
        job("elsewhere", "other", serde_json::json!({})),
    ];
    let node: k8s_openapi::api::core::v1::Node = from_json(serde_json::json!({
        "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": H100}},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}}
    }));
    let cpu_only: k8s_openapi::api::core::v1::Node = from_json(serde_json::json!({
        "metadata": {"name": "cpu"}, "status": {"allocatable": {"cpu": "64"}}
    }));
    let pod = |name: &str,
               ns: &str,
               job: Option<&str>,
               gpus: &str,
               phase: &str|
     -> k8s_openapi::api::core::v1::Pod {
        let labels = job.map_or(
            serde_json::json!({}),
            |j| serde_json::json!({"gryvia.io/job-name": j}),
        );
        from_json(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"phase": phase}
        }))
    };
    let pods = vec![
        pod("running-0", "ml", Some("running"), "4", "Running"),
        pod("running-1", "ml", Some("running"), "4", "Running"),
        pod("someone-else", "other", None, "2", "Running"),
        pod("finished", "other", None, "2", "Succeeded"),
    ];
    let w = world_of(&[queue], &jobs, &[priority], &[node, cpu_only], &pods);
    let names: Vec<&str> = w.jobs.iter().map(|j| j.key.name.as_str()).collect();
    assert_eq!(
        names,
        ["running", "waiting"],
        "finished jobs and uncovered namespaces are left out"
    );
    assert_eq!(w.jobs[0].class_value, 1000);
    assert_eq!(w.jobs[0].live, BTreeMap::from([("n1".to_owned(), 2)]));
    assert!(matches!(w.jobs[0].state, JobState::Admitted(_)));
    assert_eq!(w.nodes.len(), 1, "nodes without GPUs are left out");
    assert_eq!(
        w.nodes[0].used.of(&Slot::Gpu),
        2,
        "only pods that are not admitted workers"
    );
    assert!(w.queues[0].preempt_lower_priority);
    let c = cycle(&w, now());
    assert_eq!(
        reason(&c, "ml", "waiting"),
        format!("needs 2 workers x 4 GPUs of {H100}; room for 0 workers on 1 node of {H100}")
    );
}

#[test]
fn every_pending_job_gets_an_expected_start_from_the_look_ahead() {
    let mut w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8)],
        vec![job("ml", "running", 1, 8, 30)],
    );
    w.jobs[0].expected_seconds = Some(3600);
    let c = cycle(&w, now());
    apply(&mut w, &c);
    let mut b = job("ml", "b", 1, 8, 20);
    b.expected_seconds = Some(1800);
    let mut c2 = job("ml", "c", 1, 8, 10);
    c2.expected_seconds = Some(3600);
    let unknown_then = job("ml", "d", 1, 8, 5);
    let after_unknown = job("ml", "e", 1, 8, 1);
    w.jobs.extend([b, c2, unknown_then, after_unknown]);
    let c = cycle(&w, now());
    let eta = |n: &str| {
        c.pending[&JobKey::new("ml", n)]
            .expected_start
            .as_ref()
            .map(|t| t.0)
    };
    assert_eq!(eta("b"), Some(at(60)), "when the running job ends");
    assert_eq!(eta("c"), Some(at(90)), "after b's 30 minutes");
    assert_eq!(eta("d"), Some(at(150)), "after c's hour");
    assert_eq!(eta("e"), None, "d's end is not known");
    let pos: Vec<i32> = ["b", "c", "d", "e"]
        .iter()
        .map(|n| c.pending[&JobKey::new("ml", *n)].position)
        .collect();
    assert_eq!(pos, [1, 2, 3, 4]);
}

#[test]
fn fractions_and_gpu_counts_read_and_print_exactly() {
    use gryvia_reconcile::queue::gpus_text;
    assert_eq!(Fraction::of(0.5), Some(Fraction::Half));
    assert_eq!(Fraction::of(0.125), Some(Fraction::Eighth));
    assert_eq!(Fraction::of(0.3), None);
    assert_eq!(Share::Fraction(Fraction::Quarter).milli(), 250);
    assert_eq!(
        (
            gpus_text(8000),
            gpus_text(500),
            gpus_text(2250),
            gpus_text(125)
        ),
        ("8".into(), "0.5".into(), "2.25".into(), "0.125".into())
    );
}

#[test]
fn backfill_over_jobs_admitted_in_earlier_cycles_never_delays_the_head() {
    let mut q = queue("ml", 8);
    q.strategy = QueueingStrategy::BestEffortFIFO;
    let mut running = job("ml", "running", 1, 4, 60);
    running.expected_seconds = Some(900);
    running.priority = 0;
    let mut w = world(vec![q], vec![node("n1", 8)], vec![running]);
    let c = cycle(&w, now());
    apply(&mut w, &c);
    let mut head = job("ml", "head", 1, 8, 10);
    head.priority = 50;
    let mut short = job("ml", "short", 1, 2, 5);
    short.expected_seconds = Some(120);
    short.priority = 0;
    w.jobs.extend([head, short]);
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["short"]);
    apply(&mut w, &c);
    let mut endless = job("ml", "endless", 1, 2, 1);
    endless.priority = 0;
    w.jobs.push(endless);
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), Vec::<String>::new());
    assert_eq!(
        reason(&c, "ml", "endless"),
        "fits, but would delay the expected start of ml/head"
    );
}

fn ai_job(ns: &str, name: &str, status: serde_json::Value) -> gryvia_types::GryviaAIJob {
    from_json(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"image": "i", "gpus": 8},
        "status": status,
    }))
}

#[test]
fn a_cycle_writes_only_what_changed_with_the_notice_first_and_events_for_preemptions() {
    use gryvia_reconcile::queue::{QueueFields, job_writes};
    let mut w = world(
        vec![in_cohort(
            QueueInfo {
                preempt_lower_priority: true,
                ..queue("ml", 8)
            },
            "c",
        )],
        vec![node("n1", 8)],
        vec![job("ml", "low", 1, 8, 60)],
    );
    w.jobs[0].priority = 10;
    let c = cycle(&w, now());
    let jobs = vec![ai_job("ml", "low", serde_json::json!({}))];
    let writes = job_writes(&jobs, &c);
    assert_eq!(writes.len(), 1);
    let a = writes[0].fields.admission.clone().unwrap();
    assert!(writes[0].fields.queue.is_none() && writes[0].event.is_none());
    apply(&mut w, &c);
    let low = ai_job("ml", "low", serde_json::json!({"admission": a}));
    assert!(
        job_writes(std::slice::from_ref(&low), &cycle(&w, now())).is_empty(),
        "nothing changed"
    );

    // A higher-priority job: low is preempted, notice first, admission kept until released.
    let mut high = job("ml", "high", 1, 8, 1);
    high.priority = 90;
    w.jobs.push(high);
    let c = cycle(&w, now());
    let high_obj = ai_job("ml", "high", serde_json::json!({}));
    let writes = job_writes(&[low.clone(), high_obj.clone()], &c);
    let low_w = writes.iter().find(|x| x.job.name == "low").unwrap();
    assert_eq!(low_w.fields.admission.as_ref(), Some(&a));
    let notice = low_w.fields.preemption.clone().unwrap();
    assert_eq!(
        low_w.notice.as_deref(),
        Some(
            format!(
                "by=ml/high; reason=WithinQueue; noticeAt={}; graceSeconds=30",
                notice.notice_at.0
            )
            .as_str()
        )
    );
    let ev = low_w.event.as_ref().unwrap();
    assert_eq!(
        (ev.type_, ev.reason.as_str()),
        (gryvia_reconcile::EventType::Warning, "Preempted")
    );
    let high_w = writes.iter().find(|x| x.job.name == "high").unwrap();
    assert!(
        high_w
            .fields
            .queue
            .as_ref()
            .unwrap()
            .reason
            .starts_with("preempting 1 job (ml/low)")
    );

    // Its workers gone: released (admission and notice cleared), with an Event; high starts.
    apply(&mut w, &c);
    workers_of_preempted_end(&mut w);
    let c = cycle(&w, now());
    let low = ai_job(
        "ml",
        "low",
        serde_json::json!({"admission": a, "preemption": notice}),
    );
    let writes = job_writes(&[low, high_obj], &c);
    let low_w = writes.iter().find(|x| x.job.name == "low").unwrap();
    assert!(low_w.fields.admission.is_none() && low_w.fields.preemption.is_none());
    assert_eq!(low_w.fields.queue.as_ref().unwrap().position, 1);
    assert_eq!(low_w.event.as_ref().unwrap().reason, "Requeued");
    assert!(
        writes
            .iter()
            .any(|x| x.job.name == "high" && x.fields.admission.is_some())
    );
    assert_eq!(
        QueueFields::default(),
        QueueFields::of(&ai_job("x", "y", serde_json::json!({})))
    );
}

#[test]
fn an_expected_start_that_moves_less_than_a_minute_is_not_rewritten() {
    use gryvia_reconcile::queue::job_writes;
    let mut w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8)],
        vec![job("ml", "running", 1, 8, 60)],
    );
    w.jobs[0].expected_seconds = Some(600);
    let c = cycle(&w, now());
    apply(&mut w, &c);
    w.jobs.push(job("ml", "next", 1, 8, 1));
    let c = cycle(&w, now());
    let standing = c.pending[&JobKey::new("ml", "next")].clone();
    let with = |secs: i64| {
        let mut s = standing.clone();
        s.expected_start = s.expected_start.map(|t| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t.0.checked_add(jiff::SignedDuration::from_secs(secs))
                    .unwrap(),
            )
        });
        ai_job("ml", "next", serde_json::json!({"queue": s}))
    };
    assert!(job_writes(&[with(30)], &c).is_empty());
    assert_eq!(job_writes(&[with(120)], &c).len(), 1);
    // A standing left by a queue that is gone is cleared.
    let stale = ai_job("other", "old", serde_json::json!({"queue": standing}));
    let writes = job_writes(&[stale], &c);
    assert_eq!(writes.len(), 1);
    assert!(writes[0].fields.queue.is_none());
}

#[test]
fn a_queue_status_says_its_numbers_and_a_configuration_problem_once() {
    use gryvia_reconcile::queue::queue_status;
    let ns_twice = world(
        vec![
            queue("a", 8),
            QueueInfo {
                name: "b".into(),
                ..queue("a", 4)
            },
        ],
        vec![node("n1", 8)],
        vec![job("a", "j", 1, 4, 1)],
    );
    let c = cycle(&ns_twice, now());
    let b: gryvia_types::scheduling::GryviaQueue = from_json(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQueue",
        "metadata": {"name": "b", "generation": 1},
        "spec": {"namespaces": ["a"], "resources": [{"gpuType": H100, "nominal": 4}]}
    }));
    let (status, event) = queue_status(&b, &c, now()).unwrap();
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.type_.as_str(), ready.status.as_str()),
        ("Ready", "False")
    );
    assert_eq!(
        ready.message,
        "namespace a is also listed by queue a, which holds its jobs"
    );
    assert_eq!(event.unwrap().reason, "ConfigurationProblem");
    let mut b2 = b.clone();
    b2.status = Some(status);
    assert!(
        queue_status(&b2, &c, now()).is_none(),
        "unchanged: nothing to write"
    );
    let a: gryvia_types::scheduling::GryviaQueue = from_json(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQueue",
        "metadata": {"name": "a"},
        "spec": {"namespaces": ["a"], "resources": [{"gpuType": H100, "nominal": 8}]}
    }));
    let (status, event) = queue_status(&a, &c, now()).unwrap();
    assert!(event.is_none());
    assert_eq!(status.admitted_jobs, 1);
    assert_eq!(status.gpus_in_use.get(H100), Some(&4.0));
}

#[test]
fn what_if_answers_for_a_job_not_created() {
    use gryvia_reconcile::queue::{WhatIf, what_if};
    let mut w = world(vec![queue("ml", 8)], vec![node("n1", 8)], vec![]);
    let mut j = ai_job("ml", "try", serde_json::json!(null));
    j.spec.gpu_type = Some(H100.into());
    match what_if(&w, &j, &[], now()) {
        WhatIf::StartsNow { admission } => assert_eq!(admission.milli_gpus, 8000),
        other => panic!("{other:?}"),
    }
    w.jobs.push(job("ml", "running", 1, 8, 5));
    let c = cycle(&w, now());
    apply(&mut w, &c);
    match what_if(&w, &j, &[], now()) {
        WhatIf::Waits { standing } => {
            assert_eq!(standing.position, 1);
            assert!(
                standing.reason.starts_with("needs 8 GPUs"),
                "{}",
                standing.reason
            );
        }
        other => panic!("{other:?}"),
    }
    let elsewhere = ai_job("dev", "try", serde_json::json!(null));
    assert_eq!(
        what_if(&w, &elsewhere, &[], now()),
        WhatIf::NoQueue {
            namespace: "dev".into()
        }
    );
}

#[test]
fn workers_go_only_where_their_node_selector_and_tolerations_let_them() {
    use gryvia_reconcile::queue::{JobToleration, NodeTaint};
    let mut zone_b = node("n2", 8);
    zone_b.labels = BTreeMap::from([("zone".to_owned(), "b".to_owned())]);
    let mut tainted = node("n3", 8);
    tainted.taints = vec![NodeTaint {
        key: "team".into(),
        value: Some("infra".into()),
        effect: "NoSchedule".into(),
    }];
    let w = world(
        vec![queue("ml", 24)],
        vec![node("n1", 8), zone_b, tainted],
        vec![],
    );
    let mut in_b = job("ml", "in-b", 1, 8, 3);
    in_b.node_selector = BTreeMap::from([("zone".to_owned(), "b".to_owned())]);
    let mut w1 = w.clone();
    w1.jobs.push(in_b.clone());
    let c = cycle(&w1, now());
    assert_eq!(c.admitted[0].admission.nodes, ["n2"]);
    // Two such jobs: the second does not fit, and says why.
    let mut second = in_b.clone();
    second.key = JobKey::new("ml", "in-b-2");
    w1.jobs.push(second);
    let c = cycle(&w1, now());
    assert_eq!(admitted(&c), ["in-b"]);
    assert_eq!(
        reason(&c, "ml", "in-b-2"),
        "needs 1 worker x 8 GPUs of NVIDIA-H100-80GB-HBM3; room for 0 workers on 3 nodes of NVIDIA-H100-80GB-HBM3: 2 ruled out by its nodeSelector or tolerations"
    );
    // A 3-worker gang without the toleration fits on n1 and n2 only: it waits.
    let mut gang = job("ml", "gang", 3, 8, 2);
    let mut w2 = w.clone();
    w2.jobs.push(gang.clone());
    assert!(cycle(&w2, now()).admitted.is_empty());
    gang.tolerations = vec![JobToleration {
        key: "team".into(),
        operator: "Equal".into(),
        value: "infra".into(),
        effect: "NoSchedule".into(),
    }];
    w2.jobs = vec![gang];
    let c = cycle(&w2, now());
    assert_eq!(c.admitted[0].admission.nodes, ["n1", "n2", "n3"]);
    // An `Exists` toleration without a key tolerates every taint; a wrong value none.
    let any = JobToleration {
        operator: "Exists".into(),
        ..JobToleration::default()
    };
    let wrong = JobToleration {
        key: "team".into(),
        value: "ml".into(),
        ..JobToleration::default()
    };
    let t = NodeTaint {
        key: "team".into(),
        value: Some("infra".into()),
        effect: "NoExecute".into(),
    };
    assert!(any.tolerates(&t) && !wrong.tolerates(&t));
}

#[test]
fn decisions_are_written_first_and_standings_within_a_budget_heads_and_new_jobs_first() {
    use gryvia_reconcile::queue::{JobKey, JobWrite, QueueFields, within_budget};
    let write = |name: &str, decision: bool, first: bool, position: i32| JobWrite {
        job: JobKey::new("ml", name),
        fields: QueueFields {
            queue: Some(gryvia_reconcile::queue::standing(
                "q",
                usize::try_from(position).unwrap(),
                "why".to_owned(),
                None,
            )),
            ..QueueFields::default()
        },
        notice: None,
        event: None,
        decision,
        first_standing: first,
    };
    let writes = vec![
        write("moved-9", false, false, 9),
        write("moved-2", false, false, 2),
        write("admit", true, false, 1),
        write("new-7", false, true, 7),
        write("preempt", true, false, 5),
    ];
    let kept: Vec<String> = within_budget(writes, 2)
        .into_iter()
        .map(|w| w.job.name)
        .collect();
    // Every decision, then two standings: the new job's, then the head's.
    assert_eq!(kept, vec!["admit", "preempt", "new-7", "moved-2"]);
}

#[test]
fn a_job_that_would_preempt_only_to_delay_a_head_holds_back_no_lower_job() {
    let mut q = queue("ml", 10);
    q.strategy = QueueingStrategy::BestEffortFIFO;
    q.preempt_lower_priority = true;
    let with = |name: &str, workers: u32, gpus: u32, priority: i32, seconds: Option<i64>| {
        let mut j = job("ml", name, workers, gpus, 10);
        j.priority = priority;
        j.expected_seconds = seconds;
        j
    };
    let mut w = world(
        vec![q],
        vec![node("n1", 8), node("n2", 8)],
        vec![
            with("first", 2, 2, 90, Some(4_000)),
            // Blocked by quota until `first` ends.
            with("head", 2, 4, 80, None),
            // Fits beside `head` once `first` ends.
            with("small", 1, 2, 79, None),
            // Would run past the head's start and leave it no room.
            with("one", 1, 1, 70, None),
            // Ends before the head's start and fills the quota: `one` could make room by
            // preempting it, but would still delay the head, so it will not.
            with("mid", 2, 2, 40, Some(600)),
            with("low", 1, 1, 0, Some(600)),
        ],
    );
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), ["first", "small", "mid"]);
    assert_eq!(
        reason(&c, "ml", "one"),
        "fits, but would delay the expected start of ml/head"
    );
    assert_eq!(
        reason(&c, "ml", "low"),
        "needs 1 GPU of NVIDIA-H100-80GB-HBM3; queue ml has 0 of 10 nominal free"
    );
    apply(&mut w, &c);
    // The next cycle preempts nothing: `one` waits for room it may not take by preempting.
    let c = cycle(&w, now());
    assert!(c.preempted.is_empty(), "{:?}", c.preempted);
    assert_eq!(admitted(&c), Vec::<String>::new());
    assert_eq!(
        reason(&c, "ml", "one"),
        "needs 1 GPU of NVIDIA-H100-80GB-HBM3; queue ml has 0 of 10 nominal free"
    );
}

#[test]
fn a_job_waiting_past_its_tiers_sla_goes_ahead_of_its_tier_within_theirs() {
    // Quota for one 8-GPU job at a time; two wait behind a running one.
    let mut urgent = job("ml", "higher-priority", 1, 8, 5);
    urgent.priority = 90;
    let mut late = job("ml", "late", 1, 8, 30);
    late.sla_seconds = Some(600);
    let w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8)],
        vec![urgent.clone(), late.clone()],
    );
    assert!(late.past_sla(now()), "waited 30 min against 10");
    assert!(!urgent.past_sla(now()));
    assert_eq!(admitted(&cycle(&w, now())), vec!["late"]);
    // Within its SLA, spec.priority decides.
    late.sla_seconds = Some(3600);
    let w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8)],
        vec![urgent, late.clone()],
    );
    assert_eq!(admitted(&cycle(&w, now())), vec!["higher-priority"]);
    // A higher tier still goes first.
    let mut tier = job("ml", "higher-tier", 1, 8, 1);
    tier.class_value = 1000;
    late.sla_seconds = Some(60);
    let w = world(vec![queue("ml", 8)], vec![node("n1", 8)], vec![tier, late]);
    assert_eq!(admitted(&cycle(&w, now())), vec!["higher-tier"]);
}

#[test]
fn a_tier_with_a_quota_override_is_admitted_over_the_queues_quota_by_its_share() {
    // Nominal 8, all used; the override tier may use 50 % of 8 = 4 more.
    let mut running = job("ml", "running", 1, 8, 10);
    let first = cycle(
        &world(
            vec![queue("ml", 8)],
            vec![node("n1", 8), node("n2", 8)],
            vec![running.clone()],
        ),
        now(),
    );
    running.state = JobState::Admitted(first.admitted[0].admission.clone());
    running.live = BTreeMap::from([(first.admitted[0].admission.nodes[0].clone(), 1)]);
    let mut plain = job("ml", "plain", 1, 4, 3);
    plain.class_value = 500;
    let mut over = job("ml", "over", 1, 4, 2);
    over.class_value = 500;
    over.quota_override_percent = 50;
    let mut too_big = job("ml", "too-big", 1, 8, 1);
    too_big.class_value = 500;
    too_big.quota_override_percent = 50;
    let mut w = world(
        vec![queue("ml", 8)],
        vec![node("n1", 8), node("n2", 8)],
        vec![running, plain, over, too_big],
    );
    w.queues[0].strategy = QueueingStrategy::BestEffortFIFO;
    let c = cycle(&w, now());
    assert_eq!(admitted(&c), vec!["over"]);
    let a = &c.admitted[0].admission;
    assert_eq!(
        (a.over_quota_milli_gpus, a.borrowed_milli_gpus),
        (4 * ONE_GPU, 0)
    );
    assert!(reason(&c, "ml", "plain").contains("0 of 8 nominal free"));
    assert!(reason(&c, "ml", "too-big").contains("0 of 8 nominal free"));
    // The queue's status counts what is used over its quota as used and borrowed.
    assert_eq!(c.queues["ml"].entries[H100], (12 * ONE_GPU, 4 * ONE_GPU, 0));
    // Charged as admitted: the allowance is used up in the next cycle.
    apply(&mut w, &c);
    let mut another = job("ml", "another", 1, 1, 0);
    another.class_value = 500;
    another.quota_override_percent = 50;
    w.jobs.push(another);
    let c = cycle(&w, now());
    assert!(c.admitted.is_empty(), "{:?}", admitted(&c));
}
