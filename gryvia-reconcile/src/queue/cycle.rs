//! One admission cycle: every pending job of every queue, in order, against quota and node
//! room; preemption where a queue allows it; backfill that never delays a blocked head.

use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::scheduling::QueueingStrategy;
use gryvia_types::{JobAdmission, PreemptionNotice, QueueStanding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::explain::Shortfall;
use super::ledger::Ledger;
use super::nodes::{NodeCapacity, Placement, Slot, place};
use super::simulate;
use super::{
    ANY_PRODUCT, JobInfo, JobKey, JobState, Milli, QueueInfo, QueueWorld, Share, standing,
};
use crate::Timestamp;

/// A job admitted by this cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admit {
    /// The job.
    pub job: JobKey,
    /// What to write to its `status.admission`.
    pub admission: JobAdmission,
}

/// A job this cycle preempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preempt {
    /// The victim.
    pub job: JobKey,
    /// What to write to its `status.preemption`.
    pub notice: PreemptionNotice,
}

/// What a queue's status says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSummary {
    /// Jobs waiting.
    pub pending: u32,
    /// Jobs admitted (preempted ones included until their workers are gone).
    pub admitted: u32,
    /// Per quota entry: used, borrowed, lent.
    pub entries: BTreeMap<String, (Milli, Milli, Milli)>,
}

/// Everything one cycle decides.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cycle {
    /// Jobs admitted now.
    pub admitted: Vec<Admit>,
    /// Jobs preempted now.
    pub preempted: Vec<Preempt>,
    /// Preempted jobs whose workers are gone: their admission and notice are cleared and
    /// they queue again.
    pub released: Vec<JobKey>,
    /// Every job left pending: its standing.
    pub pending: BTreeMap<JobKey, QueueStanding>,
    /// Every queue.
    pub queues: BTreeMap<String, QueueSummary>,
    /// Problems with the queues' configuration, per queue (a namespace listed by two queues).
    pub problems: BTreeMap<String, Vec<String>>,
}

/// What an admission would take: the option that fits.
#[derive(Clone, Debug)]
pub(super) struct Fit {
    pub entry: String,
    pub product: Option<String>,
    pub slot: Option<Slot>,
    pub per_worker: u32,
    pub nodes: Vec<String>,
    pub borrowed: Milli,
}

/// The quota and node room of the cluster as a cycle goes: admissions charge it, releases
/// give back.
#[derive(Clone, Debug)]
pub(super) struct State {
    pub ledger: Ledger,
    pub nodes: Vec<NodeCapacity>,
    /// Node indices per product, by name.
    pub by_product: BTreeMap<String, Vec<usize>>,
    pub index: BTreeMap<String, usize>,
}

impl State {
    pub fn new(queues: &[QueueInfo], nodes: &[NodeCapacity]) -> Self {
        let mut nodes = nodes.to_vec();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut by_product: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut index = BTreeMap::new();
        for (i, n) in nodes.iter().enumerate() {
            index.insert(n.name.clone(), i);
            if let Some(p) = &n.product {
                by_product.entry(p.clone()).or_default().push(i);
            }
        }
        Self {
            ledger: Ledger::new(queues),
            nodes,
            by_product,
            index,
        }
    }

    /// Node units an admitted job holds: on each node of its plan or with live workers, the
    /// larger of the two counts (a worker the scheduler put elsewhere than planned is never
    /// counted short).
    fn footprint(&self, job: &JobInfo, a: &JobAdmission) -> Vec<(usize, Slot, u32)> {
        let Some(slot) = Slot::of_resource(&a.resource) else {
            return Vec::new();
        };
        let per = u32::try_from(a.per_worker).unwrap_or(0);
        let mut planned: BTreeMap<&str, u32> = BTreeMap::new();
        for n in &a.nodes {
            *planned.entry(n.as_str()).or_insert(0) += 1;
        }
        let names: BTreeSet<&str> = planned
            .keys()
            .copied()
            .chain(job.live.keys().map(String::as_str))
            .collect();
        names
            .into_iter()
            .filter_map(|n| {
                let i = *self.index.get(n)?;
                let count = planned
                    .get(n)
                    .copied()
                    .unwrap_or(0)
                    .max(job.live.get(n).copied().unwrap_or(0));
                Some((i, slot.clone(), count * per))
            })
            .collect()
    }

    pub fn hold(&mut self, job: &JobInfo, a: &JobAdmission) {
        self.ledger.charge(&a.queue, &a.gpu_type, a.milli_gpus);
        for (i, slot, units) in self.footprint(job, a) {
            self.nodes[i].used.add(&slot, units);
        }
    }

    pub fn unhold(&mut self, job: &JobInfo, a: &JobAdmission) {
        self.ledger.release(&a.queue, &a.gpu_type, a.milli_gpus);
        for (i, slot, units) in self.footprint(job, a) {
            self.nodes[i].used.remove(&slot, units);
        }
    }

    /// The (quota entry, product) options of `job` in `queue`, in the order they are tried.
    fn options(
        &self,
        queue: &QueueInfo,
        job: &JobInfo,
    ) -> Result<Vec<(String, Option<String>)>, Shortfall> {
        if let Some(p) = &job.gpu_type {
            return match queue.entry_for(p) {
                Some(e) => Ok(vec![(e.gpu_type.clone(), Some(p.clone()))]),
                None => Err(Shortfall::NoQuotaEntry {
                    queue: queue.name.clone(),
                    gpu_type: Some(p.clone()),
                }),
            };
        }
        let mut out = Vec::new();
        for e in &queue.resources {
            if e.gpu_type == ANY_PRODUCT {
                out.extend(
                    self.by_product
                        .keys()
                        .map(|p| (e.gpu_type.clone(), Some(p.clone()))),
                );
            } else {
                out.push((e.gpu_type.clone(), Some(e.gpu_type.clone())));
            }
        }
        if out.is_empty() {
            return Err(Shortfall::NoQuotaEntry {
                queue: queue.name.clone(),
                gpu_type: None,
            });
        }
        Ok(out)
    }

    /// Whether `job` of `queue` fits now: quota first, then (for a gang, or with
    /// `gangAdmission`) room for every worker on nodes of one product.
    pub fn fit(&self, queue: &QueueInfo, job: &JobInfo) -> Result<Fit, Shortfall> {
        // With borrowing allowed there is no "only by borrowing" answer.
        self.fit_with(queue, job, true)?
            .ok_or_else(|| Shortfall::NoQuotaEntry {
                queue: queue.name.clone(),
                gpu_type: job.gpu_type.clone(),
            })
    }

    /// Like [`State::fit`]; without `borrow`, `Ok(None)` when the job would fit only by
    /// borrowing.
    pub fn fit_with(
        &self,
        queue: &QueueInfo,
        job: &JobInfo,
        borrow: bool,
    ) -> Result<Option<Fit>, Shortfall> {
        if job.share == Share::Gpus(0) {
            return Ok(Some(Fit {
                entry: String::new(),
                product: None,
                slot: None,
                per_worker: 0,
                nodes: Vec::new(),
                borrowed: 0,
            }));
        }
        let need = job.demand();
        let mut first: Option<Shortfall> = None;
        let mut needs_borrowing = false;
        for (entry, product) in self.options(queue, job)? {
            let borrowed = match self.ledger.check(&queue.name, &entry, need) {
                Ok(b) => b,
                Err(s) => {
                    first.get_or_insert(Shortfall::Quota {
                        need,
                        queue: queue.name.clone(),
                        entry: entry.clone(),
                        used: s.used,
                        nominal: s.nominal,
                        borrowing_limit: s.borrowing_limit,
                        cohort: s.cohort,
                    });
                    continue;
                }
            };
            match self.place_on(
                product.as_deref(),
                queue.gang_admission || job.workers > 1,
                job,
            ) {
                Ok(_) if borrowed > 0 && !borrow => needs_borrowing = true,
                Ok((slot, per_worker, nodes)) => {
                    return Ok(Some(Fit {
                        entry,
                        product,
                        slot: Some(slot),
                        per_worker,
                        nodes,
                        borrowed,
                    }));
                }
                Err(s) => {
                    first.get_or_insert(s);
                }
            }
        }
        if needs_borrowing {
            return Ok(None);
        }
        Err(first.unwrap_or(Shortfall::NoQuotaEntry {
            queue: queue.name.clone(),
            gpu_type: job.gpu_type.clone(),
        }))
    }

    /// Places every worker of `job` on nodes of `product` (checking room only when `check`),
    /// trying each kind of slot the nodes offer for its share.
    fn place_on(
        &self,
        product: Option<&str>,
        check: bool,
        job: &JobInfo,
    ) -> Result<(Slot, u32, Vec<String>), Shortfall> {
        let candidates: &[usize] = product
            .and_then(|p| self.by_product.get(p))
            .map_or(&[], Vec::as_slice);
        let usable: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| self.nodes[i].usable_by(job.reservation.as_deref()))
            .collect();
        // Nodes grouped by the slot one worker takes there (whole GPUs, a MIG slice,
        // time-slicing replicas); a job's workers all take the same.
        let mut groups: BTreeMap<(Slot, u32), Vec<usize>> = BTreeMap::new();
        for &i in &usable {
            if let Some(k) = self.nodes[i].slot_for(job.share) {
                groups.entry(k).or_default().push(i);
            }
        }
        let mut best = (0, 0);
        for ((slot, per), nodes) in &groups {
            if !check {
                return Ok((slot.clone(), *per, Vec::new()));
            }
            match place(&self.nodes, nodes, slot, *per, job.workers) {
                Placement::Placed(p) => return Ok((slot.clone(), *per, p)),
                Placement::Short {
                    fit,
                    nodes_with_room,
                } => best = best.max((fit, nodes_with_room)),
            }
        }
        let mut unavailable = BTreeMap::new();
        let mut reserved = 0;
        for &i in candidates {
            let n = &self.nodes[i];
            if let Some(u) = &n.unavailable {
                *unavailable.entry(u.clone()).or_insert(0) += 1;
            } else if !n.usable_by(job.reservation.as_deref()) {
                reserved += 1;
            }
        }
        Err(Shortfall::Placement {
            workers: job.workers,
            share: job.share,
            product: product.map(str::to_owned),
            fit: best.0,
            nodes_with_room: best.1,
            nodes: u32::try_from(candidates.len()).unwrap_or(u32::MAX),
            unavailable,
            reserved,
        })
    }

    /// Admits `job` with `fit`: charges it and returns its admission.
    pub fn admit(&mut self, queue: &str, job: &JobInfo, fit: &Fit, now: Timestamp) -> JobAdmission {
        let a = JobAdmission {
            queue: queue.to_owned(),
            gpu_type: fit.entry.clone(),
            product: fit.product.clone(),
            resource: fit.slot.as_ref().map(Slot::resource).unwrap_or_default(),
            per_worker: i32::try_from(fit.per_worker).unwrap_or(i32::MAX),
            milli_gpus: job.demand(),
            nodes: fit.nodes.clone(),
            borrowed_milli_gpus: fit.borrowed,
            admitted_at: Time(now),
        };
        self.hold(job, &a);
        a
    }
}

/// The queue of each namespace (the first by name when two list it), and the problems that
/// makes.
fn queue_of_namespace(
    queues: &[QueueInfo],
) -> (BTreeMap<&str, usize>, BTreeMap<String, Vec<String>>) {
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by(|&a, &b| queues[a].name.cmp(&queues[b].name));
    let mut map: BTreeMap<&str, usize> = BTreeMap::new();
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in order {
        for ns in &queues[i].namespaces {
            if let Some(&owner) = map.get(ns.as_str()) {
                problems
                    .entry(queues[i].name.clone())
                    .or_default()
                    .push(format!(
                        "namespace {ns} is also listed by queue {}, which holds its jobs",
                        queues[owner].name
                    ));
            } else {
                map.insert(ns, i);
            }
        }
    }
    (map, problems)
}

/// A blocked job ahead of others: when it is expected to start, and the cluster as it would
/// be then, so a later job can be checked for delaying it.
pub(super) struct HeadReservation {
    pub job: usize,
    pub queue: usize,
    pub eta: Timestamp,
    pub then: State,
}

/// Runs one admission cycle at `now`.
pub fn cycle(world: &QueueWorld, now: Timestamp) -> Cycle {
    let queues = &world.queues;
    let jobs = &world.jobs;
    let (ns_queue, problems) = queue_of_namespace(queues);
    let mut out = Cycle {
        problems,
        ..Cycle::default()
    };
    let mut state = State::new(queues, &world.nodes);
    // Preempted jobs whose workers are gone queue again; every other admission is held.
    let mut pending: Vec<usize> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        match &j.state {
            JobState::Preempting(_, _) if j.live.values().all(|&n| n == 0) => {
                out.released.push(j.key.clone());
                if ns_queue.contains_key(j.key.namespace.as_str()) {
                    pending.push(i);
                }
            }
            JobState::Preempting(a, _) => state.hold(j, a),
            JobState::Admitted(a) => state.hold(j, a),
            JobState::Pending => {
                if ns_queue.contains_key(j.key.namespace.as_str()) {
                    pending.push(i);
                }
            }
        }
    }
    pending.sort_by(|&a, &b| jobs[a].order_key().cmp(&jobs[b].order_key()));
    let running: Vec<(usize, JobAdmission)> = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| match &j.state {
            JobState::Admitted(a) => Some((i, a.clone())),
            JobState::Preempting(a, _) if !out.released.contains(&j.key) => Some((i, a.clone())),
            _ => None,
        })
        .collect();
    let mut cycle = Pass {
        jobs,
        queues,
        now,
        running,
        victims_now: BTreeSet::new(),
        blocked: BTreeMap::new(),
        heads: Vec::new(),
        reasons: BTreeMap::new(),
        pending: BTreeMap::new(),
        admitted: BTreeSet::new(),
    };
    for &ji in &pending {
        cycle
            .pending
            .entry(ns_queue[jobs[ji].key.namespace.as_str()])
            .or_default()
            .push(ji);
    }
    // Two passes: first what fits without borrowing (so quota a lender needs is not lent
    // away first to an older job of a borrower), then, in the same order, the jobs that
    // need to borrow. A queue with a job left for the second pass leaves the rest of its
    // jobs there too, so its order holds (and a lower-priority job admitted first is not
    // preempted by the borrower next cycle).
    let mut deferred: Vec<usize> = Vec::new();
    let mut deferring: BTreeSet<usize> = BTreeSet::new();
    for &ji in &pending {
        let qi = ns_queue[jobs[ji].key.namespace.as_str()];
        if deferring.contains(&qi) {
            deferred.push(ji);
            continue;
        }
        if let Some(Step::Deferred) = cycle.consider(&mut state, &mut out, ji, qi, false) {
            deferred.push(ji);
            deferring.insert(qi);
        }
    }
    for ji in deferred {
        let qi = ns_queue[jobs[ji].key.namespace.as_str()];
        cycle.consider(&mut state, &mut out, ji, qi, true);
    }
    let Pass {
        running,
        victims_now,
        heads,
        mut reasons,
        ..
    } = cycle;
    let admitted_now: BTreeSet<&JobKey> = out.admitted.iter().map(|a| &a.job).collect();
    let still: Vec<usize> = pending
        .iter()
        .copied()
        .filter(|i| !admitted_now.contains(&jobs[*i].key))
        .collect();
    let etas = simulate::etas(
        &state,
        world,
        &ns_queue,
        &running,
        &victims_now,
        &still,
        &heads,
        now,
    );
    let mut position: BTreeMap<usize, usize> = BTreeMap::new();
    for &ji in &still {
        let qi = ns_queue[jobs[ji].key.namespace.as_str()];
        let p = position.entry(qi).or_insert(0);
        *p += 1;
        let reason = reasons
            .remove(&ji)
            .map(|r| r.to_string())
            .unwrap_or_default();
        out.pending.insert(
            jobs[ji].key.clone(),
            standing(&queues[qi].name, *p, reason, etas.get(&ji).copied()),
        );
    }
    summarize(&mut out, &state, world, &ns_queue, &still);
    out
}

/// What became of a job in a pass.
enum Step {
    /// It needs to borrow: left for the borrowing pass.
    Deferred,
}

/// The working state of a cycle's passes over the pending jobs.
struct Pass<'a> {
    jobs: &'a [JobInfo],
    queues: &'a [QueueInfo],
    now: Timestamp,
    /// Every job holding an admission (those admitted in this cycle too).
    running: Vec<(usize, JobAdmission)>,
    /// Jobs preempted in this cycle.
    victims_now: BTreeSet<usize>,
    /// Per queue: its first job that was not admitted.
    blocked: BTreeMap<usize, usize>,
    /// Blocked heads with an expected start, which later jobs must not delay.
    heads: Vec<HeadReservation>,
    /// Why each job not admitted is not.
    reasons: BTreeMap<usize, Shortfall>,
    /// Pending jobs per queue, in order.
    pending: BTreeMap<usize, Vec<usize>>,
    /// Jobs admitted in this cycle.
    admitted: BTreeSet<usize>,
}

impl Pass<'_> {
    fn lender_needing(
        &self,
        state: &State,
        qi: usize,
        entry: &str,
        amount: Milli,
    ) -> Option<usize> {
        lender_needing(
            self.queues,
            self.jobs,
            &self.pending,
            &self.admitted,
            state,
            qi,
            entry,
            amount,
        )
    }

    /// Admits `jobs[ji]` of `queues[qi]` if it fits (without borrowing unless `borrow`) and
    /// delays no blocked head; else preempts for it where its queue allows, or records why
    /// it waits.
    fn consider(
        &mut self,
        state: &mut State,
        out: &mut Cycle,
        ji: usize,
        qi: usize,
        borrow: bool,
    ) -> Option<Step> {
        let (jobs, queues, now) = (self.jobs, self.queues, self.now);
        let job = &jobs[ji];
        let queue = &queues[qi];
        if let Some(&head) = self.blocked.get(&qi)
            && queue.strategy == QueueingStrategy::StrictFIFO
        {
            self.reasons.insert(
                ji,
                Shortfall::Behind {
                    head: jobs[head].key.clone(),
                },
            );
            return None;
        }
        match state.fit_with(queue, job, borrow) {
            Ok(None) => Some(Step::Deferred),
            Ok(Some(fit)) => {
                if fit.borrowed > 0
                    && let Some(lender) = self.lender_needing(state, qi, &fit.entry, job.demand())
                {
                    self.reasons.insert(
                        ji,
                        Shortfall::LenderNeeds {
                            queue: queues[lender].name.clone(),
                        },
                    );
                    self.blocked.entry(qi).or_insert(ji);
                    return None;
                }
                if let Some(h) = delays(&self.heads, jobs, queues, &queue.name, job, &fit, now) {
                    self.reasons.insert(
                        ji,
                        Shortfall::WouldDelay {
                            head: jobs[h].key.clone(),
                        },
                    );
                    self.blocked.entry(qi).or_insert(ji);
                    return None;
                }
                let a = state.admit(&queue.name, job, &fit, now);
                let end = job
                    .expected_seconds
                    .and_then(|s| now.checked_add(jiff::SignedDuration::from_secs(s)).ok());
                for h in &mut self.heads {
                    if end.is_none_or(|e| e > h.eta) {
                        h.then.hold(job, &a);
                    }
                }
                self.running.push((ji, a.clone()));
                self.admitted.insert(ji);
                out.admitted.push(Admit {
                    job: job.key.clone(),
                    admission: a,
                });
                None
            }
            Err(short) => {
                let short = preempt_for(
                    state,
                    out,
                    &mut self.victims_now,
                    &self.running,
                    &self.heads,
                    (&self.pending, &self.admitted),
                    jobs,
                    queues,
                    qi,
                    ji,
                    now,
                )
                .unwrap_or(short);
                let first_blocked = !self.blocked.contains_key(&qi);
                self.blocked.entry(qi).or_insert(ji);
                let waits_for_time = !matches!(short, Shortfall::NoQuotaEntry { .. });
                if first_blocked
                    && waits_for_time
                    && let Some((eta, then)) = simulate::earliest_start(
                        state,
                        jobs,
                        &self.running,
                        &self.victims_now,
                        queue,
                        job,
                        now,
                    )
                {
                    self.heads.push(HeadReservation {
                        job: ji,
                        queue: qi,
                        eta,
                        then,
                    });
                }
                self.reasons.insert(ji, short);
                None
            }
        }
    }
}

/// A cohort queue with `reclaimWithinCohort` whose first pending job that fits its
/// nominal would no longer fit if queue `qi` borrowed `amount` of `entry` now: it would
/// reclaim that at once, so the borrower waits instead.
#[expect(
    clippy::too_many_arguments,
    reason = "the cycle's working state, passed apart"
)]
fn lender_needing(
    queues: &[QueueInfo],
    all_jobs: &[JobInfo],
    pending: &BTreeMap<usize, Vec<usize>>,
    admitted: &BTreeSet<usize>,
    state: &State,
    qi: usize,
    entry: &str,
    amount: Milli,
) -> Option<usize> {
    let cohort = state.ledger.cohort(&queues[qi].name)?;
    let mut after = state.ledger.clone();
    after.charge(&queues[qi].name, entry, amount);
    pending.iter().find_map(|(&pi, jobs)| {
        let p = &queues[pi];
        if pi == qi || !p.reclaim_within_cohort || state.ledger.cohort(&p.name) != Some(cohort) {
            return None;
        }
        let k = jobs
            .iter()
            .filter(|k| !admitted.contains(k))
            .map(|&k| &all_jobs[k])
            .find(|k| {
                state.ledger.within_nominal(&p.name, entry, k.demand())
                    && k.gpu_type
                        .as_deref()
                        .and_then(|t| p.entry_for(t))
                        .is_some_and(|e| e.gpu_type == entry)
            })?;
        let fits_before = state.ledger.check(&p.name, entry, k.demand()).is_ok();
        let fits_after = after.check(&p.name, entry, k.demand()).is_ok();
        (fits_before && !fits_after).then_some(pi)
    })
}

/// The first blocked head whose expected start `job` (admitted now with `fit`) would delay.
fn delays(
    heads: &[HeadReservation],
    jobs: &[JobInfo],
    queues: &[QueueInfo],
    queue: &str,
    job: &JobInfo,
    fit: &Fit,
    now: Timestamp,
) -> Option<usize> {
    let end = job
        .expected_seconds
        .and_then(|s| now.checked_add(jiff::SignedDuration::from_secs(s)).ok());
    for h in heads {
        if end.is_some_and(|e| e <= h.eta) {
            continue;
        }
        let mut then = h.then.clone();
        then.admit(queue, job, fit, now);
        if then.fit(&queues[h.queue], &jobs[h.job]).is_err() {
            return Some(h.job);
        }
    }
    None
}

/// Tries to make room for `jobs[ji]` of `queues[qi]` by preemption; the shortfall to report
/// when it does (or when jobs preempted earlier will make room), `None` when preemption
/// cannot help.
#[expect(
    clippy::too_many_arguments,
    reason = "the cycle's working state, passed apart"
)]
fn preempt_for(
    state: &mut State,
    out: &mut Cycle,
    victims_now: &mut BTreeSet<usize>,
    running: &[(usize, JobAdmission)],
    heads: &[HeadReservation],
    (pending, admitted): (&BTreeMap<usize, Vec<usize>>, &BTreeSet<usize>),
    jobs: &[JobInfo],
    queues: &[QueueInfo],
    qi: usize,
    ji: usize,
    now: Timestamp,
) -> Option<Shortfall> {
    let queue = &queues[qi];
    let job = &jobs[ji];
    // Jobs preempted earlier (in an earlier cycle or for a job ahead) release what they hold
    // soon: when that is enough, wait for it rather than preempt more.
    let going: Vec<&(usize, JobAdmission)> = running
        .iter()
        .filter(|(i, _)| {
            victims_now.contains(i) || matches!(jobs[*i].state, JobState::Preempting(..))
        })
        .collect();
    if !going.is_empty() {
        let mut after = state.clone();
        for (i, a) in &going {
            after.unhold(&jobs[*i], a);
        }
        if after.fit(queue, job).is_ok() {
            return Some(Shortfall::WaitingForPreempted { jobs: going.len() });
        }
    }
    if !queue.preempt_lower_priority && !queue.reclaim_within_cohort {
        return None;
    }
    let cohort = state.ledger.cohort(&queue.name).map(str::to_owned);
    let reclaim_entries: BTreeSet<String> = if queue.reclaim_within_cohort && cohort.is_some() {
        state
            .fit_entries(queue, job)
            .into_iter()
            .filter(|e| state.ledger.within_nominal(&queue.name, e, job.demand()))
            .collect()
    } else {
        BTreeSet::new()
    };
    // Candidates: lower-priority jobs of the queue, and jobs of cohort queues that borrow an
    // entry the job could have within its own nominal. Lowest priority first, then newest.
    let mut candidates: Vec<(usize, &JobAdmission, bool)> = running
        .iter()
        // Jobs admitted in this cycle are not preempted in it.
        .filter(|(i, _)| {
            !victims_now.contains(i) && matches!(jobs[*i].state, JobState::Admitted(_))
        })
        .filter_map(|(i, a)| {
            let v = &jobs[*i];
            if a.queue == queue.name {
                (queue.preempt_lower_priority && v.ranks_below(job)).then_some((*i, a, false))
            } else {
                let same_cohort =
                    cohort.is_some() && state.ledger.cohort(&a.queue) == cohort.as_deref();
                (same_cohort && reclaim_entries.contains(&a.gpu_type)).then_some((*i, a, true))
            }
        })
        .collect();
    candidates.sort_by(|a, b| {
        let (va, vb) = (&jobs[a.0], &jobs[b.0]);
        (va.class_value, va.priority)
            .cmp(&(vb.class_value, vb.priority))
            .then_with(|| b.1.admitted_at.0.cmp(&a.1.admitted_at.0))
            .then_with(|| vb.created.cmp(&va.created))
            .then_with(|| va.key.cmp(&vb.key))
    });
    let mut trial = state.clone();
    let mut chosen: Vec<(usize, &JobAdmission, bool)> = Vec::new();
    let mut fits = false;
    for c in candidates {
        // A reclaim victim only while its queue still borrows that entry.
        if c.2 && !trial.ledger.borrowing(&c.1.queue, &c.1.gpu_type) {
            continue;
        }
        trial.unhold(&jobs[c.0], c.1);
        chosen.push(c);
        if trial.fit(queue, job).is_ok() {
            fits = true;
            break;
        }
    }
    if !fits {
        return None;
    }
    // Fewest: give back, last chosen first, every victim the job can do without.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let (vi, a, _) = chosen[i];
        trial.hold(&jobs[vi], a);
        if trial.fit(queue, job).is_ok() {
            chosen.remove(i);
        } else {
            trial.unhold(&jobs[vi], a);
        }
    }
    // The job then runs in the victims' room: that must not delay a blocked job ahead.
    let fit = trial.fit(queue, job).ok()?;
    if fit.borrowed > 0
        && lender_needing(
            queues,
            jobs,
            pending,
            admitted,
            &trial,
            qi,
            &fit.entry,
            job.demand(),
        )
        .is_some()
    {
        return None;
    }
    let end = job
        .expected_seconds
        .and_then(|s| now.checked_add(jiff::SignedDuration::from_secs(s)).ok());
    for h in heads {
        let mut then = h.then.clone();
        for (vi, a, _) in &chosen {
            let gone_by_then =
                simulate::release_at(&jobs[*vi], a, false, now).is_some_and(|t| t <= h.eta);
            if !gone_by_then {
                then.unhold(&jobs[*vi], a);
            }
        }
        if end.is_none_or(|e| e > h.eta) {
            then.admit(&queue.name, job, &fit, now);
        }
        if then.fit(&queues[h.queue], &jobs[h.job]).is_err() {
            return None;
        }
    }
    let mut victims = Vec::new();
    for (vi, _, reclaim) in chosen {
        victims_now.insert(vi);
        let v = &jobs[vi];
        victims.push(v.key.clone());
        out.preempted.push(Preempt {
            job: v.key.clone(),
            notice: PreemptionNotice {
                by: job.key.to_string(),
                reason: if reclaim { "Reclaim" } else { "WithinQueue" }.to_owned(),
                notice_at: Time(now),
                grace_seconds: v.grace_seconds,
            },
        });
    }
    Some(Shortfall::Preempting { victims })
}

impl State {
    /// The quota entries `job` could be charged to in `queue`.
    fn fit_entries(&self, queue: &QueueInfo, job: &JobInfo) -> Vec<String> {
        self.options(queue, job)
            .map(|o| o.into_iter().map(|(e, _)| e).collect())
            .unwrap_or_default()
    }
}

fn summarize(
    out: &mut Cycle,
    state: &State,
    world: &QueueWorld,
    ns_queue: &BTreeMap<&str, usize>,
    still: &[usize],
) {
    for q in &world.queues {
        out.queues.insert(
            q.name.clone(),
            QueueSummary {
                entries: state.ledger.summary(&q.name),
                ..QueueSummary::default()
            },
        );
    }
    for &ji in still {
        let qi = ns_queue[world.jobs[ji].key.namespace.as_str()];
        if let Some(s) = out.queues.get_mut(&world.queues[qi].name) {
            s.pending += 1;
        }
    }
    let released: BTreeSet<&JobKey> = out.released.iter().collect();
    let admitted = world
        .jobs
        .iter()
        .filter(|j| !released.contains(&j.key))
        .filter_map(|j| j.admission().map(|a| a.queue.clone()))
        .chain(out.admitted.iter().map(|a| a.admission.queue.clone()));
    for q in admitted {
        if let Some(s) = out.queues.get_mut(&q) {
            s.admitted += 1;
        }
    }
}

/// When the pending job `key` of `world` is expected to start: `now` when it fits now, else
/// when enough running jobs with a known end are gone; `None` when that cannot be known.
pub fn expected_start(world: &QueueWorld, key: &JobKey, now: Timestamp) -> Option<Timestamp> {
    let (ns_queue, _) = queue_of_namespace(&world.queues);
    let queue = &world.queues[*ns_queue.get(key.namespace.as_str())?];
    let job = world.jobs.iter().find(|j| j.key == *key)?;
    let mut state = State::new(&world.queues, &world.nodes);
    let mut running = Vec::new();
    for (i, j) in world.jobs.iter().enumerate() {
        if let Some(a) = j.admission() {
            state.hold(j, a);
            running.push((i, a.clone()));
        }
    }
    if state.fit(queue, job).is_ok() {
        return Some(now);
    }
    simulate::earliest_start(
        &state,
        &world.jobs,
        &running,
        &BTreeSet::new(),
        queue,
        job,
        now,
    )
    .map(|(t, _)| t)
}
