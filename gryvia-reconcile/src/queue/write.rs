//! What a cycle writes: the queue fields of each job's status (`admission`, `preemption`,
//! `queue`), the notice on a victim's pods, each queue's status, and the Events that go with
//! them. Pure: the controller compares, writes what differs and records the Events.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::conditions::{self, Status};
use gryvia_types::scheduling::{GryviaQueue, GryviaQueueStatus};
use gryvia_types::{GryviaAIJob, JobAdmission, PreemptionNotice, QueueStanding};
use serde::{Deserialize, Serialize};

use super::{Cycle, JobKey, gpus_number};
use crate::{EventType, Timestamp};

/// Condition type of a queue: its configuration is usable.
pub const QUEUE_READY: &str = conditions::READY;

/// Expected starts closer than this count as the same (a job past its expected end keeps
/// moving the start of those behind it to "now"; that is not worth a write each cycle).
pub const ETA_TOLERANCE_SECONDS: i64 = 60;

/// The status fields of a job that only the queue scheduler writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueFields {
    /// `status.admission`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<JobAdmission>,
    /// `status.preemption`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionNotice>,
    /// `status.queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStanding>,
}

impl QueueFields {
    /// The queue fields of `job` as it is.
    pub fn of(job: &GryviaAIJob) -> Self {
        job.status.as_ref().map_or_else(Self::default, |s| Self {
            admission: s.admission.clone(),
            preemption: s.preemption.clone(),
            queue: s.queue.clone(),
        })
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.admission.is_none() && self.preemption.is_none() && self.queue.is_none()
    }

    /// Whether `self` says what `other` says: the same admission and preemption, and the
    /// same standing with expected starts at most [`ETA_TOLERANCE_SECONDS`] apart.
    pub fn same_as(&self, other: &Self) -> bool {
        self.admission == other.admission
            && self.preemption == other.preemption
            && same_queue(self.queue.as_ref(), other.queue.as_ref())
    }
}

/// Whether two `status.queue` values say the same ([`same_standing`] when both are set).
fn same_queue(a: Option<&QueueStanding>, b: Option<&QueueStanding>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => same_standing(a, b),
        _ => false,
    }
}

/// The standing a job keeps after `cycle` when no decision touches it: none while it holds an
/// admission, else the cycle's.
fn standing_after<'a>(holds: bool, cycle: &'a Cycle, key: &JobKey) -> Option<&'a QueueStanding> {
    if holds { None } else { cycle.pending.get(key) }
}

/// Where a standing-only write stands in line: jobs never told where they wait first, then
/// by their new position (none: last).
fn line_rank(first_standing: bool, standing: Option<&QueueStanding>) -> (bool, i32) {
    (!first_standing, standing.map_or(i32::MAX, |q| q.position))
}

/// Whether two standings say the same (expected starts within [`ETA_TOLERANCE_SECONDS`]).
pub fn same_standing(a: &QueueStanding, b: &QueueStanding) -> bool {
    a.queue == b.queue
        && a.position == b.position
        && a.reason == b.reason
        && match (&a.expected_start, &b.expected_start) {
            (None, None) => true,
            (Some(x), Some(y)) => {
                (x.0.as_second() - y.0.as_second()).abs() <= ETA_TOLERANCE_SECONDS
            }
            _ => false,
        }
}

/// An Event about a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// `Preempted`, `Requeued`, `ConfigurationProblem`.
    pub reason: String,
    /// One line.
    pub message: String,
}

/// One job's write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobWrite {
    /// The job.
    pub job: JobKey,
    /// Its queue fields from now on (absent ones are removed).
    pub fields: QueueFields,
    /// When it is preempted now: the notice to put on its live pods (annotation
    /// [`gryvia_types::labels::PREEMPTION_NOTICE`]) before its status says so.
    pub notice: Option<String>,
    /// What to record.
    pub event: Option<JobEvent>,
    /// Whether it changes a decision (`admission` or `preemption`), not only the standing.
    #[serde(default)]
    pub decision: bool,
    /// Whether the job has no standing yet (it was never said where it waits).
    #[serde(default)]
    pub first_standing: bool,
}

/// The most standing-only writes (a waiting job's position, reason or expected start) one cycle
/// makes, after every decision: a burst of pending jobs must not hold admissions back behind
/// thousands of status writes; the rest follow in later cycles (the controller also paces
/// them over time).
pub const STANDING_WRITES_PER_CYCLE: usize = 64;

/// `writes` in the order they are made: every decision first (by job), then at most `budget`
/// standing-only writes, jobs never told where they wait first, then the heads of the queues
/// (by position, then job). The whole-list form of the rule: [`job_writes_within`] picks the
/// same writes without building the others.
pub fn within_budget(mut writes: Vec<JobWrite>, budget: usize) -> Vec<JobWrite> {
    let rank = |w: &JobWrite| {
        if w.decision {
            (false, 0)
        } else {
            line_rank(w.first_standing, w.fields.queue.as_ref())
        }
    };
    writes.sort_by(|a, b| (!a.decision, rank(a), &a.job).cmp(&(!b.decision, rank(b), &b.job)));
    let decisions = writes.iter().filter(|w| w.decision).count();
    writes.truncate(decisions + budget);
    writes
}

/// The text of the preemption notice annotation a victim's pods can read (through a
/// downward API volume): `by=<job>; reason=<why>; noticeAt=<time>; graceSeconds=<n>`.
pub fn notice_annotation(n: &PreemptionNotice) -> String {
    format!(
        "by={}; reason={}; noticeAt={}; graceSeconds={}",
        n.by, n.reason, n.notice_at.0, n.grace_seconds
    )
}

/// What a job's queue fields become after `cycle`, and the Event that goes with the change
/// (`None`: they stay as they are). `current` are its fields now.
fn desired(
    key: &JobKey,
    current: &QueueFields,
    cycle: &Cycle,
    admitted: &BTreeMap<&JobKey, &JobAdmission>,
    preempted: &BTreeMap<&JobKey, &PreemptionNotice>,
    released: &BTreeSet<&JobKey>,
) -> (QueueFields, Option<JobEvent>) {
    let standing = cycle.pending.get(key).cloned();
    if let Some(a) = admitted.get(key) {
        // No Event: admissions come in bursts (one per job), the status says it, and the
        // AI job controller records the job's start.
        let fields = QueueFields {
            admission: Some((*a).clone()),
            preemption: None,
            queue: None,
        };
        return (fields, None);
    }
    if released.contains(key) {
        let fields = QueueFields {
            admission: None,
            preemption: None,
            queue: standing,
        };
        let event = JobEvent {
            type_: EventType::Normal,
            reason: "Requeued".to_owned(),
            message: "its workers stopped after the preemption; it waits in its queue again"
                .to_owned(),
        };
        return (fields, Some(event));
    }
    if let Some(n) = preempted.get(key) {
        let event = JobEvent {
            type_: EventType::Warning,
            reason: "Preempted".to_owned(),
            message: format!(
                "preempted ({}) for {}: its workers get SIGTERM and {} s to write a checkpoint, then it queues again",
                n.reason, n.by, n.grace_seconds
            ),
        };
        let fields = QueueFields {
            admission: current.admission.clone(),
            preemption: Some((*n).clone()),
            queue: None,
        };
        return (fields, Some(event));
    }
    let fields = QueueFields {
        admission: current.admission.clone(),
        preemption: current.preemption.clone(),
        queue: standing_after(current.admission.is_some(), cycle, key).cloned(),
    };
    (fields, None)
}

/// The writes `cycle` calls for on `jobs` (every GryviaAIJob, with what the controller knows
/// it wrote last folded in): each job whose queue fields change, in key order. A standing
/// whose only change is an expected start within [`ETA_TOLERANCE_SECONDS`] is not written.
pub fn job_writes(jobs: &[impl Borrow<GryviaAIJob>], cycle: &Cycle) -> Vec<JobWrite> {
    let mut out = job_writes_within(jobs, cycle, usize::MAX, |_| false).writes;
    out.sort_by(|a, b| a.job.cmp(&b.job));
    out
}

/// The writes of one cycle that go out now ([`job_writes_within`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobWrites {
    /// Every decision (admission, preemption, release) in key order, then at most the
    /// budget of standing-only writes, first in line first (as [`within_budget`] keeps them).
    pub writes: Vec<JobWrite>,
    /// Where in the jobs given each write's job is (`jobs[of[i]]` is `writes[i]`'s).
    pub of: Vec<usize>,
    /// Standing-only writes left out because the caller holds them back.
    pub held_back: usize,
}

/// A job whose standing alone changes, as [`job_writes_within`] ranks it ([`line_rank`], then
/// by key).
struct StandingChange<'a> {
    /// It has no standing yet.
    first: bool,
    key: JobKey,
    wanted: Option<&'a QueueStanding>,
    job: &'a GryviaAIJob,
    index: usize,
}

/// What [`within_budget`] keeps of [`job_writes`] with `budget` standing-only writes (none
/// after a cycle of decisions only: it has no standings to compare), without
/// the standing-only writes of jobs `held_back` names (a job with a write in flight gets no
/// new standing now; a decision is never held back: the caller orders it after the write in
/// flight). Each job is read
/// in place and only the writes returned are built: in a long queue every position moves at
/// each admission ahead, and most of those changes wait for later cycles.
pub fn job_writes_within(
    jobs: &[impl Borrow<GryviaAIJob>],
    cycle: &Cycle,
    budget: usize,
    held_back: impl Fn(&JobKey) -> bool,
) -> JobWrites {
    let admitted: BTreeMap<&JobKey, &JobAdmission> = cycle
        .admitted
        .iter()
        .map(|a| (&a.job, &a.admission))
        .collect();
    let preempted: BTreeMap<&JobKey, &PreemptionNotice> = cycle
        .preempted
        .iter()
        .map(|p| (&p.job, &p.notice))
        .collect();
    let released: BTreeSet<&JobKey> = cycle.released.iter().collect();
    let mut out = JobWrites::default();
    let mut standings: Vec<StandingChange<'_>> = Vec::new();
    let mut decisions: Vec<(JobWrite, usize)> = Vec::new();
    for (index, job) in jobs.iter().enumerate() {
        let job: &GryviaAIJob = job.borrow();
        let key = JobKey::new(
            job.metadata.namespace.clone().unwrap_or_default(),
            job.metadata.name.clone().unwrap_or_default(),
        );
        let status = job.status.as_ref();
        let decided =
            admitted.contains_key(&key) || preempted.contains_key(&key) || released.contains(&key);
        if !decided && cycle.decisions_only {
            continue;
        }
        if !decided {
            // Only the standing can change.
            let now = status.and_then(|s| s.queue.as_ref());
            let holds = status.is_some_and(|s| s.admission.is_some());
            let wanted = standing_after(holds, cycle, &key);
            if same_queue(now, wanted) {
                continue;
            }
            if held_back(&key) {
                out.held_back += 1;
                continue;
            }
            standings.push(StandingChange {
                first: now.is_none(),
                key,
                wanted,
                job,
                index,
            });
            continue;
        }
        let current = QueueFields::of(job);
        let (fields, event) = desired(&key, &current, cycle, &admitted, &preempted, &released);
        if fields.same_as(&current) {
            continue;
        }
        let notice = preempted.get(&key).map(|n| notice_annotation(n));
        let decision =
            fields.admission != current.admission || fields.preemption != current.preemption;
        let write = JobWrite {
            job: key,
            first_standing: current.queue.is_none(),
            fields,
            notice,
            event,
            decision,
        };
        decisions.push((write, index));
    }
    decisions.sort_by(|a, b| a.0.job.cmp(&b.0.job));
    for (write, index) in decisions {
        out.writes.push(write);
        out.of.push(index);
    }
    for (write, index) in first_in_line(standings, budget) {
        out.writes.push(write);
        out.of.push(index);
    }
    out
}

/// The writes of the first `budget` standing changes in line, in that order, with where
/// each job is.
fn first_in_line(mut standings: Vec<StandingChange<'_>>, budget: usize) -> Vec<(JobWrite, usize)> {
    let order = |a: &StandingChange<'_>, b: &StandingChange<'_>| {
        (line_rank(a.first, a.wanted), &a.key).cmp(&(line_rank(b.first, b.wanted), &b.key))
    };
    if standings.len() > budget {
        if budget > 0 {
            standings.select_nth_unstable_by(budget - 1, order);
        }
        standings.truncate(budget);
    }
    standings.sort_by(order);
    standings
        .into_iter()
        .map(|change| {
            let status = change.job.status.as_ref();
            let write = JobWrite {
                job: change.key,
                first_standing: change.first,
                fields: QueueFields {
                    admission: status.and_then(|s| s.admission.clone()),
                    preemption: status.and_then(|s| s.preemption.clone()),
                    queue: change.wanted.cloned(),
                },
                notice: None,
                event: None,
                decision: false,
            };
            (write, change.index)
        })
        .collect()
}

/// The status of `queue` after `cycle`, with its `Ready` condition (false while its
/// configuration has a problem); `None` when its status would not change or the cycle made
/// only decisions (it counted nothing). The Event is for a problem that is new.
pub fn queue_status(
    queue: &GryviaQueue,
    cycle: &Cycle,
    now: Timestamp,
) -> Option<(GryviaQueueStatus, Option<JobEvent>)> {
    if cycle.decisions_only {
        return None;
    }
    let name = queue.metadata.name.clone().unwrap_or_default();
    let current = queue.status.clone().unwrap_or_default();
    let summary = cycle.queues.get(&name).cloned().unwrap_or_default();
    let mut status = GryviaQueueStatus {
        pending_jobs: i32::try_from(summary.pending).unwrap_or(i32::MAX),
        admitted_jobs: i32::try_from(summary.admitted).unwrap_or(i32::MAX),
        conditions: current.conditions.clone(),
        ..GryviaQueueStatus::default()
    };
    for (entry, (used, borrowed, lent)) in &summary.entries {
        if *used > 0 {
            status.gpus_in_use.insert(entry.clone(), gpus_number(*used));
        }
        if *borrowed > 0 {
            status
                .gpus_borrowed
                .insert(entry.clone(), gpus_number(*borrowed));
        }
        if *lent > 0 {
            status.gpus_lent.insert(entry.clone(), gpus_number(*lent));
        }
    }
    let problems = cycle.problems.get(&name).cloned().unwrap_or_default();
    let condition = if problems.is_empty() {
        conditions::new(
            QUEUE_READY,
            Status::True,
            "Admitting",
            "the native queue scheduler admits this queue's jobs",
            queue.metadata.generation,
            now,
        )
    } else {
        conditions::new(
            QUEUE_READY,
            Status::False,
            "ConfigurationProblem",
            problems.join("; "),
            queue.metadata.generation,
            now,
        )
    };
    let event = (!problems.is_empty()
        && conditions::find(&current.conditions, QUEUE_READY)
            .is_none_or(|c| c.message != condition.message))
    .then(|| JobEvent {
        type_: EventType::Warning,
        reason: "ConfigurationProblem".to_owned(),
        message: condition.message.clone(),
    });
    conditions::set(&mut status.conditions, condition);
    (status != current).then_some((status, event))
}
