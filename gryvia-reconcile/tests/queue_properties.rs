//! Properties of the admission cycle over random queues, nodes and jobs, cycle after cycle:
//! quota is never exceeded, lending limits hold, a gang is never partly admitted, no node is
//! overcommitted, a preempted job is never counted twice, StrictFIFO never lets a later job
//! pass its head, backfill never delays the head's computed start, a second cycle over
//! what the first wrote preempts none of it, and the writes picked within a budget are the
//! ones the whole list would give.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::queue::{
    Cycle, JobInfo, JobKey, JobState, Milli, NodeCapacity, ONE_GPU, PREEMPTION_LOOKBACK, QueueInfo,
    QueueWorld, QuotaEntry, Share, Shortfall, Slot, Unavailable, Used, cycle,
    cycle_deciding_every_job, decide, expected_start,
};
use gryvia_reconcile::queue::{job_writes, job_writes_within, within_budget};
use gryvia_types::GryviaAIJob;
use gryvia_types::scheduling::QueueingStrategy;
use proptest::prelude::*;

const H100: &str = "H100";

fn now() -> jiff::Timestamp {
    "2026-12-03T12:00:00Z".parse().unwrap()
}

fn node() -> impl Strategy<Value = NodeCapacity> {
    (
        0_u32..=8,
        prop::option::weighted(0.15, Just(Unavailable::Quarantined)),
    )
        .prop_map(|(used, unavailable)| NodeCapacity {
            product: Some(H100.into()),
            allocatable: Used(BTreeMap::from([(Slot::Gpu, 8)])),
            used: Used(BTreeMap::from([(Slot::Gpu, used)])),
            unavailable,
            ..NodeCapacity::default()
        })
}

fn queue(cohort: bool) -> impl Strategy<Value = QueueInfo> {
    (
        0_i64..=24,
        prop::option::of(0_i64..=8),
        prop::option::of(0_i64..=24),
        prop::bool::ANY,
        prop::bool::ANY,
        prop::bool::ANY,
    )
        .prop_map(
            move |(nominal, borrowing, lending, strict, preempt, reclaim)| QueueInfo {
                name: String::new(),
                namespaces: Vec::new(),
                cohort: cohort.then(|| "c".to_owned()),
                resources: vec![QuotaEntry {
                    gpu_type: H100.into(),
                    nominal: nominal * ONE_GPU,
                    borrowing_limit: borrowing.map(|b| b * ONE_GPU),
                    lending_limit: lending.map(|l| l.min(nominal) * ONE_GPU),
                }],
                strategy: if strict {
                    QueueingStrategy::StrictFIFO
                } else {
                    QueueingStrategy::BestEffortFIFO
                },
                preempt_lower_priority: preempt,
                reclaim_within_cohort: reclaim,
                gang_admission: true,
            },
        )
}

fn job(queues: usize) -> impl Strategy<Value = JobInfo> {
    (
        0..queues,
        1_u32..=3,
        prop::sample::select(vec![1_u32, 2, 4, 8]),
        0_i32..=100,
        prop::sample::select(vec![0, 1000]),
        0_i64..100,
        prop::option::of(600_i64..7200),
    )
        .prop_map(
            |(q, workers, gpus, priority, class_value, age, expected)| JobInfo {
                key: JobKey::new(format!("q{q}"), ""),
                created: now()
                    .checked_sub(jiff::SignedDuration::from_mins(age))
                    .unwrap(),
                class_value,
                priority,
                gpu_type: Some(H100.into()),
                workers,
                share: Share::Gpus(gpus),
                reservation: None,
                expected_seconds: expected,
                grace_seconds: 30,
                state: JobState::Pending,
                live: BTreeMap::new(),
                node_selector: BTreeMap::new(),
                tolerations: Vec::new(),
                sla_seconds: None,
                quota_override_percent: 0,
            },
        )
}

fn world(max_queues: usize) -> impl Strategy<Value = QueueWorld> {
    (1..=max_queues, prop::bool::ANY).prop_flat_map(|(n, cohort)| {
        (
            prop::collection::vec(queue(cohort), n),
            prop::collection::vec(node(), 1..6),
            prop::collection::vec(job(n), 0..20),
        )
            .prop_map(|(mut queues, mut nodes, mut jobs)| {
                for (i, q) in queues.iter_mut().enumerate() {
                    q.name = format!("q{i}");
                    q.namespaces = vec![format!("q{i}")];
                }
                for (i, n) in nodes.iter_mut().enumerate() {
                    n.name = format!("n{i}");
                }
                for (i, j) in jobs.iter_mut().enumerate() {
                    j.key.name = format!("j{i}");
                }
                QueueWorld {
                    queues,
                    jobs,
                    nodes,
                }
            })
    })
}

/// Writes a cycle's decisions; admitted workers run where planned; preempted jobs' workers
/// are gone by the next cycle when `preempted_end`.
fn apply(w: &mut QueueWorld, c: &Cycle, preempted_end: bool) {
    if preempted_end {
        for j in &mut w.jobs {
            if matches!(j.state, JobState::Preempting(..)) {
                j.live.clear();
            }
        }
    }
    for a in &c.admitted {
        let j = w.jobs.iter_mut().find(|j| j.key == a.job).unwrap();
        assert_eq!(j.state, JobState::Pending, "{} admitted twice", a.job);
        j.state = JobState::Admitted(a.admission.clone());
        j.live.clear();
        for n in &a.admission.nodes {
            *j.live.entry(n.clone()).or_insert(0) += 1;
        }
    }
    for p in &c.preempted {
        let j = w.jobs.iter_mut().find(|j| j.key == p.job).unwrap();
        let JobState::Admitted(a) = j.state.clone() else {
            panic!("{} preempted while not admitted (twice, or pending)", p.job)
        };
        assert!(
            !c.admitted.iter().any(|a| a.job == p.job),
            "{} admitted and preempted at once",
            p.job
        );
        j.state = JobState::Preempting(a, p.notice.clone());
    }
    for r in &c.released {
        let j = w.jobs.iter_mut().find(|j| j.key == *r).unwrap();
        j.state = JobState::Pending;
        j.live.clear();
    }
}

/// Quota, lending and node invariants of a world whose admissions all came from cycles.
fn check_holds(w: &QueueWorld) -> Result<(), TestCaseError> {
    let mut used: BTreeMap<&str, Milli> = BTreeMap::new();
    let mut on_node: BTreeMap<&str, u32> = BTreeMap::new();
    for j in &w.jobs {
        if let Some(a) = j.admission() {
            *used.entry(a.queue.as_str()).or_insert(0) += a.milli_gpus;
            prop_assert_eq!(
                a.nodes.len(),
                j.workers as usize,
                "{} placed partly",
                &j.key
            );
            prop_assert_eq!(a.milli_gpus, j.demand());
            for n in &a.nodes {
                *on_node.entry(n.as_str()).or_insert(0) += u32::try_from(a.per_worker).unwrap();
            }
        }
    }
    let mut drawn: Milli = 0;
    let mut pool: Milli = 0;
    for q in &w.queues {
        let e = &q.resources[0];
        let u = used.get(q.name.as_str()).copied().unwrap_or(0);
        match &q.cohort {
            None => prop_assert!(u <= e.nominal, "{} uses {u} of {}", q.name, e.nominal),
            Some(_) => {
                if let Some(b) = e.borrowing_limit {
                    prop_assert!(
                        u <= e.nominal + b,
                        "{} uses {u} of {} + {b}",
                        q.name,
                        e.nominal
                    );
                }
                drawn += (u - e.guaranteed()).max(0);
                pool += e.lendable();
            }
        }
    }
    prop_assert!(drawn <= pool, "the cohort lends {drawn} of {pool}");
    for n in &w.nodes {
        let held = on_node.get(n.name.as_str()).copied().unwrap_or(0);
        prop_assert!(
            held + n.used.of(&Slot::Gpu) <= n.allocatable.of(&Slot::Gpu),
            "{} overcommitted: {held} admitted + {} other of {}",
            n.name,
            n.used.of(&Slot::Gpu),
            n.allocatable.of(&Slot::Gpu)
        );
        if n.unavailable.is_some() {
            // Nothing admitted in these worlds lands on a node that is not capacity.
            prop_assert_eq!(held, 0, "{} is quarantined", &n.name);
        }
    }
    Ok(())
}

/// StrictFIFO: when a job of a strict queue stays pending, no job after it in the queue's
/// order was admitted by the cycle.
fn check_strict(before: &QueueWorld, c: &Cycle) -> Result<(), TestCaseError> {
    for q in before
        .queues
        .iter()
        .filter(|q| q.strategy == QueueingStrategy::StrictFIFO)
    {
        let mut order: Vec<&JobInfo> = before
            .jobs
            .iter()
            .filter(|j| j.key.namespace == q.name && j.state == JobState::Pending)
            .collect();
        order.sort_by(|a, b| a.order_key(now()).cmp(&b.order_key(now())));
        let admitted = |j: &JobInfo| c.admitted.iter().any(|a| a.job == j.key);
        if let Some(first_left) = order.iter().position(|j| !admitted(j)) {
            for later in &order[first_left..] {
                prop_assert!(
                    !admitted(later),
                    "{} passed {} in {}",
                    &later.key,
                    &order[first_left].key,
                    q.name
                );
            }
        }
    }
    Ok(())
}

/// Jobs of few shapes (two priorities, one or two workers of 1 or 8 GPUs, with or without an
/// expected run time): long runs of like jobs in a queue.
fn like_jobs(queues: usize) -> impl Strategy<Value = Vec<JobInfo>> {
    prop::collection::vec(
        (
            0..queues,
            1_u32..=2,
            prop::sample::select(vec![1_u32, 8]),
            prop::sample::select(vec![10, 60]),
            0_i64..100,
            prop::option::of(Just(3600_i64)),
        ),
        0..40,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (q, workers, gpus, priority, age, expected))| JobInfo {
                key: JobKey::new(format!("q{q}"), format!("j{i}")),
                created: now()
                    .checked_sub(jiff::SignedDuration::from_mins(age))
                    .unwrap(),
                class_value: 0,
                priority,
                gpu_type: Some(H100.into()),
                workers,
                share: Share::Gpus(gpus),
                reservation: None,
                expected_seconds: expected,
                grace_seconds: 30,
                state: JobState::Pending,
                live: BTreeMap::new(),
                node_selector: BTreeMap::new(),
                tolerations: Vec::new(),
                sla_seconds: None,
                quota_override_percent: 0,
            })
            .collect()
    })
}

/// The GryviaAIJob of `job` as the controller would see it: its admission and preemption from
/// its state, and the standing `earlier` gave it when `told`.
fn object(job: &JobInfo, earlier: &Cycle, told: bool) -> GryviaAIJob {
    let (admission, preemption) = match &job.state {
        JobState::Pending => (None, None),
        JobState::Admitted(a) => (Some(a.clone()), None),
        JobState::Preempting(a, p) => (Some(a.clone()), Some(p.clone())),
    };
    let standing = earlier.pending.get(&job.key).filter(|_| told);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
        "metadata": {"name": job.key.name, "namespace": job.key.namespace},
        "spec": {"image": "i", "gpus": 1},
        "status": {"admission": admission, "preemption": preemption, "queue": standing},
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The controller's writes of a cycle, picked in place within a budget of standing writes
    /// and leaving out new standings of jobs with a write in flight (never a decision), are
    /// what the whole list of writes cut to that budget gives.
    #[test]
    fn writes_within_a_budget_are_the_whole_lists_first(
        (mut w, told, held, budget) in world(4).prop_flat_map(|w| {
            let n = w.jobs.len();
            (
                Just(w),
                prop::collection::vec(prop::bool::ANY, n),
                prop::collection::vec(prop::bool::weighted(0.2), n),
                prop::sample::select(vec![0_usize, 1, 3, 64]),
            )
        })
    ) {
        let first = cycle(&w, now());
        apply(&mut w, &first, true);
        let objects: Vec<GryviaAIJob> = w
            .jobs
            .iter()
            .zip(&told)
            .map(|(j, &t)| object(j, &first, t))
            .collect();
        let held_keys: Vec<&JobKey> = w.jobs.iter().zip(&held).filter(|(_, h)| **h).map(|(j, _)| &j.key).collect();
        let second = cycle(&w, now());
        let got = job_writes_within(&objects, &second, budget, |k| held_keys.contains(&k));
        let mut all = job_writes(&objects, &second);
        let before = all.len();
        all.retain(|x| x.decision || !held_keys.contains(&&x.job));
        prop_assert_eq!(got.held_back, before - all.len());
        prop_assert_eq!(got.writes, within_budget(all, budget));
    }

    /// A job of the same shape as one just left waiting in its queue, with nothing admitted,
    /// preempted or blocked in between, takes that job's reason instead of being decided
    /// again: cycle after cycle, that gives exactly what deciding every job gives.
    #[test]
    fn like_jobs_decided_once_per_change_decide_as_every_job_decided(
        (mut w, jobs) in world(3).prop_flat_map(|w| {
            let n = w.queues.len();
            (Just(w), like_jobs(n))
        })
    ) {
        w.jobs = jobs;
        for step in 0..4 {
            let fast = cycle(&w, now());
            let full = cycle_deciding_every_job(&w, now());
            prop_assert_eq!(&fast, &full, "step {}", step);
            apply(&mut w, &fast, step % 2 == 1);
        }
    }

    /// A cycle of decisions only admits, preempts and releases exactly what the full cycle
    /// does, cycle after cycle.
    #[test]
    fn decisions_alone_are_the_full_cycles_decisions(mut w in world(4)) {
        for step in 0..4 {
            let full = cycle(&w, now());
            let only = decide(&w, now());
            prop_assert!(only.decisions_only && only.pending.is_empty() && only.queues.is_empty());
            prop_assert_eq!(&only.admitted, &full.admitted, "step {}", step);
            prop_assert_eq!(&only.preempted, &full.preempted, "step {}", step);
            prop_assert_eq!(&only.released, &full.released, "step {}", step);
            apply(&mut w, &full, step % 2 == 1);
        }
    }

    #[test]
    fn cycle_after_cycle_quota_lending_gangs_and_nodes_hold(mut w in world(4)) {
        for step in 0..4 {
            let before = w.clone();
            let c = cycle(&w, now());
            apply(&mut w, &c, step % 2 == 1);
            check_holds(&w)?;
            check_strict(&before, &c)?;
        }
    }

    /// What a cycle wrote stands: the next one (an operator restart, say) preempts none of
    /// it for a job of the same queue that waited only for room. (A job the first held back
    /// for another reason decides anew in the second, once the first's later admissions
    /// changed what it meets: held back to protect a head's expected start, it may then fit
    /// beside the head only by preempting; held back because borrowing would take what a
    /// lender's job needed, it may borrow once the lender's own admissions leave that job
    /// needing more than is free. A job further back than the first `PREEMPTION_LOOKBACK`
    /// waiting jobs ranked above the one it preempts was not weighed when that one was
    /// admitted. And a lender may reclaim quota lent in the first cycle when the borrower's
    /// admission left its own job without node room: borrowed quota is on loan.)
    #[test]
    fn a_second_cycle_over_what_the_first_wrote_preempts_none_of_it(mut w in world(4)) {
        let c1 = cycle(&w, now());
        let not_for_room: Vec<String> = w
            .queues
            .iter()
            .map(|q| Shortfall::LenderNeeds { queue: q.name.clone() })
            .chain(w.jobs.iter().map(|j| Shortfall::WouldDelay { head: j.key.clone() }))
            .map(|s| s.to_string())
            .collect();
        let held_back = |by: &str| {
            c1.pending
                .iter()
                .any(|(k, s)| k.to_string() == by && not_for_room.contains(&s.reason))
        };
        // The waiting jobs the first cycle weighed before admitting `victim`.
        let first = w.clone();
        let weighed = |victim: &JobKey, by: &str| {
            let v = first.jobs.iter().find(|j| j.key == *victim).unwrap();
            let mut ahead: Vec<&JobInfo> = first
                .jobs
                .iter()
                .filter(|j| {
                    j.key.namespace == v.key.namespace
                        && c1.pending.contains_key(&j.key)
                        && j.order_key(now()) < v.order_key(now())
                        && v.ranks_below(j)
                })
                .collect();
            ahead.sort_by(|a, b| a.order_key(now()).cmp(&b.order_key(now())));
            ahead.iter().take(PREEMPTION_LOOKBACK).any(|j| j.key.to_string() == by)
        };
        apply(&mut w, &c1, false);
        let c2 = cycle(&w, now());
        let within: Vec<_> = c2
            .preempted
            .iter()
            .filter(|p| {
                p.notice.reason == "WithinQueue"
                    && !held_back(&p.notice.by)
                    && weighed(&p.job, &p.notice.by)
            })
            .collect();
        prop_assert!(within.is_empty(), "preempted what was just admitted: {:?}", within);
        apply(&mut w, &c2, false);
        check_holds(&w)?;
    }

    #[test]
    fn backfill_never_delays_the_heads_computed_start(w in world(1)) {
        let mut w = w;
        w.queues[0].cohort = None;
        w.queues[0].strategy = QueueingStrategy::BestEffortFIFO;
        w.queues[0].preempt_lower_priority = false;
        w.queues[0].reclaim_within_cohort = false;
        // Some jobs already run (admitted by an earlier cycle).
        let first = cycle(&w, now());
        let mut w = {
            let mut r = w.clone();
            apply(&mut r, &first, false);
            r
        };
        // More arrive.
        let extra: Vec<JobInfo> = w.jobs.iter().map(|j| {
            let mut n = j.clone();
            n.key.name = format!("{}-again", j.key.name);
            n.state = JobState::Pending;
            n.live.clear();
            n
        }).collect();
        w.jobs.extend(extra);
        let c = cycle(&w, now());
        let mut pending: Vec<&JobInfo> = w.jobs.iter().filter(|j| j.state == JobState::Pending).collect();
        pending.sort_by(|a, b| a.order_key(now()).cmp(&b.order_key(now())));
        let admitted = |j: &JobInfo| c.admitted.iter().any(|a| a.job == j.key);
        let Some(head) = pending.iter().position(|j| !admitted(j)) else {
            return Ok(());
        };
        let head_key = pending[head].key.clone();
        // Without backfill: only the jobs ahead of the head admitted.
        let mut ahead = c.clone();
        ahead.admitted.retain(|a| pending[..head].iter().any(|j| j.key == a.job));
        let mut w0 = w.clone();
        apply(&mut w0, &ahead, false);
        let mut w1 = w.clone();
        apply(&mut w1, &c, false);
        if let Some(e0) = expected_start(&w0, &head_key, now()) {
            let e1 = expected_start(&w1, &head_key, now());
            prop_assert!(e1.is_some_and(|e1| e1 <= e0), "{head_key}: {e0} without backfill, {e1:?} with");
        }
    }
}
