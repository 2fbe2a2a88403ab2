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
//! Status lists the held nodes and accumulates the reserved GPU time no pod used
//! (`idleGpuSeconds`), sampled at every reconcile (at least every 30 s while active).

use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{
    GryviaReservation, GryviaReservationStatus, Recurrence, ReservationPhase, ScheduleType,
    Weekday, labels,
};
use jiff::civil::Weekday as CivilWeekday;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::{EventType, NodeOp, Plan, Taint, TaintEffect, Timestamp};

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

fn parse_time(field: &str, text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>()
        .map_err(|e| format!("{field}: {text:?} is not an RFC 3339 time: {e}"))
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
fn recurring(r: &Recurrence, now: Timestamp) -> Result<(Timestamp, Timestamp, bool), String> {
    let tz = TimeZone::get(&r.time_zone).map_err(|_| {
        format!(
            "spec.schedule.recurrence.timeZone: {:?} is not an IANA time zone",
            r.time_zone
        )
    })?;
    let (h, m) = r
        .start_time
        .split_once(':')
        .and_then(|(h, m)| Some((h.parse::<i8>().ok()?, m.parse::<i8>().ok()?)))
        .ok_or_else(|| {
            format!(
                "spec.schedule.recurrence.startTime: {:?} is not HH:MM",
                r.start_time
            )
        })?;
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
        .ok_or_else(|| "spec.schedule.recurrence: no window opens within a week".to_owned())
}

/// Where the schedule of `reservation` stands at `now`.
///
/// # Errors
/// A message naming the field when a time or the time zone cannot be read.
pub fn window(reservation: &GryviaReservation, now: Timestamp) -> Result<Window, String> {
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
            let end =
                upper.ok_or("spec.schedule.endTime: required for an immediate reservation")?;
            Ok(if now < start {
                Window::Next { start, end }
            } else {
                Window::Open { start, end }
            })
        }
        ScheduleType::Recurring => {
            let r = s
                .recurrence
                .as_ref()
                .ok_or("spec.schedule.recurrence: required for a recurring reservation")?;
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
}

/// What the reservation reconcile knows: the cluster's nodes, sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationWorld {
    /// Every node.
    pub nodes: Vec<CandidateNode>,
}

impl ReservationWorld {
    /// Summarises the cluster's nodes, with the GPUs `pods` hold on each.
    pub fn of(nodes: &[Node], pods: &[Pod]) -> Self {
        let in_use = crate::tenancy::gpus_by_node(pods);
        let mut out: Vec<CandidateNode> = nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let label = |k: &str| n.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
                let spec = n.spec.clone().unwrap_or_default();
                CandidateNode {
                    gpus_in_use: in_use.get(&name).copied().unwrap_or(0),
                    product: label(labels::NVIDIA_GPU_PRODUCT),
                    gpus: crate::tenancy::node_gpus(n),
                    reserved_by: label(labels::RESERVED_TAINT),
                    unschedulable: spec.unschedulable.unwrap_or(false),
                    quarantined: spec
                        .taints
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.key == labels::GPU_UNHEALTHY_TAINT),
                    name,
                }
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        ReservationWorld { nodes: out }
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

fn hold(plan: &mut Plan<GryviaReservationStatus>, node: &str, name: &str) {
    plan.node_ops.push(NodeOp::Label {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
        value: name.to_owned(),
    });
    plan.node_ops.push(NodeOp::Taint {
        node: node.to_owned(),
        taint: Taint {
            key: labels::RESERVED_TAINT.to_owned(),
            value: name.to_owned(),
            effect: TaintEffect::NoSchedule,
        },
    });
}

fn release(plan: &mut Plan<GryviaReservationStatus>, node: &str) {
    plan.node_ops.push(NodeOp::RemoveTaint {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
        effect: TaintEffect::NoSchedule,
    });
    plan.node_ops.push(NodeOp::RemoveLabel {
        node: node.to_owned(),
        key: labels::RESERVED_TAINT.to_owned(),
    });
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
        let held_now: Vec<&CandidateNode> = world
            .nodes
            .iter()
            .filter(|n| n.reserved_by.as_deref() == Some(name.as_str()))
            .collect();

        // Idle GPU time since the last sample, on the nodes held then (and still held).
        if let Some(sampled) = current.idle_sampled_at.as_ref().map(|t| t.0)
            && matches!(
                current.phase,
                Some(ReservationPhase::Active | ReservationPhase::Partial)
            )
        {
            let secs = (now - sampled).get_seconds().max(0);
            let idle: i64 = held_now
                .iter()
                .filter(|n| current.reserved_nodes.contains(&n.name))
                .map(|n| i64::from((n.gpus - n.gpus_in_use).max(0)))
                .sum();
            status.idle_gpu_seconds = status.idle_gpu_seconds.saturating_add(idle * secs);
        }

        let win = match window(r, now) {
            Ok(w) => w,
            Err(msg) => {
                for n in &held_now {
                    release(&mut plan, &n.name);
                }
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
                plan.set_status_if_changed(r.status.as_ref(), status);
                return plan;
            }
        };
        let (phase, desired, message, requeue_at) = match win {
            Window::Over => (
                ReservationPhase::Expired,
                Vec::new(),
                "the reservation's last window has ended".to_owned(),
                None,
            ),
            Window::Next { start, end } => {
                status.window_start = Some(Time(start));
                status.window_end = Some(Time(end));
                (
                    ReservationPhase::Pending,
                    Vec::new(),
                    format!("the next window opens at {start}"),
                    Some(start),
                )
            }
            Window::Open { start, end } => {
                status.window_start = Some(Time(start));
                status.window_end = Some(Time(end));
                let res = &r.spec.resources;
                let chosen = choose_nodes(&name, &res.gpu_type, res.gpu_count, world);
                let gpus = gpus_on(world, &chosen);
                if gpus >= res.gpu_count {
                    (
                        ReservationPhase::Active,
                        chosen,
                        format!("holding {gpus} {} GPUs until {end}", res.gpu_type),
                        Some(end),
                    )
                } else {
                    (
                        ReservationPhase::Partial,
                        chosen,
                        format!(
                            "holding {gpus} of {} {} GPUs until {end}: not enough free nodes of that product",
                            res.gpu_count, res.gpu_type
                        ),
                        Some(end),
                    )
                }
            }
        };
        for n in &desired {
            let node = world.nodes.iter().find(|c| &c.name == n);
            if node.is_none_or(|c| c.reserved_by.as_deref() != Some(name.as_str())) {
                hold(&mut plan, n, &name);
            }
        }
        for n in &held_now {
            if !desired.contains(&n.name) {
                release(&mut plan, &n.name);
            }
        }
        status.reserved_gpus = gpus_on(world, &desired);
        status.reserved_nodes = desired;
        status.message = Some(message.clone());
        if current.phase != Some(phase) {
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
        if let Some(at) = requeue_at {
            let wait = (at - now).get_seconds().max(1);
            plan.requeue(Duration::from_secs(u64::try_from(wait).unwrap_or(1)));
        }
        plan.set_status_if_changed(r.status.as_ref(), status);
        plan
    }
}
