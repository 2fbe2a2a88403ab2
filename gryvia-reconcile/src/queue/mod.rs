//! The native queue scheduler: one pure admission cycle over every pending GryviaAIJob of
//! every GryviaQueue.
//!
//! A cycle takes the queues, the jobs of the namespaces they cover and the GPU nodes, and
//! decides at `now`, for the whole pending set at once (not one reconcile per job racing the
//! others):
//!
//! - which jobs are **admitted**: their quota reserved (nominal, then borrowed from the
//!   cohort within `borrowingLimit` and the lenders' `lendingLimit`) and every worker placed
//!   on a node of one GPU product with room, all or none (a gang is never half-placed);
//! - which admitted jobs are **preempted** for a higher-priority job of the same queue
//!   (`preemption.withinQueue: LowerPriority`) or for the cohort queue that lent the GPUs
//!   (`preemption.reclaimWithinCohort`): the fewest, newest victims;
//! - which preempted jobs are **released** (their workers are gone) and queue again;
//! - for every job still pending: its queue, its position, why in numbers and when it is
//!   expected to start; for every queue: pending, admitted, GPUs in use, borrowed and lent.
//!
//! Order: within a queue, the job's GryviaPriority class value, then `spec.priority`, then
//! creation time. `StrictFIFO` never lets a later job of the queue pass a blocked head;
//! `BestEffortFIFO` admits later jobs that fit, but (backfill) only when they do not delay the
//! expected start of any blocked head.
//!
//! State lives in the objects only (`status.admission` and `status.preemption` of each job),
//! so a cycle after an operator restart decides from what the last one wrote.
//!
//! Units: quota and requests are counted in thousandths of a GPU ([`Milli`]), so fractional
//! requests (1/2, 1/4, 1/8) add up exactly.

mod cycle;
mod explain;
mod ledger;
mod nodes;
mod observe;
mod simulate;
mod waiting;
mod write;

use std::collections::BTreeMap;
use std::fmt;

use gryvia_types::scheduling::{GryviaQueue, PreemptWithin, QueueingStrategy};
use gryvia_types::{GryviaAIJob, JobAdmission, PreemptionNotice, QueueStanding};
use serde::{Deserialize, Serialize};

pub use cycle::{
    Admit, Cycle, PREEMPTION_LOOKBACK, Preempt, QueueSummary, cycle, cycle_deciding_every_job,
    decide, expected_start,
};
pub use explain::Shortfall;
pub use nodes::{
    JobToleration, NodeCapacity, NodeTaint, Slot, Unavailable, Used, pod_gpu_resources,
};
pub use observe::{WhatIf, class_value, what_if, world_of};
pub use waiting::{Waiting, waiting};
pub use write::{
    ETA_TOLERANCE_SECONDS, JobEvent, JobWrite, JobWrites, QUEUE_READY, QueueFields,
    STANDING_WRITES_PER_CYCLE, job_writes, job_writes_within, notice_annotation, queue_status,
    same_standing, within_budget,
};

use crate::Timestamp;

/// Thousandths of a GPU.
pub type Milli = i64;

/// One whole GPU in [`Milli`].
pub const ONE_GPU: Milli = 1000;

/// A quota entry that matches any GPU product.
pub const ANY_PRODUCT: &str = "*";

/// GPUs as text: `8`, `0.5`, `2.25`.
pub fn gpus_text(m: Milli) -> String {
    if m % ONE_GPU == 0 {
        (m / ONE_GPU).to_string()
    } else {
        let s = format!("{:.3}", m as f64 / ONE_GPU as f64);
        s.trim_end_matches('0').to_owned()
    }
}

/// GPUs as a number for a status field.
pub fn gpus_number(m: Milli) -> f64 {
    m as f64 / ONE_GPU as f64
}

/// Part of one GPU a worker may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Fraction {
    /// 1/2.
    Half,
    /// 1/4.
    Quarter,
    /// 1/8.
    Eighth,
}

impl Fraction {
    /// The fraction of `spec.gpuFraction` (`None` for any other value).
    pub fn of(value: f64) -> Option<Self> {
        [Self::Half, Self::Quarter, Self::Eighth]
            .into_iter()
            .find(|f| (f.value() - value).abs() < 1e-9)
    }

    /// The fraction as a number.
    pub fn value(self) -> f64 {
        1.0 / f64::from(self.denominator())
    }

    /// 2, 4 or 8.
    pub fn denominator(self) -> u32 {
        match self {
            Self::Half => 2,
            Self::Quarter => 4,
            Self::Eighth => 8,
        }
    }

    /// In thousandths of a GPU.
    pub fn milli(self) -> Milli {
        ONE_GPU / Milli::from(self.denominator())
    }
}

/// What one worker asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Share {
    /// Whole GPUs (0: a job without GPUs, which the queue admits without quota).
    Gpus(u32),
    /// Part of one GPU.
    Fraction(Fraction),
}

impl Share {
    /// In thousandths of a GPU.
    pub fn milli(self) -> Milli {
        match self {
            Self::Gpus(n) => Milli::from(n) * ONE_GPU,
            Self::Fraction(f) => f.milli(),
        }
    }

    /// `8 GPUs`, `1/2 GPU`.
    pub fn describe(self) -> String {
        match self {
            Self::Gpus(1) => "1 GPU".to_owned(),
            Self::Gpus(n) => format!("{n} GPUs"),
            Self::Fraction(f) => format!("1/{} GPU", f.denominator()),
        }
    }
}

/// One quota entry of a queue (`spec.resources[]`), in thousandths of a GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaEntry {
    /// GPU product, or `*` for any.
    pub gpu_type: String,
    /// Guaranteed to the queue.
    pub nominal: Milli,
    /// At most this much more may be borrowed from the cohort (no limit when absent).
    pub borrowing_limit: Option<Milli>,
    /// At most this much of `nominal` may be lent to the cohort (all of it when absent).
    pub lending_limit: Option<Milli>,
}

impl QuotaEntry {
    /// What the queue may lend.
    pub fn lendable(&self) -> Milli {
        self.lending_limit.unwrap_or(self.nominal).min(self.nominal)
    }

    /// What the cohort can never take: `nominal` less what may be lent.
    pub fn guaranteed(&self) -> Milli {
        self.nominal - self.lendable()
    }
}

/// A GryviaQueue as the cycle sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// The namespaces whose jobs it holds.
    pub namespaces: Vec<String>,
    /// Queues of one cohort lend each other unused quota.
    pub cohort: Option<String>,
    /// Quota per GPU product, in spec order.
    pub resources: Vec<QuotaEntry>,
    /// StrictFIFO or BestEffortFIFO.
    pub strategy: QueueingStrategy,
    /// `preemption.withinQueue: LowerPriority`.
    pub preempt_lower_priority: bool,
    /// `preemption.reclaimWithinCohort`.
    pub reclaim_within_cohort: bool,
    /// `gangAdmission`: check placement for single-worker jobs too (multi-worker jobs are
    /// always checked).
    pub gang_admission: bool,
}

impl QueueInfo {
    /// Reads a GryviaQueue.
    pub fn of(q: &GryviaQueue) -> Self {
        let milli = |n: i32| Milli::from(n.max(0)) * ONE_GPU;
        Self {
            name: q.metadata.name.clone().unwrap_or_default(),
            namespaces: q.spec.namespaces.clone(),
            cohort: q.spec.cohort.clone().filter(|c| !c.is_empty()),
            resources: q
                .spec
                .resources
                .iter()
                .map(|r| QuotaEntry {
                    gpu_type: r.gpu_type.clone(),
                    nominal: milli(r.nominal),
                    borrowing_limit: r.borrowing_limit.map(milli),
                    lending_limit: r.lending_limit.map(milli),
                })
                .collect(),
            strategy: q.spec.queueing_strategy,
            preempt_lower_priority: q.spec.preemption.within_queue == PreemptWithin::LowerPriority,
            reclaim_within_cohort: q.spec.preemption.reclaim_within_cohort,
            gang_admission: q.spec.gang_admission,
        }
    }

    /// The quota entry a request for `product` is charged to: its own entry, else `*`.
    pub fn entry_for(&self, product: &str) -> Option<&QuotaEntry> {
        self.resources
            .iter()
            .find(|r| r.gpu_type == product)
            .or_else(|| self.resources.iter().find(|r| r.gpu_type == ANY_PRODUCT))
    }
}

/// A job's namespace and name; in JSON the text `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl JobKey {
    /// A key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl From<JobKey> for String {
    fn from(k: JobKey) -> Self {
        k.to_string()
    }
}

impl TryFrom<String> for JobKey {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(Self::new(ns, name)),
            _ => Err(format!("{s:?} is not namespace/name")),
        }
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a job stands with the queue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting for admission.
    Pending,
    /// Admitted: charged to its queue, its workers placed.
    Admitted(JobAdmission),
    /// Admitted and told to stop: still charged until its workers are gone.
    Preempting(JobAdmission, PreemptionNotice),
}

/// A job as the cycle sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobInfo {
    /// Namespace and name.
    pub key: JobKey,
    /// When it was created.
    pub created: Timestamp,
    /// Value of its GryviaPriority class (0 without one).
    pub class_value: i32,
    /// `spec.priority`, 0 to 100.
    pub priority: i32,
    /// `spec.gpuType`: the product its workers need (any when absent).
    pub gpu_type: Option<String>,
    /// `spec.replicas`.
    pub workers: u32,
    /// What each worker asks for.
    pub share: Share,
    /// The GryviaReservation whose nodes it may use (its `gryvia.io/reservation` annotation).
    pub reservation: Option<String>,
    /// How long it is expected to run (`activeDeadlineSeconds`, or its template's history).
    pub expected_seconds: Option<i64>,
    /// `spec.preemptionGracePeriodSeconds`.
    pub grace_seconds: i64,
    /// Its state.
    pub state: JobState,
    /// Workers alive (not finished) per node: the pods of its current run.
    pub live: BTreeMap<String, u32>,
    /// `spec.nodeSelector`: labels its nodes must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// `spec.tolerations`: taints its nodes may have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<JobToleration>,
    /// Its tier's `sla.maxQueueSeconds`: waiting longer, it goes ahead of every job of its
    /// tier within their SLA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla_seconds: Option<i64>,
    /// Its tier's `quotaOverride.percent`: when its queue's quota is used up, it may still be
    /// admitted over the quota entry's nominal by that share of it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quota_override_percent: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl JobInfo {
    /// Reads an unfinished GryviaAIJob (`None` for a finished one, which holds nothing).
    /// `class_value` is the value of its GryviaPriority class; `live` its live workers per
    /// node.
    pub fn of(job: &GryviaAIJob, class_value: i32, live: BTreeMap<String, u32>) -> Option<Self> {
        let status = job.status.as_ref();
        if status
            .and_then(|s| s.phase)
            .is_some_and(gryvia_types::JobPhase::is_finished)
        {
            return None;
        }
        let share = match job.spec.gpu_fraction.and_then(Fraction::of) {
            Some(f) => Share::Fraction(f),
            None => Share::Gpus(u32::try_from(job.spec.gpus).unwrap_or(0)),
        };
        let state = match status.map(|s| (&s.admission, &s.preemption)) {
            Some((Some(a), Some(p))) => JobState::Preempting(a.clone(), p.clone()),
            Some((Some(a), None)) => JobState::Admitted(a.clone()),
            Some((None, _)) | None => JobState::Pending,
        };
        Some(Self {
            key: JobKey::new(
                job.metadata.namespace.clone().unwrap_or_default(),
                job.metadata.name.clone().unwrap_or_default(),
            ),
            created: job
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            class_value,
            priority: job.spec.priority,
            gpu_type: job.spec.gpu_type.clone(),
            workers: u32::try_from(job.spec.replicas).unwrap_or(1).max(1),
            share,
            reservation: job
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(gryvia_types::labels::RESERVATION))
                .cloned(),
            expected_seconds: job.spec.active_deadline_seconds,
            grace_seconds: job.spec.preemption_grace_period_seconds,
            state,
            live,
            node_selector: job.spec.node_selector.clone(),
            tolerations: job.spec.tolerations.iter().map(JobToleration::of).collect(),
            sla_seconds: None,
            quota_override_percent: 0,
        })
    }

    /// Whether it waits for admission past its tier's SLA at `now`.
    pub fn past_sla(&self, now: Timestamp) -> bool {
        matches!(self.state, JobState::Pending)
            && self
                .sla_seconds
                .is_some_and(|s| (now - self.created).get_seconds() > s)
    }

    /// Quota the whole job needs.
    pub fn demand(&self) -> Milli {
        Milli::from(self.workers) * self.share.milli()
    }

    /// The admission it holds, if any.
    pub fn admission(&self) -> Option<&JobAdmission> {
        match &self.state {
            JobState::Pending => None,
            JobState::Admitted(a) | JobState::Preempting(a, _) => Some(a),
        }
    }

    /// When it is expected to end, when admitted and its run time is known.
    pub fn expected_end(&self) -> Option<Timestamp> {
        let a = self.admission()?;
        let secs = self.expected_seconds?;
        a.admitted_at
            .0
            .checked_add(jiff::SignedDuration::from_secs(secs))
            .ok()
    }

    /// Priority order at `now`: class value, then jobs waiting past their tier's SLA, then
    /// `spec.priority` (higher first), then older first, then by name.
    pub fn order_key(
        &self,
        now: Timestamp,
    ) -> (
        std::cmp::Reverse<i32>,
        bool,
        std::cmp::Reverse<i32>,
        Timestamp,
        &JobKey,
    ) {
        (
            std::cmp::Reverse(self.class_value),
            !self.past_sla(now),
            std::cmp::Reverse(self.priority),
            self.created,
            &self.key,
        )
    }

    /// Whether `self` ranks strictly below `other` by priority (class value, then
    /// `spec.priority`; age does not make a job preemptible).
    pub fn ranks_below(&self, other: &Self) -> bool {
        (self.class_value, self.priority) < (other.class_value, other.priority)
    }
}

/// Everything one cycle decides on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueWorld {
    /// Every GryviaQueue.
    pub queues: Vec<QueueInfo>,
    /// Every unfinished job of the namespaces the queues cover, and every job that still
    /// holds an admission.
    pub jobs: Vec<JobInfo>,
    /// Every GPU node.
    pub nodes: Vec<NodeCapacity>,
}

/// A job's standing as written to its status.
pub fn standing(
    queue: &str,
    position: usize,
    reason: String,
    eta: Option<Timestamp>,
) -> QueueStanding {
    QueueStanding {
        queue: queue.to_owned(),
        position: i32::try_from(position).unwrap_or(i32::MAX),
        reason,
        expected_start: eta.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
    }
}
