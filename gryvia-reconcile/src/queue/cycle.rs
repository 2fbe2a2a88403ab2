//! One admission cycle: every pending job of every queue, in order, against quota and node
//! room; preemption where a queue allows it; backfill that never delays a blocked head.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gryvia_types::scheduling::QueueingStrategy;
use gryvia_types::{JobAdmission, PreemptionNotice, QueueStanding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use super::explain::Shortfall;
use super::ledger::Ledger;
use super::nodes::{NodeCapacity, Placement, Slot, Unavailable, place};
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
    /// Only the decisions were made ([`decide`]): `pending` and `queues` are empty, not
    /// because nothing waits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decisions_only: bool,
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
    /// Charged over the queue's quota by the job's tier's `quotaOverride`.
    pub over: Milli,
}

/// The quota and node room of the cluster as a cycle goes: admissions charge it, releases
/// give back.
#[derive(Clone, Debug)]
pub(super) struct State {
    pub ledger: Ledger,
    pub nodes: Vec<NodeCapacity>,
    /// Node indices per product, by name.
    pub by_product: BTreeMap<String, Vec<usize>>,
    pub index: HashMap<String, usize>,
    /// Per product: how many of its generally usable nodes (not quarantined, cordoned or
    /// reserved) have each count of whole GPUs free. A whole-GPU gang that does not fit is
    /// told so from this, without a walk over the nodes.
    free_gpus: HashMap<String, Vec<u32>>,
    /// Per product: its nodes that do not count, by why, and those reserved.
    not_capacity: HashMap<String, (BTreeMap<Unavailable, u32>, u32)>,
}

impl State {
    pub fn new(queues: &[QueueInfo], nodes: &[NodeCapacity]) -> Self {
        let mut nodes = nodes.to_vec();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let mut by_product: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut index = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            index.insert(n.name.clone(), i);
            if let Some(p) = &n.product {
                by_product.entry(p.clone()).or_default().push(i);
            }
        }
        let mut free_gpus: HashMap<String, Vec<u32>> = HashMap::new();
        let mut not_capacity: HashMap<String, (BTreeMap<Unavailable, u32>, u32)> = HashMap::new();
        for n in &nodes {
            let Some(p) = &n.product else { continue };
            let nc = not_capacity.entry(p.clone()).or_default();
            if let Some(u) = &n.unavailable {
                *nc.0.entry(u.clone()).or_insert(0) += 1;
            } else if n.reserved_by.is_some() {
                nc.1 += 1;
            } else {
                let hist = free_gpus.entry(p.clone()).or_default();
                let f = n.free(&Slot::Gpu) as usize;
                if hist.len() <= f {
                    hist.resize(f + 1, 0);
                }
                hist[f] += 1;
            }
        }
        Self {
            ledger: Ledger::new(queues),
            nodes,
            by_product,
            index,
            free_gpus,
            not_capacity,
        }
    }

    /// Moves node `i` in its product's free-GPU counts from `before` free to its free now.
    fn recount(&mut self, i: usize, before: u32) {
        let n = &self.nodes[i];
        if n.unavailable.is_some() || n.reserved_by.is_some() {
            return;
        }
        let Some(hist) = n.product.as_ref().and_then(|p| self.free_gpus.get_mut(p)) else {
            return;
        };
        let after = n.free(&Slot::Gpu) as usize;
        if let Some(c) = hist.get_mut(before as usize) {
            *c = c.saturating_sub(1);
        }
        if hist.len() <= after {
            hist.resize(after + 1, 0);
        }
        hist[after] += 1;
    }

    fn add_units(&mut self, i: usize, slot: &Slot, units: u32, add: bool) {
        let before = self.nodes[i].free(&Slot::Gpu);
        if add {
            self.nodes[i].used.add(slot, units);
        } else {
            self.nodes[i].used.remove(slot, units);
        }
        if *slot == Slot::Gpu {
            self.recount(i, before);
        }
    }

    /// Workers of `per` whole GPUs that fit on the usable nodes of `product`, and the nodes
    /// with room for one or more, from the free-GPU counts.
    fn gpu_room(&self, product: &str, per: u32) -> (u32, u32) {
        let Some(hist) = self.free_gpus.get(product) else {
            return (0, 0);
        };
        let (mut fit, mut nodes) = (0_u32, 0_u32);
        for (free, &count) in hist.iter().enumerate().skip(per.max(1) as usize) {
            fit += count * (u32::try_from(free).unwrap_or(u32::MAX) / per.max(1));
            nodes += count;
        }
        (fit, nodes)
    }

    /// Node units an admitted job holds: on each node of its plan or with live workers, the
    /// larger of the two counts (a worker the scheduler put elsewhere than planned is never
    /// counted short).
    fn footprint(&self, job: &JobInfo, a: &JobAdmission) -> Vec<(usize, Slot, u32)> {
        let Some(slot) = Slot::of_resource(&a.resource) else {
            return Vec::new();
        };
        let per = u32::try_from(a.per_worker).unwrap_or(0);
        // (node, planned, live): a handful of nodes, so a list rather than a map.
        let mut counts: Vec<(usize, u32, u32)> = Vec::with_capacity(a.nodes.len());
        for n in &a.nodes {
            let Some(&i) = self.index.get(n) else {
                continue;
            };
            match counts.iter_mut().find(|c| c.0 == i) {
                Some(c) => c.1 += 1,
                None => counts.push((i, 1, 0)),
            }
        }
        for (n, &live) in &job.live {
            let Some(&i) = self.index.get(n) else {
                continue;
            };
            match counts.iter_mut().find(|c| c.0 == i) {
                Some(c) => c.2 = live,
                None => counts.push((i, 0, live)),
            }
        }
        counts
            .into_iter()
            .map(|(i, planned, live)| (i, slot.clone(), planned.max(live) * per))
            .collect()
    }

    pub fn hold(&mut self, job: &JobInfo, a: &JobAdmission) {
        let over = a.over_quota_milli_gpus.clamp(0, a.milli_gpus);
        self.ledger
            .charge(&a.queue, &a.gpu_type, a.milli_gpus - over);
        self.ledger.charge_over(&a.queue, &a.gpu_type, over);
        for (i, slot, units) in self.footprint(job, a) {
            self.add_units(i, &slot, units, true);
        }
    }

    pub fn unhold(&mut self, job: &JobInfo, a: &JobAdmission) {
        let over = a.over_quota_milli_gpus.clamp(0, a.milli_gpus);
        self.ledger
            .release(&a.queue, &a.gpu_type, a.milli_gpus - over);
        self.ledger.charge_over(&a.queue, &a.gpu_type, -over);
        for (i, slot, units) in self.footprint(job, a) {
            self.add_units(i, &slot, units, false);
        }
    }

    /// The (quota entry, product) options of `job` in `queue`, in the order they are tried.
    fn options<'a>(
        &'a self,
        queue: &'a QueueInfo,
        job: &'a JobInfo,
    ) -> Result<Vec<(&'a str, Option<&'a str>)>, Shortfall> {
        if let Some(p) = &job.gpu_type {
            return match queue.entry_for(p) {
                Some(e) => Ok(vec![(e.gpu_type.as_str(), Some(p.as_str()))]),
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
                        .map(|p| (e.gpu_type.as_str(), Some(p.as_str()))),
                );
            } else {
                out.push((e.gpu_type.as_str(), Some(e.gpu_type.as_str())));
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
                over: 0,
            }));
        }
        let need = job.demand();
        let mut first: Option<Shortfall> = None;
        let mut needs_borrowing = false;
        for (entry, product) in self.options(queue, job)? {
            let (borrowed, over) = match self.ledger.check(&queue.name, entry, need) {
                Ok(b) => (b, 0),
                Err(_)
                    if job.quota_override_percent > 0
                        && self.ledger.check_over(
                            &queue.name,
                            entry,
                            need,
                            job.quota_override_percent,
                        ) =>
                {
                    (0, need)
                }
                Err(s) => {
                    first.get_or_insert(Shortfall::Quota {
                        need,
                        queue: queue.name.clone(),
                        entry: entry.to_owned(),
                        used: s.used,
                        nominal: s.nominal,
                        borrowing_limit: s.borrowing_limit,
                        cohort: s.cohort,
                    });
                    continue;
                }
            };
            match self.place_on(product, queue.gang_admission || job.workers > 1, job) {
                Ok(_) if borrowed > 0 && !borrow => needs_borrowing = true,
                Ok((slot, per_worker, nodes)) => {
                    return Ok(Some(Fit {
                        entry: entry.to_owned(),
                        product: product.map(str::to_owned),
                        slot: Some(slot),
                        per_worker,
                        nodes,
                        borrowed,
                        over,
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
        let reservation = job.reservation.as_deref();
        // Whole GPUs without a reservation: the free-GPU counts answer "does not fit" at once.
        if let (Share::Gpus(per), None, Some(p), true) = (job.share, reservation, product, check)
            && let (fit, nodes_with_room) = self.gpu_room(p, per)
            && fit < job.workers
        {
            return Err(self.placement_short(
                job,
                product,
                candidates.len(),
                (fit, nodes_with_room),
            ));
        }
        let usable = |i: usize| {
            self.nodes[i].usable_by(reservation)
                && self.nodes[i].admits(&job.node_selector, &job.tolerations)
        };
        // The kinds of slot one worker takes on these nodes (whole GPUs, a MIG slice,
        // time-slicing replicas); a job's workers all take the same kind.
        let mut kinds: Vec<(Slot, u32)> = Vec::new();
        for &i in candidates {
            if usable(i)
                && let Some(k) = self.nodes[i].slot_for(job.share)
                && !kinds.contains(&k)
            {
                kinds.push(k);
                if matches!(job.share, Share::Gpus(_)) {
                    break;
                }
            }
        }
        kinds.sort();
        let mut best = (0, 0);
        for (slot, per) in kinds {
            if !check {
                return Ok((slot, per, Vec::new()));
            }
            let nodes = candidates.iter().copied().filter(|&i| {
                usable(i)
                    && self.nodes[i]
                        .slot_for(job.share)
                        .is_some_and(|k| k == (slot.clone(), per))
            });
            match place(&self.nodes, nodes, &slot, per, job.workers) {
                Placement::Placed(p) => return Ok((slot, per, p)),
                Placement::Short {
                    fit,
                    nodes_with_room,
                } => best = best.max((fit, nodes_with_room)),
            }
        }
        Err(self.placement_short(job, product, candidates.len(), best))
    }

    /// Why `job` does not fit on the nodes of `product`: `room` is (workers that fit, nodes
    /// with room).
    fn placement_short(
        &self,
        job: &JobInfo,
        product: Option<&str>,
        nodes: usize,
        room: (u32, u32),
    ) -> Shortfall {
        let (mut unavailable, mut reserved) = product
            .and_then(|p| self.not_capacity.get(p))
            .cloned()
            .unwrap_or_default();
        // The job's own reservation's nodes count for it.
        if let (Some(r), Some(p)) = (job.reservation.as_deref(), product) {
            let own = self.by_product.get(p).map_or(0, |ns| {
                ns.iter()
                    .filter(|&&i| {
                        self.nodes[i].unavailable.is_none()
                            && self.nodes[i].reserved_by.as_deref() == Some(r)
                    })
                    .count()
            });
            reserved = reserved.saturating_sub(u32::try_from(own).unwrap_or(0));
        }
        unavailable.retain(|_, n| *n > 0);
        // Nodes that count, but not for this job: its nodeSelector or tolerations.
        let excluded = product
            .and_then(|p| self.by_product.get(p))
            .map_or(0, |ns| {
                ns.iter()
                    .filter(|&&i| {
                        let n = &self.nodes[i];
                        n.usable_by(job.reservation.as_deref())
                            && !n.admits(&job.node_selector, &job.tolerations)
                    })
                    .count()
            });
        Shortfall::Placement {
            workers: job.workers,
            share: job.share,
            product: product.map(str::to_owned),
            fit: room.0,
            nodes_with_room: room.1,
            nodes: u32::try_from(nodes).unwrap_or(u32::MAX),
            unavailable,
            reserved,
            excluded: u32::try_from(excluded).unwrap_or(u32::MAX),
        }
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
            over_quota_milli_gpus: fit.over,
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

/// Holds what every admitted job holds; releases preempted jobs whose workers are gone (they
/// queue again). Returns the pending jobs of covered namespaces in order, and every job that
/// still holds an admission.
fn take_stock(
    world: &QueueWorld,
    now: Timestamp,
    ns_queue: &BTreeMap<&str, usize>,
    state: &mut State,
    out: &mut Cycle,
) -> (Vec<usize>, Vec<(usize, JobAdmission)>) {
    let jobs = &world.jobs;
    let mut pending: Vec<usize> = Vec::new();
    let mut running: Vec<(usize, JobAdmission)> = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        match &j.state {
            JobState::Preempting(_, _) if j.live.values().all(|&n| n == 0) => {
                out.released.push(j.key.clone());
                if ns_queue.contains_key(j.key.namespace.as_str()) {
                    pending.push(i);
                }
            }
            JobState::Preempting(a, _) | JobState::Admitted(a) => {
                state.hold(j, a);
                running.push((i, a.clone()));
            }
            JobState::Pending => {
                if ns_queue.contains_key(j.key.namespace.as_str()) {
                    pending.push(i);
                }
            }
        }
    }
    pending.sort_by(|&a, &b| jobs[a].order_key(now).cmp(&jobs[b].order_key(now)));
    (pending, running)
}

/// Runs one admission cycle at `now`.
pub fn cycle(world: &QueueWorld, now: Timestamp) -> Cycle {
    run(world, now, true, true)
}

/// The decisions of [`cycle`] alone: the same admissions, preemptions and releases, without
/// the standing of every job left waiting (position, reason, expected start) or the queues'
/// summaries (`decisions_only` is set). For cycles between full ones: in a long queue the
/// standings cost most of a cycle, and they are written a few at a time anyway.
pub fn decide(world: &QueueWorld, now: Timestamp) -> Cycle {
    run(world, now, true, false)
}

/// [`cycle`] deciding every pending job in full, without taking a like job's reason when
/// nothing changed in between: what the shortcut must always agree with (a property test
/// compares the two).
#[doc(hidden)]
pub fn cycle_deciding_every_job(world: &QueueWorld, now: Timestamp) -> Cycle {
    run(world, now, false, true)
}

fn run(world: &QueueWorld, now: Timestamp, like_jobs_once: bool, standings: bool) -> Cycle {
    let queues = &world.queues;
    let jobs = &world.jobs;
    let (ns_queue, problems) = queue_of_namespace(queues);
    let mut out = Cycle {
        problems,
        ..Cycle::default()
    };
    let mut state = State::new(queues, &world.nodes);
    let (pending, running) = take_stock(world, now, &ns_queue, &mut state, &mut out);
    // The queue of each pending job, looked up once.
    let mut queue_of: Vec<usize> = vec![usize::MAX; jobs.len()];
    for &ji in &pending {
        queue_of[ji] = ns_queue[jobs[ji].key.namespace.as_str()];
    }
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
        no_room: HashMap::new(),
        waiting: HashMap::new(),
        like_jobs_once,
        standings,
    };
    for &ji in &pending {
        cycle.pending.entry(queue_of[ji]).or_default().push(ji);
    }
    // Two passes: first what fits without borrowing (so quota a lender needs is not lent
    // away first to an older job of a borrower), then, in the same order, the jobs that
    // need to borrow. A queue with a job left for the second pass leaves the rest of its
    // jobs there too, so its order holds (and a lower-priority job admitted first is not
    // preempted by the borrower next cycle).
    let mut deferred: Vec<usize> = Vec::new();
    let mut deferring: BTreeSet<usize> = BTreeSet::new();
    for &ji in &pending {
        let qi = queue_of[ji];
        if deferring.contains(&qi) {
            deferred.push(ji);
            continue;
        }
        if let Some(Step::Deferred) = cycle.consider(&mut state, &mut out, ji, qi, false) {
            deferred.push(ji);
            deferring.insert(qi);
        }
    }
    // The second pass starts over in order: what the first learned about room does not hold.
    cycle.no_room.clear();
    for ji in deferred {
        let qi = queue_of[ji];
        cycle.consider(&mut state, &mut out, ji, qi, true);
    }
    let Pass {
        running,
        victims_now,
        heads,
        reasons,
        admitted,
        ..
    } = cycle;
    if !standings {
        out.decisions_only = true;
        return out;
    }
    let still: Vec<usize> = pending
        .iter()
        .copied()
        .filter(|i| !admitted.contains(i))
        .collect();
    out.pending = standings_of(
        world,
        (&state, &ns_queue, &queue_of),
        (&running, &victims_now, &heads),
        &still,
        reasons,
        now,
    );
    summarize(&mut out, &state, world, &queue_of, &still);
    out
}

/// The standing of every job `still` pending after a cycle's passes: its queue, its position
/// there, why it waits (`reasons`) and when it is expected to start.
fn standings_of(
    world: &QueueWorld,
    (state, ns_queue, queue_of): (&State, &BTreeMap<&str, usize>, &[usize]),
    (running, victims_now, heads): (
        &[(usize, JobAdmission)],
        &BTreeSet<usize>,
        &[HeadReservation],
    ),
    still: &[usize],
    mut reasons: BTreeMap<usize, Shortfall>,
    now: Timestamp,
) -> BTreeMap<JobKey, QueueStanding> {
    let (jobs, queues) = (&world.jobs, &world.queues);
    let etas = simulate::etas(
        state,
        world,
        ns_queue,
        running,
        victims_now,
        still,
        heads,
        now,
    );
    let mut position: BTreeMap<usize, usize> = BTreeMap::new();
    // Like jobs wait for the same reason: its text is written once.
    let mut said: Option<(Shortfall, String)> = None;
    let mut standings = BTreeMap::new();
    for &ji in still {
        let qi = queue_of[ji];
        let p = position.entry(qi).or_insert(0);
        *p += 1;
        let reason = match reasons.remove(&ji) {
            None => String::new(),
            Some(r) => match &said {
                Some((last, text)) if *last == r => text.clone(),
                _ => {
                    let text = r.to_string();
                    said = Some((r, text.clone()));
                    text
                }
            },
        };
        standings.insert(
            jobs[ji].key.clone(),
            standing(&queues[qi].name, *p, reason, etas.get(&ji).copied()),
        );
    }
    standings
}

/// How many waiting jobs ahead of a job, ranked above it, are checked for preempting it at
/// once before it is admitted (`Pass::preempted_at_once`): a job further back that could
/// preempt it is left to do so in the next cycle.
pub const PREEMPTION_LOOKBACK: usize = 4;

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
    /// Per (queue, GPU type, fractional): the smallest demand preemption could not make
    /// room for in this pass. Later jobs of the queue rank no higher (fewer candidates) and
    /// the cluster only fills up, so a job asking as much or more is not tried again.
    no_room: HashMap<(usize, Option<String>, bool), Milli>,
    /// Per (queue, [`shape_hash`]): a job of that shape left waiting by
    /// [`Pass::consider`], the pass's [`Progress`] after it, and why it waits. A job of the same
    /// shape in the same queue considered at that same progress meets the same cluster, the
    /// same victims and the same blocked heads, so it waits for the same reason: a long queue of
    /// like jobs is decided once per change, not once per job.
    waiting: HashMap<(usize, u64), (usize, Progress, Shortfall)>,
    /// Whether `waiting` is used.
    like_jobs_once: bool,
    /// Whether `reasons` are kept (for the standings).
    standings: bool,
}

/// How far a pass has changed the cluster: jobs admitted, jobs preempted, blocked heads, and
/// whether borrowing is allowed. Every change a job's decision can see moves one of these.
type Progress = (usize, usize, usize, bool);

/// A hash of what a job's decision depends on besides the cluster (its queue aside): everything
/// but its name, age and state. Equal hashes are checked with [`same_shape`].
fn shape_hash(job: &JobInfo) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        &job.gpu_type,
        job.workers,
        job.share,
        job.class_value,
        job.priority,
        job.quota_override_percent,
    )
        .hash(&mut h);
    (&job.reservation, job.expected_seconds, job.grace_seconds).hash(&mut h);
    h.finish()
}

/// Whether two jobs ask for the same thing the same way (see [`shape_hash`]).
fn same_shape(a: &JobInfo, b: &JobInfo) -> bool {
    a.gpu_type == b.gpu_type
        && a.workers == b.workers
        && a.share == b.share
        && a.class_value == b.class_value
        && a.priority == b.priority
        && a.quota_override_percent == b.quota_override_percent
        && a.reservation == b.reservation
        && a.expected_seconds == b.expected_seconds
        && a.grace_seconds == b.grace_seconds
        && a.node_selector == b.node_selector
        && a.tolerations == b.tolerations
        && a.live.is_empty()
        && b.live.is_empty()
}

impl Pass<'_> {
    /// Records why `jobs[ji]` waits, when the cycle gives standings.
    fn note(&mut self, ji: usize, why: Shortfall) {
        if self.standings {
            self.reasons.insert(ji, why);
        }
    }

    fn progress(&self, out: &Cycle, borrow: bool) -> Progress {
        (
            out.admitted.len(),
            self.victims_now.len(),
            self.heads.len(),
            borrow,
        )
    }
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

    /// In a queue that preempts by priority, a job ahead of `jobs[ji]` left waiting in this
    /// cycle that, were `jobs[ji]` admitted with `fit`, would preempt it next cycle (with the
    /// queue's other lower-priority jobs), or a job of the queue admitted before it in this
    /// cycle that it would leave no room beside: admitting it now would only start a job to
    /// stop one. The first [`PREEMPTION_LOOKBACK`] such jobs are checked, each as the next
    /// cycle would: its victims chosen, then allowed only when it would neither borrow what a
    /// lender needs nor delay a blocked head.
    fn preempted_at_once(
        &mut self,
        state: &mut State,
        qi: usize,
        ji: usize,
        fit: &Fit,
    ) -> Option<usize> {
        let (jobs, queues, now) = (self.jobs, self.queues, self.now);
        let queue = &queues[qi];
        if !queue.preempt_lower_priority || !self.blocked.contains_key(&qi) {
            return None;
        }
        let job = &jobs[ji];
        let ahead: Vec<usize> = self
            .pending
            .get(&qi)?
            .iter()
            .copied()
            .take_while(|&h| h != ji)
            .filter(|h| !self.admitted.contains(h) && job.ranks_below(&jobs[*h]))
            .take(PREEMPTION_LOOKBACK)
            .collect();
        if ahead.is_empty() {
            return None;
        }
        // Admitted on `state` and in every head's picture it would still run in, as
        // `try_admit` would; all taken back before returning.
        let a = state.admit(&queue.name, job, fit, now);
        let end = simulate::release_at(job, &a, false, now);
        let runs_past: Vec<usize> = (0..self.heads.len())
            .filter(|&i| end.is_none_or(|e| e > self.heads[i].eta))
            .collect();
        for &i in &runs_past {
            self.heads[i].then.hold(job, &a);
        }
        let mut found = None;
        for h in ahead {
            let head = &jobs[h];
            let mut candidates = victim_candidates(
                state,
                &self.victims_now,
                &self.running,
                jobs,
                queue,
                head,
                Some(&self.admitted),
            );
            // In its place in line, as the next cycle will list it.
            let at = candidates.partition_point(|c| {
                victim_order(jobs, c, &(ji, &a, false)) == std::cmp::Ordering::Less
            });
            candidates.insert(at, (ji, &a, false));
            let Some(chosen) = choose_victims(state, &candidates, jobs, queue, head) else {
                continue;
            };
            let hit = chosen
                .iter()
                .any(|v| v.0 == ji || (!v.2 && self.admitted.contains(&v.0)))
                && victims_allowed(
                    state,
                    &mut self.heads,
                    &chosen,
                    (&self.pending, &self.admitted),
                    jobs,
                    queues,
                    qi,
                    h,
                    now,
                );
            for (vi, va, _) in chosen {
                state.hold(&jobs[vi], va);
            }
            if hit {
                found = Some(h);
                break;
            }
        }
        for &i in &runs_past {
            self.heads[i].then.unhold(job, &a);
        }
        state.unhold(job, &a);
        found
    }

    /// Admits `jobs[ji]` of `queues[qi]` with `fit` unless it would borrow what a lender
    /// needs, delay a blocked head, or be preempted at once by a job ahead of it.
    fn try_admit(
        &mut self,
        state: &mut State,
        out: &mut Cycle,
        ji: usize,
        qi: usize,
        fit: &Fit,
    ) -> Option<Step> {
        let (jobs, queues, now) = (self.jobs, self.queues, self.now);
        let job = &jobs[ji];
        let queue = &queues[qi];
        if fit.borrowed > 0
            && let Some(lender) = self.lender_needing(state, qi, &fit.entry, job.demand())
        {
            self.note(
                ji,
                Shortfall::LenderNeeds {
                    queue: queues[lender].name.clone(),
                },
            );
            self.blocked.entry(qi).or_insert(ji);
            return None;
        }
        if let Some(h) = delays(&mut self.heads, jobs, queues, &queue.name, job, fit, now) {
            self.note(
                ji,
                Shortfall::WouldDelay {
                    head: jobs[h].key.clone(),
                },
            );
            self.blocked.entry(qi).or_insert(ji);
            return None;
        }
        if let Some(h) = self.preempted_at_once(state, qi, ji, fit) {
            self.note(
                ji,
                Shortfall::PreemptedAtOnce {
                    by: jobs[h].key.clone(),
                },
            );
            return None;
        }
        let a = state.admit(&queue.name, job, fit, now);
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
            self.note(
                ji,
                Shortfall::Behind {
                    head: jobs[head].key.clone(),
                },
            );
            return None;
        }
        let shape = (qi, shape_hash(job));
        if self.like_jobs_once
            && let Some((like, at, short)) = self.waiting.get(&shape)
            && *at == self.progress(out, borrow)
            && same_shape(&jobs[*like], job)
            && self.blocked.contains_key(&qi)
        {
            if self.standings {
                self.reasons.insert(ji, short.clone());
            }
            return None;
        }
        match state.fit_with(queue, job, borrow) {
            Ok(None) => Some(Step::Deferred),
            Ok(Some(fit)) => self.try_admit(state, out, ji, qi, &fit),
            // Beyond its nominal, a job could only borrow: like one that fits only by
            // borrowing, it waits for the second pass, so whatever it might preempt is weighed
            // against every blocked head the first pass found (a preemption made before a
            // later head is known could be undone by the next cycle).
            Err(_)
                if !borrow
                    && !state.options(queue, job).is_ok_and(|o| {
                        o.into_iter()
                            .any(|(e, _)| state.ledger.within_nominal(&queue.name, e, job.demand()))
                    }) =>
            {
                Some(Step::Deferred)
            }
            Err(short) => {
                let short = self.preempt_for(state, out, qi, ji).unwrap_or(short);
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
                // A preemption changed what the next job meets (it waits for the victims).
                if !matches!(short, Shortfall::Preempting { .. }) {
                    let at = self.progress(out, borrow);
                    self.waiting.insert(shape, (ji, at, short.clone()));
                }
                self.note(ji, short);
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
    heads: &mut [HeadReservation],
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
        // Tried in place on the head's picture of the cluster, then taken back.
        let a = h.then.admit(queue, job, fit, now);
        let delayed = h.then.fit(&queues[h.queue], &jobs[h.job]).is_err();
        h.then.unhold(job, &a);
        if delayed {
            return Some(h.job);
        }
    }
    None
}

/// The fewest, first-listed `candidates` whose leaving makes room for `job`: taken off
/// `state` one by one until the job fits, then every one it can do without given back. On
/// `Some`, the victims are off `state` (the caller puts them back); on `None`, `state` is as
/// it was.
fn choose_victims<'a>(
    state: &mut State,
    candidates: &[(usize, &'a JobAdmission, bool)],
    jobs: &[JobInfo],
    queue: &QueueInfo,
    job: &JobInfo,
) -> Option<Vec<(usize, &'a JobAdmission, bool)>> {
    // Bound first: if all of them together are not enough, none of this helps.
    for (vi, a, _) in candidates {
        state.unhold(&jobs[*vi], a);
    }
    let possible = state.fit(queue, job).is_ok();
    for (vi, a, _) in candidates {
        state.hold(&jobs[*vi], a);
    }
    if !possible {
        return None;
    }
    let mut chosen: Vec<(usize, &JobAdmission, bool)> = Vec::new();
    let mut fits = false;
    for &c in candidates {
        // A reclaim victim only while its queue still borrows that entry.
        if c.2 && !state.ledger.borrowing(&c.1.queue, &c.1.gpu_type) {
            continue;
        }
        state.unhold(&jobs[c.0], c.1);
        chosen.push(c);
        if state.fit(queue, job).is_ok() {
            fits = true;
            break;
        }
    }
    if !fits {
        for (vi, a, _) in &chosen {
            state.hold(&jobs[*vi], a);
        }
        return None;
    }
    // Fewest: give back, last chosen first, every victim the job can do without.
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let (vi, a, _) = chosen[i];
        state.hold(&jobs[vi], a);
        if state.fit(queue, job).is_ok() {
            chosen.remove(i);
        } else {
            state.unhold(&jobs[vi], a);
        }
    }
    Some(chosen)
}

/// Whether `job`, run in the room `chosen` leave (already off `state`), neither borrows what
/// a lender needs at once nor delays a blocked head.
#[expect(
    clippy::too_many_arguments,
    reason = "the cycle's working state, passed apart"
)]
fn victims_allowed(
    state: &State,
    heads: &mut [HeadReservation],
    chosen: &[(usize, &JobAdmission, bool)],
    (pending, admitted): (&BTreeMap<usize, Vec<usize>>, &BTreeSet<usize>),
    jobs: &[JobInfo],
    queues: &[QueueInfo],
    qi: usize,
    ji: usize,
    now: Timestamp,
) -> bool {
    let (queue, job) = (&queues[qi], &jobs[ji]);
    let Ok(fit) = state.fit(queue, job) else {
        return false;
    };
    if fit.borrowed > 0
        && lender_needing(
            queues,
            jobs,
            pending,
            admitted,
            state,
            qi,
            &fit.entry,
            job.demand(),
        )
        .is_some()
    {
        return false;
    }
    let end = job
        .expected_seconds
        .and_then(|s| now.checked_add(jiff::SignedDuration::from_secs(s)).ok());
    for h in heads {
        let still_there: Vec<_> = chosen
            .iter()
            .filter(|(vi, a, _)| {
                simulate::release_at(&jobs[*vi], a, false, now).is_none_or(|t| t > h.eta)
            })
            .collect();
        for (vi, a, _) in &still_there {
            h.then.unhold(&jobs[*vi], a);
        }
        let runs_past = end.is_none_or(|e| e > h.eta);
        let a = runs_past.then(|| h.then.admit(&queue.name, job, &fit, now));
        let delayed = h.then.fit(&queues[h.queue], &jobs[h.job]).is_err();
        if let Some(a) = a {
            h.then.unhold(job, &a);
        }
        for (vi, a, _) in &still_there {
            h.then.hold(&jobs[*vi], a);
        }
        if delayed {
            return false;
        }
    }
    true
}

/// Jobs preempted earlier (in an earlier cycle or for a job ahead) release what they hold
/// soon: when that is enough for `job`, it waits for them rather than preempt more.
fn waiting_for_preempted(
    state: &mut State,
    victims_now: &BTreeSet<usize>,
    running: &[(usize, JobAdmission)],
    jobs: &[JobInfo],
    queue: &QueueInfo,
    job: &JobInfo,
) -> Option<Shortfall> {
    let going: Vec<&(usize, JobAdmission)> = running
        .iter()
        .filter(|(i, _)| {
            victims_now.contains(i) || matches!(jobs[*i].state, JobState::Preempting(..))
        })
        .collect();
    if !going.is_empty() {
        // Tried in place, then taken back: they hold what they hold until they are gone.
        for (i, a) in &going {
            state.unhold(&jobs[*i], a);
        }
        let enough = state.fit(queue, job).is_ok();
        for (i, a) in &going {
            state.hold(&jobs[*i], a);
        }
        if enough {
            return Some(Shortfall::WaitingForPreempted { jobs: going.len() });
        }
    }
    None
}

/// Who `job` of `queue` may preempt: lower-priority jobs of its queue (with
/// `withinQueue: LowerPriority`), and jobs of cohort queues that borrow an entry the job could
/// have within its own nominal (with `reclaimWithinCohort`). Lowest priority first, then
/// newest. Jobs admitted in this cycle are not preempted in it (those in `next_cycle` are
/// counted as the next cycle will see them).
fn victim_candidates<'a>(
    state: &State,
    victims_now: &BTreeSet<usize>,
    running: &'a [(usize, JobAdmission)],
    jobs: &[JobInfo],
    queue: &QueueInfo,
    job: &JobInfo,
    next_cycle: Option<&BTreeSet<usize>>,
) -> Vec<(usize, &'a JobAdmission, bool)> {
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
    let mut candidates: Vec<(usize, &JobAdmission, bool)> = running
        .iter()
        // Jobs admitted in this cycle are not preempted in it.
        .filter(|(i, _)| {
            !victims_now.contains(i)
                && (matches!(jobs[*i].state, JobState::Admitted(_))
                    || next_cycle.is_some_and(|n| n.contains(i)))
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
    candidates.sort_by(|a, b| victim_order(jobs, a, b));
    candidates
}

/// The order victims are taken in: lowest priority first, then the most recently admitted,
/// then the newest.
fn victim_order(
    jobs: &[JobInfo],
    a: &(usize, &JobAdmission, bool),
    b: &(usize, &JobAdmission, bool),
) -> std::cmp::Ordering {
    let (va, vb) = (&jobs[a.0], &jobs[b.0]);
    (va.class_value, va.priority)
        .cmp(&(vb.class_value, vb.priority))
        .then_with(|| b.1.admitted_at.0.cmp(&a.1.admitted_at.0))
        .then_with(|| vb.created.cmp(&va.created))
        .then_with(|| va.key.cmp(&vb.key))
}

impl Pass<'_> {
    /// Tries to make room for `jobs[ji]` of `queues[qi]` by preemption; the shortfall to
    /// report when it does (or when jobs preempted earlier will make room, or when a job
    /// ahead would preempt it at once in the room made), `None` when preemption cannot help.
    fn preempt_for(
        &mut self,
        state: &mut State,
        out: &mut Cycle,
        qi: usize,
        ji: usize,
    ) -> Option<Shortfall> {
        let (jobs, queues, now) = (self.jobs, self.queues, self.now);
        let queue = &queues[qi];
        let job = &jobs[ji];
        if let Some(wait) =
            waiting_for_preempted(state, &self.victims_now, &self.running, jobs, queue, job)
        {
            return Some(wait);
        }
        if !queue.preempt_lower_priority && !queue.reclaim_within_cohort {
            return None;
        }
        let memo = (
            qi,
            job.gpu_type.clone(),
            matches!(job.share, Share::Fraction(_)),
        );
        if self.no_room.get(&memo).is_some_and(|&d| job.demand() >= d) {
            return None;
        }
        let candidates = victim_candidates(
            state,
            &self.victims_now,
            &self.running,
            jobs,
            queue,
            job,
            None,
        );
        if candidates.is_empty() {
            return None;
        }
        // Everything below is tried in place on `state` and taken back before returning: the
        // victims stay charged until their workers are gone.
        let Some(chosen) = choose_victims(state, &candidates, jobs, queue, job) else {
            let d = self.no_room.entry(memo).or_insert(Milli::MAX);
            *d = (*d).min(job.demand());
            return None;
        };
        let allowed = victims_allowed(
            state,
            &mut self.heads,
            &chosen,
            (&self.pending, &self.admitted),
            jobs,
            queues,
            qi,
            ji,
            now,
        );
        // Owned, so the pass can be asked about the room they leave.
        let chosen: Vec<(usize, JobAdmission, bool)> = chosen
            .into_iter()
            .map(|(vi, a, reclaim)| (vi, a.clone(), reclaim))
            .collect();
        // A job ahead that would preempt this one at once in the room made: preempting for
        // it would only free room for that job, a decision of its own. Checked with the
        // victims counted as gone, as they will be.
        let ahead = if allowed {
            self.preempted_in_room(state, qi, ji, &chosen)
        } else {
            None
        };
        for (vi, a, _) in &chosen {
            state.hold(&jobs[*vi], a);
        }
        if let Some(h) = ahead {
            return Some(Shortfall::PreemptedAtOnce {
                by: jobs[h].key.clone(),
            });
        }
        if !allowed {
            return None;
        }
        let mut victims = Vec::new();
        for (vi, _, reclaim) in chosen {
            self.victims_now.insert(vi);
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

    /// A job ahead of `jobs[ji]` that would preempt it at once were it admitted in the room
    /// `chosen` leave (already off `state`; counted as gone here, as they will be).
    fn preempted_in_room(
        &mut self,
        state: &mut State,
        qi: usize,
        ji: usize,
        chosen: &[(usize, JobAdmission, bool)],
    ) -> Option<usize> {
        let (jobs, now) = (self.jobs, self.now);
        self.victims_now.extend(chosen.iter().map(|v| v.0));
        // Gone from every head's picture they would still have been in: (head, victim).
        let gone: Vec<(usize, usize)> = (0..self.heads.len())
            .flat_map(|h| (0..chosen.len()).map(move |c| (h, c)))
            .filter(|&(h, c)| {
                let (vi, a, _) = &chosen[c];
                simulate::release_at(&jobs[*vi], a, false, now)
                    .is_none_or(|t| t > self.heads[h].eta)
            })
            .collect();
        for &(h, c) in &gone {
            let (vi, a, _) = &chosen[c];
            self.heads[h].then.unhold(&jobs[*vi], a);
        }
        let ahead = state
            .fit(&self.queues[qi], &jobs[ji])
            .ok()
            .and_then(|fit| self.preempted_at_once(state, qi, ji, &fit));
        for &(h, c) in &gone {
            let (vi, a, _) = &chosen[c];
            self.heads[h].then.hold(&jobs[*vi], a);
        }
        for (vi, _, _) in chosen {
            self.victims_now.remove(vi);
        }
        ahead
    }
}

impl State {
    /// The quota entries `job` could be charged to in `queue`.
    fn fit_entries(&self, queue: &QueueInfo, job: &JobInfo) -> Vec<String> {
        self.options(queue, job)
            .map(|o| o.into_iter().map(|(e, _)| e.to_owned()).collect())
            .unwrap_or_default()
    }
}

fn summarize(
    out: &mut Cycle,
    state: &State,
    world: &QueueWorld,
    queue_of: &[usize],
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
        if let Some(s) = out.queues.get_mut(&world.queues[queue_of[ji]].name) {
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
