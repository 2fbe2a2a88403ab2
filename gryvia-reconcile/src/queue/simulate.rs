//! Looking ahead: when running jobs are expected to end (`activeDeadlineSeconds`, or their
//! template's history), when a blocked job could start, and when every pending job is
//! expected to start if nothing new arrives.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use gryvia_types::JobAdmission;
use gryvia_types::scheduling::QueueingStrategy;

use super::cycle::{HeadReservation, State};
use super::{JobInfo, JobState, QueueInfo, QueueWorld};
use crate::Timestamp;

/// At most this many job ends are looked ahead over: beyond, a start is "unknown".
const HORIZON: usize = 512;

fn plus(t: Timestamp, secs: i64) -> Option<Timestamp> {
    t.checked_add(jiff::SignedDuration::from_secs(secs)).ok()
}

/// When a running job is expected to give back what it holds: a job preempted (now or
/// earlier) after its grace period, any other at its expected end; `None` when unknown.
pub(super) fn release_at(
    job: &JobInfo,
    a: &JobAdmission,
    victim_now: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let t = match &job.state {
        JobState::Preempting(_, n) => plus(n.notice_at.0, n.grace_seconds)?,
        _ if victim_now => plus(now, job.grace_seconds)?,
        _ => plus(a.admitted_at.0, job.expected_seconds?)?,
    };
    Some(t.max(now))
}

/// The running jobs with a known release time, earliest first.
fn releases<'a>(
    jobs: &'a [JobInfo],
    running: &'a [(usize, JobAdmission)],
    victims: &BTreeSet<usize>,
    now: Timestamp,
) -> Vec<(Timestamp, usize, &'a JobAdmission)> {
    let mut out: Vec<_> = running
        .iter()
        .filter_map(|(i, a)| Some((release_at(&jobs[*i], a, victims.contains(i), now)?, *i, a)))
        .collect();
    out.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| jobs[a.1].key.cmp(&jobs[b.1].key))
    });
    out
}

/// The quota a queue draws on: its cohort's, or its own.
fn quota_scope<'a>(state: &'a State, queue: &'a str) -> &'a str {
    state.ledger.cohort(queue).unwrap_or(queue)
}

/// The earliest time `job` of `queue` fits as running jobs end, and the cluster as it is
/// then (without `job`); `None` when it does not fit even after every job with a known end.
pub(super) fn earliest_start(
    state: &State,
    jobs: &[JobInfo],
    running: &[(usize, JobAdmission)],
    victims: &BTreeSet<usize>,
    queue: &QueueInfo,
    job: &JobInfo,
    now: Timestamp,
) -> Option<(Timestamp, State)> {
    let mut then = state.clone();
    let own = quota_scope(state, &queue.name);
    for (t, i, a) in releases(jobs, running, victims, now)
        .into_iter()
        .take(HORIZON)
    {
        then.unhold(&jobs[i], a);
        // Only a job sharing its quota or its GPU product can make room for it.
        let helps = quota_scope(state, &a.queue) == own
            || job
                .gpu_type
                .as_deref()
                .is_none_or(|p| a.product.as_deref() == Some(p));
        if helps && then.fit(queue, job).is_ok() {
            return Some((t, then));
        }
    }
    None
}

/// Expected start of each job in `pending` (indices into `world.jobs`, in queue order), from
/// a look-ahead: running jobs end when expected, and at each end the pending jobs are
/// admitted in order as the cycle would (a StrictFIFO queue's head blocks the rest of it).
/// A job admitted in the look-ahead ends after its own expected run time. Blocked heads
/// keep the start found for them when the look-ahead finds none.
#[expect(
    clippy::too_many_arguments,
    reason = "the cycle's working state, passed apart"
)]
pub(super) fn etas(
    state: &State,
    world: &QueueWorld,
    ns_queue: &BTreeMap<&str, usize>,
    running: &[(usize, JobAdmission)],
    victims: &BTreeSet<usize>,
    pending: &[usize],
    heads: &[HeadReservation],
    now: Timestamp,
) -> BTreeMap<usize, Timestamp> {
    let jobs = &world.jobs;
    let mut sim = state.clone();
    let mut events: BTreeSet<(Timestamp, usize)> = BTreeSet::new();
    let mut held: BTreeMap<usize, JobAdmission> = BTreeMap::new();
    for (t, i, a) in releases(jobs, running, victims, now) {
        events.insert((t, i));
        held.insert(i, a.clone());
    }
    let mut left: Vec<usize> = pending.to_vec();
    let mut out = BTreeMap::new();
    let mut steps = 0;
    // A job ending only helps jobs that share its quota (its cohort, or its queue alone) or
    // its GPU product: only those are tried again.
    while let Some(&(t, _)) = events.first() {
        if left.is_empty() || steps >= HORIZON {
            break;
        }
        let mut scopes: HashSet<String> = HashSet::new();
        let mut products: HashSet<String> = HashSet::new();
        while let Some(&(te, i)) = events.first() {
            if te > t {
                break;
            }
            events.pop_first();
            steps += 1;
            if let Some(a) = held.remove(&i) {
                sim.unhold(&jobs[i], &a);
                scopes.insert(quota_scope(state, &a.queue).to_owned());
                products.extend(a.product);
            }
        }
        let mut blocked: BTreeSet<usize> = BTreeSet::new();
        left.retain(|&ji| {
            let job = &jobs[ji];
            let qi = ns_queue[job.key.namespace.as_str()];
            let queue = &world.queues[qi];
            if blocked.contains(&qi) {
                return true;
            }
            let helped = scopes.contains(quota_scope(state, &queue.name))
                || job
                    .gpu_type
                    .as_ref()
                    .map_or(!products.is_empty(), |p| products.contains(p));
            let fits = if helped {
                sim.fit(queue, job).ok()
            } else {
                None
            };
            match fits.ok_or(()) {
                Ok(fit) => {
                    let a = sim.admit(&queue.name, job, &fit, t);
                    out.insert(ji, t);
                    if let Some(end) = job.expected_seconds.and_then(|s| plus(t, s)) {
                        events.insert((end, ji));
                        held.insert(ji, a);
                    }
                    false
                }
                Err(_) => {
                    if queue.strategy == QueueingStrategy::StrictFIFO {
                        blocked.insert(qi);
                    }
                    true
                }
            }
        });
    }
    for h in heads {
        out.entry(h.job).or_insert(h.eta);
    }
    out
}
