//! Reservations: which nodes a GryviaReservation holds and when, as pure functions.
//!
//! While its window is open, a reservation holds whole nodes of its GPU product until its GPU
//! count is covered: each is labelled and tainted `gryvia.io/reserved=<name>:NoSchedule`, so
//! only jobs annotated `gryvia.io/reservation: <name>` (which the mutating webhook gives the
//! toleration and node selector) land there. When the window closes, or the reservation is
//! deleted, the label and taint go. Windows are immediate (`startTime`..`endTime`) or
//! recurring (days of the week, a local opening time and a length in a time zone; a window may
//! cross midnight), optionally bounded by `startTime` and `endTime`.
//!
//! Beyond that: a non-exclusive reservation (`guarantees.exclusive: false`) only labels its
//! nodes, so others may use idle reserved GPUs; whenever the owner's pods wait for a node in an
//! open window, others' GPU pods on the held nodes are evicted, newest first, until the waiting
//! GPUs fit ([`give_back`]). `schedule.leadMinutes` holds the nodes before each window opens.
//! `guarantees.preemptible` acts at admission (`crate::admission::preemptible_for`).
//!
//! Status lists the held nodes, the reserved GPUs no pod uses now (`idleGpus`), and accumulates
//! the reserved GPU time no pod used (`idleGpuSeconds`), sampled at every reconcile (at least
//! every 30 s while active), and the window's availability against `guarantees.sla`
//! (`status.availability`, condition `SLAMet`).

use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    GryviaReservation, GryviaReservationStatus, Recurrence, ReservationPhase, ScheduleType,
    Weekday, labels,
};
use jiff::civil::Weekday as CivilWeekday;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::facts::PodView;
use crate::{EventType, NodeOp, Plan, Taint, TaintEffect, Timestamp, facts};

/// How often an active reservation is re-read to account idle GPU time.
pub const RESYNC: Duration = Duration::from_secs(30);

/// Where a reservation's schedule stands at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// Open from `start` to `end`.
    Open {
        /// Opening.
        start: Timestamp,
        /// Closing.
        end: Timestamp,
    },
    /// Closed; the next window opens at `start`.
    Next {
        /// Opening.
        start: Timestamp,
        /// Closing.
        end: Timestamp,
    },
    /// No window will open again.
    Over,
}

/// Why a reservation's schedule cannot be read; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// `spec.schedule.startTime` or `endTime` is not a time.
    #[error("{field}: {text:?} is not an RFC 3339 time: {reason}")]
    Time {
        /// The field.
        field: &'static str,
        /// Its text.
        text: String,
        /// What the parser said.
        reason: String,
    },
    /// `spec.schedule.recurrence.timeZone` names no IANA time zone.
    #[error("spec.schedule.recurrence.timeZone: {0:?} is not an IANA time zone")]
    TimeZone(String),
    /// `spec.schedule.recurrence.startTime` is not `HH:MM`.
    #[error("spec.schedule.recurrence.startTime: {0:?} is not HH:MM")]
    StartTime(String),
    /// No day of the recurrence opens a window within a week.
    #[error("spec.schedule.recurrence: no window opens within a week")]
    NoWindow,
    /// An immediate reservation has no `spec.schedule.endTime`.
    #[error("spec.schedule.endTime: required for an immediate reservation")]
    NoEndTime,
    /// A recurring reservation has no `spec.schedule.recurrence`.
    #[error("spec.schedule.recurrence: required for a recurring reservation")]
    NoRecurrence,
}

fn parse_time(field: &'static str, text: &str) -> Result<Timestamp, ScheduleError> {
    text.parse::<Timestamp>().map_err(|e| ScheduleError::Time {
        field,
        text: text.to_owned(),
        reason: e.to_string(),
    })
}

fn civil_weekday(d: Weekday) -> CivilWeekday {
    match d {
        Weekday::Mon => CivilWeekday::Monday,
        Weekday::Tue => CivilWeekday::Tuesday,
        Weekday::Wed => CivilWeekday::Wednesday,
        Weekday::Thu => CivilWeekday::Thursday,
        Weekday::Fri => CivilWeekday::Friday,
        Weekday::Sat => CivilWeekday::Saturday,
        Weekday::Sun => CivilWeekday::Sunday,
    }
}

/// The recurring windows around `now`: the one that contains it, or the next to open.
fn recurring(
    r: &Recurrence,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp, bool), ScheduleError> {
    let tz =
        TimeZone::get(&r.time_zone).map_err(|_| ScheduleError::TimeZone(r.time_zone.clone()))?;
    let (h, m) = r
        .start_time
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<i8>().ok()?, m.parse::<i8>().ok()?)))
        .ok_or_else(|| ScheduleError::StartTime(r.start_time.clone()))?;
    let days: Vec<CivilWeekday> = r.days_of_week.iter().map(|d| civil_weekday(*d)).collect();
    let length = jiff::SignedDuration::from_mins(i64::from(r.duration_minutes));
    let today = now.to_zoned(tz.clone()).date();
    let mut next: Option<(Timestamp, Timestamp)> = None;
    // A window is at most a week long, so one that contains `now` opened in the last 8 days.
    for offset in -8i32..=8 {
        let Ok(day) = today.checked_add(jiff::Span::new().days(offset)) else {
            continue;
        };
        if !days.is_empty() && !days.contains(&day.weekday()) {
            continue;
        }
        let Ok(start) = day.at(h, m, 0, 0).to_zoned(tz.clone()) else {
            continue;
        };
        let start = start.timestamp();
        let Ok(end) = start.checked_add(length) else {
            continue;
        };
        if start <= now && now < end {
            return Ok((start, end, true));
        }
        if start > now && next.is_none_or(|(s, _)| start < s) {
            next = Some((start, end));
        }
    }
    next.map(|(s, e)| (s, e, false))
        .ok_or(ScheduleError::NoWindow)
}

/// Where the schedule of `reservation` stands at `now`.
///
/// # Errors
/// A [`ScheduleError`] naming the field when a time or the time zone cannot be read, or a
/// field the schedule's type needs is missing.
pub fn window(reservation: &GryviaReservation, now: Timestamp) -> Result<Window, ScheduleError> {
    let s = &reservation.spec.schedule;
    let lower = s
        .start_time
        .as_deref()
        .map(|t| parse_time("spec.schedule.startTime", t))
        .transpose()?;
    let upper = s
        .end_time
        .as_deref()
        .map(|t| parse_time("spec.schedule.endTime", t))
        .transpose()?;
    if upper.is_some_and(|u| now >= u) {
        return Ok(Window::Over);
    }
    match s.type_ {
        ScheduleType::Immediate => {
            let start = lower
                .or_else(|| {
                    reservation
                        .metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0)
                })
                .unwrap_or(now);
            let end = upper.ok_or(ScheduleError::NoEndTime)?;
            Ok(if now < start {
                Window::Next { start, end }
            } else {
                Window::Open { start, end }
            })
        }
        ScheduleType::Recurring => {
            let r = s.recurrence.as_ref().ok_or(ScheduleError::NoRecurrence)?;
            // Before the lower bound, look from there.
            let from = lower.map_or(now, |l| l.max(now));
            let (mut start, mut end, open) = recurring(r, from)?;
            if let Some(l) = lower {
                start = start.max(l);
            }
            if let Some(u) = upper {
                end = end.min(u);
                if start >= u {
                    return Ok(Window::Over);
                }
            }
            Ok(if open && from == now {
                Window::Open { start, end }
            } else {
                Window::Next { start, end }
            })
        }
    }
}

/// A node as the reservation reconcile sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateNode {
    /// Name.
    pub name: String,
    /// `nvidia.com/gpu.product`.
    pub product: Option<String>,
    /// Allocatable `nvidia.com/gpu`.
    pub gpus: i32,
    /// Value of its `gryvia.io/reserved` label: the reservation holding it.
    pub reserved_by: Option<String>,
    /// Cordoned.
    pub unschedulable: bool,
    /// Quarantined (`gryvia.io/gpu-unhealthy`).
    pub quarantined: bool,
    /// GPUs requested by pods running there.
    pub gpus_in_use: i32,
    /// Value of its `gryvia.io/reserved` taint: the reservation keeping other work off it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tainted_by: Option<String>,
}

/// A GPU pod as the reservation reconcile sees it: one on a node, or one waiting for a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its node (`None`: waiting to be scheduled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// GPUs it asks for.
    pub gpus: i32,
    /// The reservation its job runs in (its `gryvia.io/reservation` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// When it was created.
    pub created: Timestamp,
    /// Being deleted already (its GPUs count as given back).
    #[serde(default)]
    pub terminating: bool,
}

/// What the reservation reconcile knows: the cluster's nodes, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationWorld {
    /// Every node.
    pub nodes: Vec<CandidateNode>,
    /// Every pod that asks for GPUs and is running or waiting for a node (not finished).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<GpuPod>,
}

impl ReservationWorld {
    /// Summarises the cluster's nodes, with the GPUs `pods` hold on each.
    pub fn of<P: PodView>(nodes: &[Node], pods: &[P]) -> Self {
        let in_use = crate::tenancy::gpus_by_node(pods);
        let mut out: Vec<CandidateNode> = nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                CandidateNode {
                    gpus_in_use: in_use.get(&name).copied().unwrap_or(0),
                    product: facts::gpu_product(n).map(str::to_owned),
                    gpus: crate::tenancy::node_gpus(n),
                    reserved_by: facts::reserved_by(n),
                    unschedulable: facts::cordoned(n),
                    quarantined: facts::quarantined_by(n).is_some(),
                    tainted_by: facts::reservation_taint(n),
                    name,
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let pods = pods
            .iter()
            .filter(|p| !facts::finished(*p))
            .filter_map(|p| {
                let gpus = crate::tenancy::pod_gpus(p);
                let meta = p.pod_meta();
                (gpus > 0).then(|| GpuPod {
                    namespace: meta.namespace.clone().unwrap_or_default(),
                    name: meta.name.clone().unwrap_or_default(),
                    node: facts::node_of(p).map(str::to_owned),
                    gpus,
                    reservation: meta
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(labels::RESERVATION))
                        .cloned(),
                    created: meta
                        .creation_timestamp
                        .as_ref()
                        .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
                    terminating: meta.deletion_timestamp.is_some(),
                })
            })
            .collect();
        ReservationWorld { nodes: out, pods }
    }
}

/// The nodes to hold: nodes already held first (so a reservation keeps its nodes), then free
/// schedulable healthy nodes of the product with the fewest GPUs in use, until `gpu_count`
/// is covered.
pub fn choose_nodes(
    name: &str,
    gpu_type: &str,
    gpu_count: i32,
    world: &ReservationWorld,
) -> Vec<String> {
    let mut eligible: Vec<&CandidateNode> = world
        .nodes
        .iter()
        .filter(|n| n.product.as_deref() == Some(gpu_type) && n.gpus > 0)
        .filter(|n| n.reserved_by.as_deref().is_none_or(|r| r == name))
        .filter(|n| !n.quarantined && (!n.unschedulable || n.reserved_by.as_deref() == Some(name)))
        .collect();
    eligible.sort_by_key(|n| {
        (
            n.reserved_by.as_deref() != Some(name),
            n.gpus_in_use,
            n.name.clone(),
        )
    });
    let mut out = Vec::new();
    let mut covered = 0;
    for n in eligible {
        if covered >= gpu_count {
            break;
        }
        covered += n.gpus;
        out.push(n.name.clone());
    }
    out.sort();
    out
}

/// GPUs of the named nodes.
fn gpus_on(world: &ReservationWorld, nodes: &[String]) -> i32 {
    world
        .nodes
        .iter()
        .filter(|n| nodes.contains(&n.name))
        .map(|n| n.gpus)
        .sum()
}

/// GPUs of `nodes` no pod uses.
fn idle_on(world: &ReservationWorld, nodes: &[String]) -> i32 {
    world
        .nodes
        .iter()
        .filter(|n| nodes.contains(&n.name))
        .map(|n| (n.gpus - n.gpus_in_use).max(0))
        .sum()
}

fn hold(plan: &mut Plan<GryviaReservationStatus>, node: &str, name: &str, exclusive: bool) {
    plan.node_ops.push(NodeOp::Label {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
        value: name.to_owned(),
    });
    if exclusive {
        taint(plan, node, name);
    }
}

fn taint(plan: &mut Plan<GryviaReservationStatus>, node: &str, name: &str) {
    plan.node_ops.push(NodeOp::Taint {
        node: node.to_owned(),
        taint: Taint {
            key: labels::RESERVED_TAINT.to_owned(),
            value: name.to_owned(),
            effect: TaintEffect::NoSchedule,
        },
    });
}

fn untaint(plan: &mut Plan<GryviaReservationStatus>, node: &str) {
    plan.node_ops.push(NodeOp::RemoveTaint {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
        effect: TaintEffect::NoSchedule,
    });
}

fn release(plan: &mut Plan<GryviaReservationStatus>, node: &str) {
    untaint(plan, node);
    plan.node_ops.push(NodeOp::RemoveLabel {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
    });
}

/// Whether only the owner's jobs may use the reservation's nodes (`guarantees.exclusive`,
/// true without guarantees).
pub fn exclusive(r: &GryviaReservation) -> bool {
    r.spec.guarantees.as_ref().is_none_or(|g| g.exclusive)
}

/// The pods of others to evict from the `held` nodes so that the owner's pods waiting for a
/// node fit: when the waiting pods ask for more GPUs than the held nodes have idle (pods
/// being deleted already count as gone), others' GPU pods there go, newest first, until they
/// would. Counted in GPUs: a waiting pod of 8 GPUs may still not fit on one node.
pub fn give_back<'a>(name: &str, held: &[String], world: &'a ReservationWorld) -> Vec<&'a GpuPod> {
    let mine = |p: &GpuPod| p.reservation.as_deref() == Some(name);
    let waiting: i32 = world
        .pods
        .iter()
        .filter(|p| mine(p) && p.node.is_none() && !p.terminating)
        .map(|p| p.gpus)
        .sum();
    let on_held = |p: &&GpuPod| p.node.as_ref().is_some_and(|n| held.contains(n));
    let used: i32 = world
        .pods
        .iter()
        .filter(on_held)
        .filter(|p| !p.terminating)
        .map(|p| p.gpus)
        .sum();
    let mut short = waiting - (gpus_on(world, held) - used).max(0);
    let mut others: Vec<&GpuPod> = world
        .pods
        .iter()
        .filter(on_held)
        .filter(|p| !mine(p) && !p.terminating)
        .collect();
    others.sort_by(|a, b| {
        (b.created, &b.namespace, &b.name).cmp(&(a.created, &a.namespace, &a.name))
    });
    let mut out = Vec::new();
    for p in others {
        if short <= 0 {
            break;
        }
        short -= p.gpus;
        out.push(p);
    }
    out
}

/// The GryviaReservation controller's policy.
#[derive(Clone, Debug, Default)]
pub struct ReservationReconciler;

impl crate::Reconcile for ReservationReconciler {
    type Object = GryviaReservation;
    type World = ReservationWorld;
    type Status = GryviaReservationStatus;

    fn name(&self) -> &'static str {
        "gryvia-reservations"
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(labels::FINALIZER)
    }

    fn cleanup(
        &self,
        r: &GryviaReservation,
        world: &ReservationWorld,
        _now: Timestamp,
    ) -> Plan<GryviaReservationStatus> {
        let name = r.metadata.name.clone().unwrap_or_default();
        let mut plan = Plan::new();
        for n in world
            .nodes
            .iter()
            .filter(|n| n.reserved_by.as_deref() == Some(name.as_str()))
        {
            release(&mut plan, &n.name);
        }
        plan
    }

    fn reconcile(
        &self,
        r: &GryviaReservation,
        world: &ReservationWorld,
        now: Timestamp,
    ) -> Plan<GryviaReservationStatus> {
        let mut plan = Plan::new();
        let name = r.metadata.name.clone().unwrap_or_default();
        let generation = r.metadata.generation;
        let current = r.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let held_now = held_by(world, &name);
        status.idle_gpu_seconds = status
            .idle_gpu_seconds
            .saturating_add(idle_gpu_seconds(&current, &held_now, now));
        let win = match window(r, now) {
            Ok(w) => w,
            Err(e) => {
                for n in &held_now {
                    release(&mut plan, &n.name);
                }
                record_invalid(&mut status, e.to_string(), generation, now);
                plan.set_status_if_changed(r.status.as_ref(), status);
                return plan;
            }
        };
        let decision = decide(r, world, win, now);
        if let Window::Open { start, end } | Window::Next { start, end } = win {
            status.window_start = Some(Time(start));
            status.window_end = Some(Time(end));
        }
        move_nodes(
            &mut plan,
            &name,
            exclusive(r),
            &decision.nodes,
            world,
            &held_now,
        );
        if matches!(win, Window::Open { .. }) {
            for p in give_back(&name, &decision.nodes, world) {
                plan.evictions.push(crate::Eviction {
                    namespace: p.namespace.clone(),
                    pod: p.name.clone(),
                    reason: format!(
                        "reservation {name} gives its owner back the {} GPUs this pod uses on {}",
                        p.gpus,
                        p.node.as_deref().unwrap_or_default()
                    ),
                });
                status.evictions = status.evictions.saturating_add(1);
            }
        }
        account_availability(r, &current, &mut status, world, win, now);
        record_sla(&mut plan, r, &current, &mut status, generation, now);
        status.reserved_gpus = gpus_on(world, &decision.nodes);
        status.idle_gpus = if matches!(
            decision.phase,
            ReservationPhase::Active | ReservationPhase::Partial
        ) {
            idle_on(world, &decision.nodes)
        } else {
            0
        };
        status.reserved_nodes = decision.nodes;
        record_phase(
            &mut plan,
            &mut status,
            current.phase,
            decision.phase,
            decision.message,
            generation,
            now,
        );
        if let Some(at) = decision.wake_at {
            let wait = (at - now).get_seconds().max(1);
            plan.requeue(Duration::from_secs(u64::try_from(wait).unwrap_or(1)));
        }
        plan.set_status_if_changed(r.status.as_ref(), status);
        plan
    }
}

/// The nodes `name` holds (its label on them).
fn held_by<'a>(world: &'a ReservationWorld, name: &str) -> Vec<&'a CandidateNode> {
    world
        .nodes
        .iter()
        .filter(|n| n.reserved_by.as_deref() == Some(name))
        .collect()
}

/// The reserved GPU time no pod used since the last sample, on the nodes held then and still
/// held (0 when the reservation was not active).
fn idle_gpu_seconds(
    current: &GryviaReservationStatus,
    held_now: &[&CandidateNode],
    now: Timestamp,
) -> i64 {
    let Some(sampled) = current.idle_sampled_at.as_ref().map(|t| t.0) else {
        return 0;
    };
    if !matches!(
        current.phase,
        Some(ReservationPhase::Active | ReservationPhase::Partial)
    ) {
        return 0;
    }
    let secs = (now - sampled).get_seconds().max(0);
    let idle: i64 = held_now
        .iter()
        .filter(|n| current.reserved_nodes.contains(&n.name))
        .map(|n| i64::from((n.gpus - n.gpus_in_use).max(0)))
        .sum();
    idle * secs
}

/// Records a schedule that cannot be read: nothing held, Ready=False naming the field.
fn record_invalid(
    status: &mut GryviaReservationStatus,
    msg: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    status.reserved_nodes.clear();
    status.reserved_gpus = 0;
    status.message = Some(msg.clone());
    conditions::set(
        &mut status.conditions,
        conditions::new(
            conditions::READY,
            Status::False,
            conditions::REASON_INVALID_SPEC,
            msg,
            generation,
            now,
        ),
    );
    status.idle_sampled_at = None;
}

/// What a reservation should hold now.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decision {
    phase: ReservationPhase,
    /// The nodes to hold, sorted.
    nodes: Vec<String>,
    message: String,
    /// When the window opens or closes.
    wake_at: Option<Timestamp>,
}

/// The phase, the nodes to hold and the message for the window `win`.
fn decide(
    r: &GryviaReservation,
    world: &ReservationWorld,
    win: Window,
    now: Timestamp,
) -> Decision {
    let name = r.metadata.name.as_deref().unwrap_or_default();
    match win {
        Window::Over => Decision {
            phase: ReservationPhase::Expired,
            nodes: Vec::new(),
            message: "the reservation's last window has ended".to_owned(),
            wake_at: None,
        },
        Window::Next { start, .. } => {
            let lead = jiff::SignedDuration::from_mins(i64::from(
                r.spec.schedule.lead_minutes.unwrap_or(0).max(0),
            ));
            let hold_from = start.checked_sub(lead).unwrap_or(start);
            if lead.is_zero() || now < hold_from {
                return Decision {
                    phase: ReservationPhase::Pending,
                    nodes: Vec::new(),
                    message: format!("the next window opens at {start}"),
                    wake_at: Some(if lead.is_zero() { start } else { hold_from }),
                };
            }
            let res = &r.spec.resources;
            let nodes = choose_nodes(name, &res.gpu_type, res.gpu_count, world);
            Decision {
                phase: ReservationPhase::Pending,
                message: format!(
                    "holding {} {} GPUs ahead of the window at {start} (leadMinutes): no new work lands on them",
                    gpus_on(world, &nodes),
                    res.gpu_type
                ),
                nodes,
                wake_at: Some(start),
            }
        }
        Window::Open { end, .. } => {
            let res = &r.spec.resources;
            let nodes = choose_nodes(name, &res.gpu_type, res.gpu_count, world);
            let gpus = gpus_on(world, &nodes);
            let (phase, message) = if gpus >= res.gpu_count {
                (
                    ReservationPhase::Active,
                    format!("holding {gpus} {} GPUs until {end}", res.gpu_type),
                )
            } else {
                (
                    ReservationPhase::Partial,
                    format!(
                        "holding {gpus} of {} {} GPUs until {end}: not enough free nodes of that product",
                        res.gpu_count, res.gpu_type
                    ),
                )
            };
            Decision {
                phase,
                nodes,
                message,
                wake_at: Some(end),
            }
        }
    }
}

/// Holds the `desired` nodes not held yet and releases the held ones no longer desired.
fn move_nodes(
    plan: &mut Plan<GryviaReservationStatus>,
    name: &str,
    exclusive: bool,
    desired: &[String],
    world: &ReservationWorld,
    held_now: &[&CandidateNode],
) {
    for n in desired {
        let node = world.nodes.iter().find(|c| &c.name == n);
        if node.is_none_or(|c| c.reserved_by.as_deref() != Some(name)) {
            hold(plan, n, name, exclusive);
        } else if exclusive && node.is_some_and(|c| c.tainted_by.as_deref() != Some(name)) {
            taint(plan, n, name);
        } else if !exclusive && node.is_some_and(|c| c.tainted_by.as_deref() == Some(name)) {
            untaint(plan, n);
        }
    }
    for n in held_now {
        if !desired.contains(&n.name) {
            release(plan, &n.name);
        }
    }
}

/// Condition type: the availability of the window so far meets `guarantees.sla.availability`.
pub const SLA_MET: &str = "SLAMet";

/// Adds the time since the last sample to the open window's availability: `gpuCount` GPUs
/// promised, and of them the GPUs of the nodes held then that are still held, neither
/// quarantined nor cordoned (capped at `gpuCount`). A new window starts a new count; a closed
/// one keeps its last.
fn account_availability(
    r: &GryviaReservation,
    current: &GryviaReservationStatus,
    status: &mut GryviaReservationStatus,
    world: &ReservationWorld,
    win: Window,
    now: Timestamp,
) {
    let Window::Open { start, .. } = win else {
        return;
    };
    let mut acc = current
        .availability
        .clone()
        .filter(|a| a.window_start.0 == start)
        .unwrap_or(gryvia_types::ReservationAvailability {
            window_start: Time(start),
            promised_gpu_seconds: 0,
            available_gpu_seconds: 0,
            percent: 100.0,
        });
    let name = r.metadata.name.as_deref().unwrap_or_default();
    let sampled = current.idle_sampled_at.as_ref().map(|t| t.0.max(start));
    let active = matches!(
        current.phase,
        Some(ReservationPhase::Active | ReservationPhase::Partial)
    );
    if let Some(from) = sampled.filter(|_| active) {
        let secs = (now - from).get_seconds().max(0);
        let promised = r.spec.resources.gpu_count.max(0);
        let healthy: i32 = world
            .nodes
            .iter()
            .filter(|n| current.reserved_nodes.contains(&n.name))
            .filter(|n| n.reserved_by.as_deref() == Some(name))
            .filter(|n| !n.quarantined && !n.unschedulable)
            .map(|n| n.gpus)
            .sum();
        acc.promised_gpu_seconds = acc
            .promised_gpu_seconds
            .saturating_add(i64::from(promised) * secs);
        acc.available_gpu_seconds = acc
            .available_gpu_seconds
            .saturating_add(i64::from(healthy.min(promised)) * secs);
    }
    if acc.promised_gpu_seconds > 0 {
        let ratio = acc.available_gpu_seconds as f64 / acc.promised_gpu_seconds as f64;
        acc.percent = (ratio * 10_000.0).round() / 100.0;
    } else {
        acc.percent = 100.0;
    }
    status.availability = Some(acc);
}

/// Sets `SLAMet` from the window's availability against `guarantees.sla.availability` (a
/// Warning Event when it falls below); nothing without an SLA or before any time is counted.
fn record_sla(
    plan: &mut Plan<GryviaReservationStatus>,
    r: &GryviaReservation,
    current: &GryviaReservationStatus,
    status: &mut GryviaReservationStatus,
    generation: Option<i64>,
    now: Timestamp,
) {
    let Some(promise) = r.spec.guarantees.as_ref().and_then(|g| g.sla.as_ref()) else {
        return;
    };
    let Some(a) = status
        .availability
        .as_ref()
        .filter(|a| a.promised_gpu_seconds > 0)
    else {
        return;
    };
    let met = a.percent >= promise.availability;
    let message = format!(
        "{}% of the window's reserved GPU time so far was available ({} of {} GPU-seconds), against the promised {}%",
        a.percent, a.available_gpu_seconds, a.promised_gpu_seconds, promise.availability
    );
    let was = conditions::find(&current.conditions, SLA_MET).map(|c| c.status == "True");
    if !met && was != Some(false) {
        plan.event(EventType::Warning, "SLABreached", message.clone());
    }
    conditions::set(
        &mut status.conditions,
        conditions::new(
            SLA_MET,
            if met { Status::True } else { Status::False },
            if met { "WithinSLA" } else { "BelowSLA" },
            message,
            generation,
            now,
        ),
    );
}

/// Records the phase (an Event when it changes, a Warning for Partial), the Ready condition,
/// and the idle-time sampling of an active reservation.
fn record_phase(
    plan: &mut Plan<GryviaReservationStatus>,
    status: &mut GryviaReservationStatus,
    was: Option<ReservationPhase>,
    phase: ReservationPhase,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) {
    status.message = Some(message.clone());
    if was != Some(phase) {
        let type_ = if phase == ReservationPhase::Partial {
            EventType::Warning
        } else {
            EventType::Normal
        };
        plan.event(type_, &format!("{phase:?}"), message.clone());
    }
    status.phase = Some(phase);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            conditions::READY,
            Status::True,
            conditions::REASON_RECONCILED,
            message,
            generation,
            now,
        ),
    );
    if matches!(phase, ReservationPhase::Active | ReservationPhase::Partial) {
        plan.requeue(RESYNC);
        status.idle_sampled_at = Some(Time(now));
    } else {
        status.idle_sampled_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const NOW: Timestamp = Timestamp::UNIX_EPOCH;

    fn pod(
        name: &str,
        node: Option<&str>,
        gpus: i32,
        reservation: Option<&str>,
        at: &str,
    ) -> GpuPod {
        GpuPod {
            namespace: "ns".into(),
            name: name.into(),
            node: node.map(str::to_owned),
            gpus,
            reservation: reservation.map(str::to_owned),
            created: t(at),
            terminating: false,
        }
    }

    #[test]
    fn the_owners_waiting_pods_get_their_gpus_back_from_the_newest_others() {
        let mut world = ReservationWorld {
            nodes: vec![node("a", 8, 8, Some("r1")), node("b", 8, 4, Some("r1"))],
            pods: vec![
                pod("old", Some("a"), 4, None, "2026-12-02T09:00:00Z"),
                pod("new", Some("a"), 4, None, "2026-12-02T10:00:00Z"),
                pod("mine", Some("b"), 4, Some("r1"), "2026-12-02T08:00:00Z"),
                pod("other-node", Some("c"), 8, None, "2026-12-02T11:00:00Z"),
            ],
        };
        let held = vec!["a".to_owned(), "b".to_owned()];
        assert!(give_back("r1", &held, &world).is_empty(), "nobody waits");
        world
            .pods
            .push(pod("waiting", None, 8, Some("r1"), "2026-12-02T12:00:00Z"));
        let names = |w: &ReservationWorld| -> Vec<String> {
            give_back("r1", &held, w)
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(
            names(&world),
            vec!["new"],
            "4 idle on b, 4 more from the newest"
        );
        world.pods[1].terminating = true;
        assert!(names(&world).is_empty(), "already going");
        world.pods.push(pod(
            "waiting-too",
            None,
            8,
            Some("r1"),
            "2026-12-02T12:00:00Z",
        ));
        assert_eq!(names(&world), vec!["old"], "never the owner's own pods");
    }

    #[test]
    fn a_non_exclusive_reservation_labels_without_tainting_and_drops_its_taint() {
        let world = ReservationWorld {
            nodes: vec![
                CandidateNode {
                    tainted_by: Some("r1".into()),
                    ..node("a", 8, 0, Some("r1"))
                },
                node("b", 8, 0, None),
            ],
            ..ReservationWorld::default()
        };
        let held = held_by(&world, "r1");
        let mut plan = Plan::new();
        move_nodes(
            &mut plan,
            "r1",
            false,
            &["a".to_owned(), "b".to_owned()],
            &world,
            &held,
        );
        assert_eq!(
            plan.node_ops,
            vec![
                NodeOp::RemoveTaint {
                    node: "a".into(),
                    key: labels::RESERVED_TAINT.into(),
                    effect: TaintEffect::NoSchedule
                },
                NodeOp::Label {
                    node: "b".into(),
                    key: labels::RESERVED_TAINT.into(),
                    value: "r1".into()
                },
            ]
        );
        let mut r = reservation(8);
        assert!(exclusive(&r), "exclusive without guarantees");
        r.spec.guarantees = Some(serde_json::from_value(serde_json::json!({})).unwrap());
        assert!(exclusive(&r), "exclusive by default");
    }

    #[test]
    fn lead_time_holds_the_nodes_before_the_window_opens() {
        let world = ReservationWorld {
            nodes: vec![node("a", 8, 0, None)],
            ..ReservationWorld::default()
        };
        let next = Window::Next {
            start: t("2026-12-02T10:00:00Z"),
            end: t("2026-12-02T12:00:00Z"),
        };
        let mut r = reservation(8);
        let d = decide(&r, &world, next, t("2026-12-02T09:40:00Z"));
        assert!(d.nodes.is_empty());
        r.spec.schedule.lead_minutes = Some(30);
        let early = decide(&r, &world, next, t("2026-12-02T09:20:00Z"));
        assert!(early.nodes.is_empty());
        assert_eq!(early.wake_at, Some(t("2026-12-02T09:30:00Z")));
        let d = decide(&r, &world, next, t("2026-12-02T09:40:00Z"));
        assert_eq!(
            (d.phase, d.nodes),
            (ReservationPhase::Pending, vec!["a".to_owned()])
        );
        assert_eq!(d.wake_at, Some(t("2026-12-02T10:00:00Z")));
        assert!(d.message.contains("ahead of the window"), "{}", d.message);
    }

    #[test]
    fn availability_counts_healthy_held_gpus_against_the_promise_and_sets_sla_met() {
        let mut r = reservation(16);
        r.spec.guarantees = Some(
            serde_json::from_value(serde_json::json!({"sla": {"availability": 99.0}})).unwrap(),
        );
        let start = t("2026-12-02T10:00:00Z");
        let win = Window::Open {
            start,
            end: t("2026-12-02T12:00:00Z"),
        };
        let current = GryviaReservationStatus {
            phase: Some(ReservationPhase::Active),
            idle_sampled_at: Some(Time(start)),
            reserved_nodes: vec!["a".into(), "b".into()],
            ..GryviaReservationStatus::default()
        };
        let mut world = ReservationWorld {
            nodes: vec![node("a", 8, 0, Some("r1")), node("b", 8, 0, Some("r1"))],
            ..ReservationWorld::default()
        };
        world.nodes[1].quarantined = true;
        let mut status = current.clone();
        let now = t("2026-12-02T10:00:10Z");
        account_availability(&r, &current, &mut status, &world, win, now);
        let a = status.availability.clone().unwrap();
        assert_eq!(
            (a.promised_gpu_seconds, a.available_gpu_seconds, a.percent),
            (160, 80, 50.0)
        );
        let mut plan = Plan::new();
        record_sla(&mut plan, &r, &current, &mut status, Some(1), now);
        let c = conditions::find(&status.conditions, SLA_MET).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "BelowSLA")
        );
        assert!(c.message.starts_with("50% of the window's reserved GPU time so far was available (80 of 160 GPU-seconds), against the promised 99%"), "{}", c.message);
        assert_eq!(plan.events.len(), 1);
        // The next sample adds; a new window starts over.
        let current = GryviaReservationStatus {
            idle_sampled_at: Some(Time(now)),
            ..status.clone()
        };
        world.nodes[1].quarantined = false;
        account_availability(
            &r,
            &current,
            &mut status,
            &world,
            win,
            t("2026-12-02T10:00:20Z"),
        );
        assert_eq!(
            status.availability.as_ref().unwrap().available_gpu_seconds,
            80 + 160
        );
        let later = Window::Open {
            start: t("2026-12-03T10:00:00Z"),
            end: t("2026-12-03T12:00:00Z"),
        };
        account_availability(
            &r,
            &current,
            &mut status,
            &world,
            later,
            t("2026-12-03T10:00:00Z"),
        );
        assert_eq!(
            status.availability.as_ref().unwrap().promised_gpu_seconds,
            0
        );
    }

    fn node(name: &str, gpus: i32, in_use: i32, reserved_by: Option<&str>) -> CandidateNode {
        CandidateNode {
            name: name.to_owned(),
            product: Some("H100".to_owned()),
            gpus,
            gpus_in_use: in_use,
            reserved_by: reserved_by.map(str::to_owned),
            ..CandidateNode::default()
        }
    }

    fn reservation(gpus: i32) -> GryviaReservation {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation",
            "metadata": {"name": "r1", "generation": 1},
            "spec": {"owner": {"type": "team", "name": "ml"},
                     "resources": {"gpuType": "H100", "gpuCount": gpus},
                     "schedule": {"type": "immediate", "endTime": "2026-12-03T00:00:00Z"}}
        }))
        .unwrap()
    }

    #[test]
    fn schedule_errors_name_their_field() {
        assert_eq!(
            ScheduleError::TimeZone("Mars/Olympus".into()).to_string(),
            "spec.schedule.recurrence.timeZone: \"Mars/Olympus\" is not an IANA time zone"
        );
        let e = parse_time("spec.schedule.startTime", "soon").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.schedule.startTime: \"soon\" is not an RFC 3339 time: ")
        );
    }

    #[test]
    fn the_held_nodes_carry_the_reservations_label() {
        let world = ReservationWorld {
            nodes: vec![
                node("a", 8, 0, Some("r1")),
                node("b", 8, 0, Some("r2")),
                node("c", 8, 0, None),
            ],
            ..ReservationWorld::default()
        };
        let held: Vec<&str> = held_by(&world, "r1")
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(held, vec!["a"]);
    }

    #[test]
    fn idle_time_accrues_on_nodes_held_since_the_last_sample_while_active() {
        let mut current = GryviaReservationStatus {
            phase: Some(ReservationPhase::Active),
            idle_sampled_at: Some(Time(t("2026-12-02T10:00:00Z"))),
            reserved_nodes: vec!["a".into()],
            ..GryviaReservationStatus::default()
        };
        let a = node("a", 8, 3, Some("r1"));
        let b = node("b", 8, 0, Some("r1"));
        let now = t("2026-12-02T10:00:10Z");
        assert_eq!(idle_gpu_seconds(&current, &[&a, &b], now), 50);
        let world = ReservationWorld {
            nodes: vec![a.clone(), b.clone()],
            ..ReservationWorld::default()
        };
        assert_eq!(
            idle_on(&world, &["a".into(), "b".into()]),
            13,
            "idle now: 5 + 8"
        );
        current.phase = Some(ReservationPhase::Pending);
        assert_eq!(idle_gpu_seconds(&current, &[&a, &b], now), 0);
    }

    #[test]
    fn an_unreadable_schedule_holds_nothing_and_says_why() {
        let mut status = GryviaReservationStatus {
            reserved_gpus: 8,
            reserved_nodes: vec!["a".into()],
            ..GryviaReservationStatus::default()
        };
        record_invalid(
            &mut status,
            "spec.x: bad".into(),
            Some(1),
            t("2026-12-02T10:00:00Z"),
        );
        assert!(status.reserved_nodes.is_empty() && status.reserved_gpus == 0);
        assert_eq!(status.conditions[0].reason, conditions::REASON_INVALID_SPEC);
    }

    #[test]
    fn an_open_window_holds_nodes_until_the_count_is_covered_or_is_partial() {
        let world = ReservationWorld {
            nodes: vec![node("a", 8, 0, None), node("b", 8, 0, None)],
            ..ReservationWorld::default()
        };
        let open = Window::Open {
            start: t("2026-12-02T00:00:00Z"),
            end: t("2026-12-03T00:00:00Z"),
        };
        let d = decide(&reservation(16), &world, open, NOW);
        assert_eq!((d.phase, d.nodes.len()), (ReservationPhase::Active, 2));
        assert_eq!(d.wake_at, Some(t("2026-12-03T00:00:00Z")));
        assert_eq!(
            decide(&reservation(24), &world, open, NOW).phase,
            ReservationPhase::Partial
        );
        assert_eq!(
            decide(&reservation(8), &world, Window::Over, NOW).phase,
            ReservationPhase::Expired
        );
    }

    #[test]
    fn moving_holds_new_nodes_and_releases_the_rest() {
        let world = ReservationWorld {
            nodes: vec![node("a", 8, 0, Some("r1")), node("b", 8, 0, None)],
            ..ReservationWorld::default()
        };
        let held = held_by(&world, "r1");
        let mut plan = Plan::new();
        move_nodes(&mut plan, "r1", true, &["b".to_owned()], &world, &held);
        let nodes: Vec<&str> = plan.node_ops.iter().map(NodeOp::node).collect();
        assert_eq!(nodes, vec!["b", "b", "a", "a"]);
    }

    #[test]
    fn a_new_phase_raises_an_event_and_an_active_one_samples_idle_time() {
        let mut plan = Plan::new();
        let mut status = GryviaReservationStatus::default();
        let now = t("2026-12-02T10:00:00Z");
        record_phase(
            &mut plan,
            &mut status,
            None,
            ReservationPhase::Partial,
            "m".into(),
            None,
            now,
        );
        assert_eq!(plan.events[0].type_, EventType::Warning);
        assert_eq!(status.idle_sampled_at, Some(Time(now)));
        let mut plan = Plan::new();
        let was = status.phase;
        record_phase(
            &mut plan,
            &mut status,
            was,
            ReservationPhase::Partial,
            "m".into(),
            None,
            now,
        );
        assert!(plan.events.is_empty());
    }
}
