//! Job hooks, as a pure function: a GryviaJobHook POSTs a signed JSON body when a watched
//! GryviaAIJob (or GryviaWorkflow) starts, is retried, succeeds or fails.
//!
//! Delivery is at least once. Every event becomes a [`HookDelivery`] in the hook's status
//! first (state `Pending`, a stable id the receiver can drop duplicates by); the executor
//! POSTs the due ones and [`HookReconciler`]'s `record_deliveries` writes what came of each
//! attempt: `Delivered` on a 2xx answer, otherwise another attempt after a backoff that doubles
//! (the delivery log of [`crate::delivery`]), and `GaveUp` (with a Warning Event) after
//! `spec.maxAttempts`.
//!
//! Which events were raised is remembered per object in `status.tracked`, so the status
//! stays small: an object's record is dropped once the object is gone, or once it finished
//! before `status.handledUntil`, the time up to which every finished object has been handled.
//! That time starts at the hook's creation (a new hook does not replay history) and trails
//! the controller's clock by [`HANDLED_LAG`] (a finished object whose status the API server
//! had not shown yet is still seen).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use gryvia_types::{
    DeliveryState, GryviaAIJob, GryviaJobHook, GryviaJobHookStatus, GryviaWorkflow, HookDelivery,
    HookEvent, HookTracked, JobPhase,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::delivery;
use crate::{Delivery, EventType, Notification, Plan, Timestamp};

/// How far `status.handledUntil` trails the controller's clock.
pub const HANDLED_LAG: Duration = Duration::from_secs(300);
/// How often a hook whose signing key is missing looks again.
pub const SECRET_RECHECK: Duration = Duration::from_secs(30);

/// The kinds a hook watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SubjectKind {
    /// A GryviaAIJob.
    GryviaAIJob,
    /// A GryviaWorkflow (watched with `selector.includeWorkflows`).
    GryviaWorkflow,
}

impl SubjectKind {
    /// The Kubernetes kind, as deliveries name it.
    pub fn as_str(self) -> &'static str {
        match self {
            SubjectKind::GryviaAIJob => "GryviaAIJob",
            SubjectKind::GryviaWorkflow => "GryviaWorkflow",
        }
    }
}

impl std::fmt::Display for SubjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job or workflow as the hook sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `GryviaAIJob` or `GryviaWorkflow`.
    pub kind: SubjectKind,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// When it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<Timestamp>,
    /// Its phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// Retries so far.
    #[serde(default)]
    pub retries: i32,
    /// When it started running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
}

impl Subject {
    /// An AI job.
    pub fn of_job(job: &GryviaAIJob) -> Self {
        let status = job.status.clone().unwrap_or_default();
        Subject {
            kind: SubjectKind::GryviaAIJob,
            name: job.metadata.name.clone().unwrap_or_default(),
            uid: job.metadata.uid.clone().unwrap_or_default(),
            labels: job.metadata.labels.clone().unwrap_or_default(),
            created: job.metadata.creation_timestamp.as_ref().map(|t| t.0),
            phase: status.phase,
            retries: status.retries,
            start_time: status.start_time.map(|t| t.0),
            completion_time: status.completion_time.map(|t| t.0),
        }
    }

    /// A workflow: it started when its first step did and, once finished, ended when its
    /// last step did.
    pub fn of_workflow(workflow: &GryviaWorkflow) -> Self {
        let status = workflow.status.clone().unwrap_or_default();
        let finished = status.phase.is_some_and(JobPhase::is_finished);
        Subject {
            kind: SubjectKind::GryviaWorkflow,
            name: workflow.metadata.name.clone().unwrap_or_default(),
            uid: workflow.metadata.uid.clone().unwrap_or_default(),
            labels: workflow.metadata.labels.clone().unwrap_or_default(),
            created: workflow.metadata.creation_timestamp.as_ref().map(|t| t.0),
            phase: status.phase,
            retries: 0,
            start_time: status
                .steps
                .iter()
                .filter_map(|s| s.start_time.as_ref().map(|t| t.0))
                .min(),
            completion_time: status
                .steps
                .iter()
                .filter_map(|s| s.completion_time.as_ref().map(|t| t.0))
                .max()
                .filter(|_| finished),
        }
    }

    fn finished(&self) -> bool {
        self.phase.is_some_and(JobPhase::is_finished)
    }
}

/// The signing key as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecretState {
    /// The Secret exists and has the key.
    #[default]
    Present,
    /// No Secret of that name in the hook's namespace.
    Missing,
    /// The Secret lacks the key.
    NoKey,
}

/// What the hook reconcile knows: the jobs (and workflows, when the hook includes them) of its
/// namespace, and whether its signing key can be read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HookWorld {
    /// Jobs and workflows of the hook's namespace (the reconcile applies the selector).
    pub subjects: Vec<Subject>,
    /// The signing key.
    pub secret: SecretState,
}

/// Whether the hook watches `s`.
pub fn selects(hook: &GryviaJobHook, s: &Subject) -> bool {
    let sel = &hook.spec.selector;
    let kind_ok = match s.kind {
        SubjectKind::GryviaAIJob => true,
        SubjectKind::GryviaWorkflow => sel.include_workflows,
    };
    kind_ok
        && (sel.names.is_empty() || sel.names.contains(&s.name))
        && crate::facts::labels_match(&sel.match_labels, &s.labels)
}

/// What the hook has seen of `s` when it has no record of it.
fn first_sight(s: &Subject, created: Timestamp, handled_until: Timestamp) -> HookTracked {
    let everything = HookTracked {
        uid: s.uid.clone(),
        started: s.start_time.is_some(),
        retries: s.retries,
        finished: s.finished(),
    };
    if s.finished() && s.completion_time.is_some_and(|t| t <= handled_until) {
        // Handled before, and its record dropped since.
        return everything;
    }
    if s.created.is_some_and(|c| c < created) {
        // It was there before the hook: what it did then is history, not an event. Only what
        // carries a time after the hook's creation is new.
        return HookTracked {
            started: s.start_time.is_none_or(|t| t < created),
            finished: s.finished() && s.completion_time.is_none_or(|t| t < created),
            ..everything
        };
    }
    HookTracked {
        uid: s.uid.clone(),
        started: false,
        retries: 0,
        finished: false,
    }
}

fn event_slug(event: HookEvent, retry: Option<i32>) -> String {
    match (event, retry) {
        (HookEvent::Retried, Some(n)) => format!("retried-{n}"),
        (e, _) => format!("{e:?}").to_lowercase(),
    }
}

/// The JSON body of a delivery (the same on every attempt).
pub fn body(hook: &GryviaJobHook, d: &HookDelivery) -> serde_json::Value {
    let namespace = hook.metadata.namespace.clone().unwrap_or_default();
    let mut body = json!({
        "id": d.id,
        "event": d.event,
        "hook": {"namespace": namespace, "name": hook.metadata.name},
        "object": {"kind": d.kind, "namespace": namespace, "name": d.name, "uid": d.uid},
    });
    if let Some(n) = d.retry {
        body["retry"] = json!(n);
    }
    if let Some(t) = &d.time {
        body["time"] = json!(t);
    }
    body
}

/// The GryviaJobHook controller's policy.
#[derive(Clone, Debug, Default)]
pub struct HookReconciler;

/// An event raised for a subject: which, the retry number, when it happened.
type Raised = (HookEvent, Option<i32>, Option<Timestamp>);

/// The events `s` raised since the hook's record `rec` of it, and the record brought up to
/// date: started, every retry, then succeeded or failed.
fn raise(s: &Subject, rec: &mut HookTracked) -> Vec<Raised> {
    let mut raised = Vec::new();
    if !rec.started && s.start_time.is_some() {
        rec.started = true;
        raised.push((HookEvent::Started, None, s.start_time));
    }
    for n in rec.retries + 1..=s.retries {
        raised.push((HookEvent::Retried, Some(n), None));
    }
    rec.retries = rec.retries.max(s.retries);
    if !rec.finished && s.finished() {
        rec.finished = true;
        let event = if s.phase == Some(JobPhase::Succeeded) {
            HookEvent::Succeeded
        } else {
            HookEvent::Failed
        };
        raised.push((event, None, s.completion_time));
    }
    raised
}

/// A new pending delivery of `event` about `s`, with an id stable across reconciles.
fn delivery(hook_uid: &str, s: &Subject, (event, retry, time): Raised) -> HookDelivery {
    HookDelivery {
        id: format!("{hook_uid}.{}.{}", s.uid, event_slug(event, retry)),
        kind: s.kind.as_str().to_owned(),
        name: s.name.clone(),
        uid: s.uid.clone(),
        event,
        retry,
        time: time.map(Time),
        attempts: 0,
        last_attempt: None,
        response_code: None,
        error: None,
        state: DeliveryState::Pending,
    }
}

/// Where the hook's records stand in time: when it was created, up to when every finished
/// object was handled, and the new `handledUntil`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Horizon {
    created: Timestamp,
    handled_until: Timestamp,
    next_handled: Timestamp,
}

impl Horizon {
    fn of(hook: &GryviaJobHook, now: Timestamp) -> Self {
        let created = hook
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        let handled_until = hook
            .status
            .as_ref()
            .and_then(|s| s.handled_until.as_ref())
            .map_or(created, |t| t.0);
        Horizon {
            created,
            handled_until,
            next_handled: handled_until.max(delivery::minus(now, HANDLED_LAG)),
        }
    }
}

/// Raises the events of every watched object into `status.deliveries` and keeps the records
/// still needed in `status.tracked`; returns when the earliest record can be dropped.
fn track_subjects(
    hook: &GryviaJobHook,
    world: &HookWorld,
    status: &mut GryviaJobHookStatus,
    horizon: Horizon,
) -> Option<Timestamp> {
    let hook_uid = hook.metadata.uid.clone().unwrap_or_default();
    let wanted: BTreeSet<HookEvent> = hook.spec.events.iter().copied().collect();
    let mut seen: BTreeMap<String, HookTracked> = status
        .tracked
        .drain(..)
        .map(|t| (t.uid.clone(), t))
        .collect();
    let mut subjects: Vec<&Subject> = world.subjects.iter().filter(|s| selects(hook, s)).collect();
    subjects.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    let mut prune_at: Option<Timestamp> = None;
    for s in subjects {
        let mut rec = seen
            .remove(&s.uid)
            .unwrap_or_else(|| first_sight(s, horizon.created, horizon.handled_until));
        for raised in raise(s, &mut rec) {
            if wanted.contains(&raised.0) {
                status.deliveries.push(delivery(&hook_uid, s, raised));
            }
        }
        // A finished object needs no record once every later reconcile treats it as handled
        // (it finished at or before `handledUntil`).
        match s.completion_time {
            Some(t) if rec.finished && t <= horizon.next_handled => {}
            Some(t) if rec.finished => {
                let at = delivery::plus(t, HANDLED_LAG);
                prune_at = Some(prune_at.map_or(at, |p| p.min(at)));
                status.tracked.push(rec);
            }
            _ => status.tracked.push(rec),
        }
    }
    prune_at
}

/// The Ready condition: whether the signing key can be read.
fn ready(hook: &GryviaJobHook, secret: &SecretState, now: Timestamp) -> Condition {
    let namespace = hook.metadata.namespace.clone().unwrap_or_default();
    let generation = hook.metadata.generation;
    let key = &hook.spec.secret_ref;
    let (status, reason, message) = match secret {
        SecretState::Present => (
            Status::True,
            "Watching",
            "signing key found; deliveries are sent".to_owned(),
        ),
        SecretState::NoKey => (
            Status::False,
            "SecretMissing",
            format!(
                "secret {}/{} has no key {:?}: deliveries wait until it has",
                namespace, key.name, key.key
            ),
        ),
        SecretState::Missing => (
            Status::False,
            "SecretMissing",
            format!(
                "secret {}/{} does not exist: deliveries wait until it does",
                namespace, key.name
            ),
        ),
    };
    conditions::new(conditions::READY, status, reason, message, generation, now)
}

/// The notification of one delivery attempt.
fn notification(hook: &GryviaJobHook, d: &HookDelivery) -> Notification {
    let namespace = hook.metadata.namespace.clone().unwrap_or_default();
    Notification {
        id: d.id.clone(),
        url: hook.spec.url.clone(),
        secret: Some((
            namespace,
            hook.spec.secret_ref.name.clone(),
            hook.spec.secret_ref.key.clone(),
        )),
        body: body(hook, d),
        timeout_ms: u64::try_from(hook.spec.timeout_seconds)
            .ok()
            .map(|s| s * 1000),
    }
}

/// Sends the due pending deliveries (at most [`delivery::BATCH`]) when the key can be read,
/// and asks to be woken for the rest.
fn send_due(
    plan: &mut Plan<GryviaJobHookStatus>,
    hook: &GryviaJobHook,
    deliveries: &[HookDelivery],
    can_send: bool,
    now: Timestamp,
) {
    if !can_send {
        if deliveries.iter().any(|d| d.state == DeliveryState::Pending) {
            plan.requeue(SECRET_RECHECK);
        }
        return;
    }
    let (send, wake) = delivery::due(deliveries, now);
    plan.notifications
        .extend(send.into_iter().map(|d| notification(hook, d)));
    if let Some(wait) = wake {
        plan.requeue(wait);
    }
}

impl crate::Reconcile for HookReconciler {
    type Object = GryviaJobHook;
    type World = HookWorld;
    type Status = GryviaJobHookStatus;

    fn name(&self) -> &'static str {
        "gryvia-job-hooks"
    }

    fn reconcile(
        &self,
        hook: &GryviaJobHook,
        world: &HookWorld,
        now: Timestamp,
    ) -> Plan<GryviaJobHookStatus> {
        let mut plan = Plan::new();
        let current = hook.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let horizon = Horizon::of(hook, now);
        let prune_at = track_subjects(hook, world, &mut status, horizon);
        status.handled_until = Some(Time(horizon.next_handled));
        delivery::prune(&mut status.deliveries);
        conditions::set(&mut status.conditions, ready(hook, &world.secret, now));
        let can_send = world.secret == SecretState::Present;
        send_due(&mut plan, hook, &status.deliveries, can_send, now);
        if let Some(at) = prune_at {
            let wait = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
            plan.requeue(wait.max(Duration::from_secs(1)));
        }
        // `handledUntil` moves with the clock; write it only along with a real change.
        let mut unchanged = status.clone();
        unchanged.handled_until = current.handled_until.clone();
        if unchanged != current || !plan.notifications.is_empty() {
            plan.status = Some(status);
        }
        plan
    }

    fn record_deliveries(
        &self,
        hook: &GryviaJobHook,
        plan: &mut Plan<GryviaJobHookStatus>,
        deliveries: &[Delivery],
        now: Timestamp,
    ) -> bool {
        let status = plan
            .status
            .get_or_insert_with(|| hook.status.clone().unwrap_or_default());
        let outcomes = delivery::record_all(
            &mut status.deliveries,
            deliveries,
            hook.spec.max_attempts,
            now,
        );
        status.delivered += i64::try_from(outcomes.delivered).unwrap_or(i64::MAX);
        status.failed += i64::try_from(outcomes.gave_up.len()).unwrap_or(i64::MAX);
        let gave_up: Vec<String> = outcomes
            .gave_up
            .iter()
            .filter_map(|(id, why)| {
                let d = status.deliveries.iter().find(|d| &d.id == id)?;
                Some(format!(
                    "{} of {} {}: gave up after {} attempts, last: {why}",
                    event_slug(d.event, d.retry),
                    d.kind,
                    d.name,
                    d.attempts,
                ))
            })
            .collect();
        if let Some(wait) = outcomes.retry_in {
            plan.requeue(wait);
        }
        for message in gave_up {
            plan.event(EventType::Warning, "DeliveryFailed", message);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reconcile;
    use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use gryvia_types::{GryviaJobHookSpec, HookSelector, SecretKeyRef};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn hook(events: &[HookEvent]) -> GryviaJobHook {
        let mut h = GryviaJobHook::new(
            "notify",
            GryviaJobHookSpec {
                events: events.to_vec(),
                selector: HookSelector {
                    match_labels: [("team".to_owned(), "a".to_owned())].into(),
                    ..HookSelector::default()
                },
                url: "https://hooks.example/in".to_owned(),
                allow_insecure: false,
                secret_ref: SecretKeyRef {
                    name: "hook-key".to_owned(),
                    key: "secret".to_owned(),
                },
                timeout_seconds: 3,
                max_attempts: 3,
            },
        );
        h.metadata = ObjectMeta {
            name: Some("notify".to_owned()),
            namespace: Some("ml".to_owned()),
            uid: Some("hook-uid".to_owned()),
            generation: Some(1),
            creation_timestamp: Some(Time(ts("2026-01-01T10:00:00Z"))),
            ..ObjectMeta::default()
        };
        h
    }

    fn job(name: &str, created: &str) -> Subject {
        Subject {
            kind: SubjectKind::GryviaAIJob,
            name: name.to_owned(),
            uid: format!("{name}-uid"),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            created: Some(ts(created)),
            phase: Some(JobPhase::Pending),
            retries: 0,
            start_time: None,
            completion_time: None,
        }
    }

    fn world(subjects: Vec<Subject>) -> HookWorld {
        HookWorld {
            subjects,
            secret: SecretState::Present,
        }
    }

    const ALL: [HookEvent; 4] = [
        HookEvent::Started,
        HookEvent::Retried,
        HookEvent::Succeeded,
        HookEvent::Failed,
    ];

    /// Applies a reconcile's status to the hook, with every delivery answered `answer`.
    fn step(
        h: &mut GryviaJobHook,
        w: &HookWorld,
        now: Timestamp,
        answer: Option<u16>,
    ) -> Plan<GryviaJobHookStatus> {
        let mut plan = HookReconciler.reconcile(h, w, now);
        let deliveries: Vec<Delivery> = plan
            .notifications
            .iter()
            .map(|n| Delivery {
                id: n.id.clone(),
                status: answer,
                error: answer.is_none().then(|| "connection refused".to_owned()),
            })
            .collect();
        if !deliveries.is_empty() {
            assert!(HookReconciler.record_deliveries(h, &mut plan, &deliveries, now));
        }
        if let Some(s) = &plan.status {
            h.status = Some(s.clone());
        }
        plan
    }

    #[test]
    fn a_job_raises_started_retried_and_succeeded_once_each() {
        let mut h = hook(&ALL);
        let mut j = job("train", "2026-01-01T10:01:00Z");
        let t = ts("2026-01-01T10:02:00Z");
        let plan = step(&mut h, &world(vec![j.clone()]), t, Some(200));
        assert!(plan.notifications.is_empty());

        j.phase = Some(JobPhase::Running);
        j.start_time = Some(ts("2026-01-01T10:02:30Z"));
        let plan = step(
            &mut h,
            &world(vec![j.clone()]),
            ts("2026-01-01T10:03:00Z"),
            Some(200),
        );
        assert_eq!(plan.notifications.len(), 1);
        let n = &plan.notifications[0];
        assert_eq!(n.id, "hook-uid.train-uid.started");
        assert_eq!(n.body["event"], "Started");
        assert_eq!(n.body["object"]["name"], "train");
        assert_eq!(n.body["object"]["namespace"], "ml");
        assert_eq!(n.body["time"], "2026-01-01T10:02:30Z");
        assert_eq!(n.timeout_ms, Some(3000));
        assert_eq!(
            n.secret,
            Some(("ml".into(), "hook-key".into(), "secret".into()))
        );
        // Nothing new: nothing sent, nothing written.
        let plan = step(
            &mut h,
            &world(vec![j.clone()]),
            ts("2026-01-01T10:03:10Z"),
            Some(200),
        );
        assert!(plan.is_noop(), "{:?}", plan.summary());

        j.retries = 2;
        j.phase = Some(JobPhase::Succeeded);
        j.completion_time = Some(ts("2026-01-01T10:09:00Z"));
        let plan = step(
            &mut h,
            &world(vec![j.clone()]),
            ts("2026-01-01T10:09:05Z"),
            Some(204),
        );
        let ids: Vec<&str> = plan.notifications.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "hook-uid.train-uid.retried-1",
                "hook-uid.train-uid.retried-2",
                "hook-uid.train-uid.succeeded"
            ]
        );
        assert_eq!(plan.notifications[1].body["retry"], 2);
        let st = h.status.clone().unwrap();
        assert_eq!(st.delivered, 4);
        assert!(
            st.deliveries
                .iter()
                .all(|d| d.state == DeliveryState::Delivered && d.attempts == 1)
        );
        // The finished job's record goes once handledUntil passes its end.
        assert_eq!(st.tracked.len(), 1);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(295)));
        let plan = step(
            &mut h,
            &world(vec![j.clone()]),
            ts("2026-01-01T10:14:01Z"),
            Some(200),
        );
        assert!(plan.notifications.is_empty());
        let st = h.status.clone().unwrap();
        assert!(st.tracked.is_empty());
        assert_eq!(
            st.handled_until.unwrap().0,
            ts("2026-01-01T10:09:01Z"),
            "trails the clock by five minutes"
        );
        // And it stays handled.
        let plan = step(
            &mut h,
            &world(vec![j]),
            ts("2026-01-01T11:00:00Z"),
            Some(200),
        );
        assert!(plan.notifications.is_empty());
    }

    #[test]
    fn only_subscribed_events_of_selected_jobs_are_sent() {
        let mut h = hook(&[HookEvent::Failed]);
        let mut a = job("a", "2026-01-01T10:01:00Z");
        a.phase = Some(JobPhase::Failed);
        a.start_time = Some(ts("2026-01-01T10:01:10Z"));
        a.completion_time = Some(ts("2026-01-01T10:01:20Z"));
        a.retries = 1;
        let mut other = a.clone();
        other.name = "other".into();
        other.uid = "other-uid".into();
        other.labels.insert("team".into(), "b".into());
        let mut wf = a.clone();
        wf.kind = SubjectKind::GryviaWorkflow;
        wf.uid = "wf-uid".into();
        let plan = step(
            &mut h,
            &world(vec![a, other, wf.clone()]),
            ts("2026-01-01T10:02:00Z"),
            Some(200),
        );
        let ids: Vec<&str> = plan.notifications.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["hook-uid.a-uid.failed"]);

        let mut h = hook(&[HookEvent::Failed]);
        h.spec.selector.include_workflows = true;
        let plan = step(
            &mut h,
            &world(vec![wf]),
            ts("2026-01-01T10:02:00Z"),
            Some(200),
        );
        assert_eq!(
            plan.notifications[0].body["object"]["kind"],
            "GryviaWorkflow"
        );
    }

    #[test]
    fn history_from_before_the_hook_is_not_replayed() {
        let mut h = hook(&ALL);
        // Finished before the hook existed.
        let mut old = job("old", "2026-01-01T09:00:00Z");
        old.phase = Some(JobPhase::Succeeded);
        old.start_time = Some(ts("2026-01-01T09:01:00Z"));
        old.completion_time = Some(ts("2026-01-01T09:30:00Z"));
        // Running since before the hook, retried once then; it finishes afterwards.
        let mut running = job("running", "2026-01-01T09:00:00Z");
        running.phase = Some(JobPhase::Running);
        running.start_time = Some(ts("2026-01-01T09:01:00Z"));
        running.retries = 1;
        let plan = step(
            &mut h,
            &world(vec![old.clone(), running.clone()]),
            ts("2026-01-01T10:00:05Z"),
            Some(200),
        );
        assert!(plan.notifications.is_empty(), "{:?}", plan.summary());
        running.retries = 2;
        running.phase = Some(JobPhase::Failed);
        running.completion_time = Some(ts("2026-01-01T10:05:00Z"));
        let plan = step(
            &mut h,
            &world(vec![old, running]),
            ts("2026-01-01T10:05:01Z"),
            Some(200),
        );
        let ids: Vec<&str> = plan.notifications.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "hook-uid.running-uid.retried-2",
                "hook-uid.running-uid.failed"
            ]
        );
    }

    #[test]
    fn a_job_that_finished_while_the_controller_was_away_is_still_announced() {
        let mut h = hook(&[HookEvent::Succeeded]);
        let j = job("a", "2026-01-01T10:01:00Z");
        step(
            &mut h,
            &world(vec![j.clone()]),
            ts("2026-01-01T10:02:00Z"),
            Some(200),
        );
        // Back after two hours; the job ended an hour ago.
        let mut done = j;
        done.phase = Some(JobPhase::Succeeded);
        done.completion_time = Some(ts("2026-01-01T11:00:00Z"));
        let plan = step(
            &mut h,
            &world(vec![done]),
            ts("2026-01-01T12:00:00Z"),
            Some(200),
        );
        assert_eq!(plan.notifications.len(), 1);
    }

    #[test]
    fn a_failed_delivery_is_retried_with_backoff_then_given_up() {
        let mut h = hook(&[HookEvent::Started]);
        let mut j = job("a", "2026-01-01T10:01:00Z");
        j.start_time = Some(ts("2026-01-01T10:01:30Z"));
        let w = world(vec![j]);
        let t0 = ts("2026-01-01T10:02:00Z");
        let plan = step(&mut h, &w, t0, Some(503));
        assert_eq!(plan.notifications.len(), 1);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
        let d = &h.status.as_ref().unwrap().deliveries[0];
        assert_eq!(
            (d.attempts, d.state, d.response_code),
            (1, DeliveryState::Pending, Some(503))
        );
        assert_eq!(d.error.as_deref(), Some("answered HTTP 503"));
        // Not due yet: nothing sent, a wake-up at the due time.
        let plan = step(&mut h, &w, ts("2026-01-01T10:02:02Z"), Some(503));
        assert!(plan.notifications.is_empty());
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(3)));
        let plan = step(&mut h, &w, ts("2026-01-01T10:02:05Z"), None);
        assert_eq!(plan.notifications.len(), 1);
        assert_eq!(
            plan.requeue_after(),
            Some(Duration::from_secs(10)),
            "doubled"
        );
        let plan = step(&mut h, &w, ts("2026-01-01T10:02:15Z"), Some(500));
        assert_eq!(plan.notifications.len(), 1);
        let st = h.status.clone().unwrap();
        assert_eq!((st.delivered, st.failed), (0, 1));
        assert_eq!(st.deliveries[0].state, DeliveryState::GaveUp);
        assert_eq!(st.deliveries[0].attempts, 3);
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "DeliveryFailed");
        assert!(
            plan.events[0].message.contains("gave up after 3 attempts"),
            "{}",
            plan.events[0].message
        );
        // Given up is final.
        let plan = step(&mut h, &w, ts("2026-01-01T11:00:00Z"), Some(200));
        assert!(plan.notifications.is_empty());
    }

    #[test]
    fn without_the_signing_key_deliveries_wait_and_the_hook_says_why() {
        let mut h = hook(&[HookEvent::Started]);
        let mut j = job("a", "2026-01-01T10:01:00Z");
        j.start_time = Some(ts("2026-01-01T10:01:30Z"));
        let mut w = world(vec![j]);
        w.secret = SecretState::Missing;
        let plan = step(&mut h, &w, ts("2026-01-01T10:02:00Z"), Some(200));
        assert!(plan.notifications.is_empty());
        assert_eq!(plan.requeue_after(), Some(SECRET_RECHECK));
        let st = h.status.clone().unwrap();
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "SecretMissing")
        );
        assert_eq!(
            ready.message,
            "secret ml/hook-key does not exist: deliveries wait until it does"
        );
        assert_eq!(st.deliveries[0].attempts, 0);
        w.secret = SecretState::Present;
        let plan = step(&mut h, &w, ts("2026-01-01T10:03:00Z"), Some(200));
        assert_eq!(plan.notifications.len(), 1);
        let st = h.status.unwrap();
        assert!(conditions::is_true(&st.conditions, conditions::READY));
        assert_eq!(st.delivered, 1);
    }

    #[test]
    fn deliveries_go_out_in_batches_and_old_ones_are_dropped() {
        let mut h = hook(&[HookEvent::Succeeded]);
        let jobs: Vec<Subject> = (0..150)
            .map(|i| {
                let mut j = job(&format!("j{i:03}"), "2026-01-01T10:01:00Z");
                j.phase = Some(JobPhase::Succeeded);
                j.completion_time = Some(ts("2026-01-01T10:02:00Z"));
                j
            })
            .collect();
        let w = world(jobs);
        let plan = step(&mut h, &w, ts("2026-01-01T10:03:00Z"), Some(200));
        assert_eq!(plan.notifications.len(), delivery::BATCH);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(1)));
        let mut t = ts("2026-01-01T10:03:00Z");
        for _ in 0..20 {
            t = delivery::plus(t, Duration::from_secs(1));
            step(&mut h, &w, t, Some(200));
        }
        let st = h.status.unwrap();
        assert_eq!(st.delivered, 150);
        assert_eq!(st.deliveries.len(), delivery::KEPT);
        assert_eq!(st.deliveries[0].name, "j050", "the oldest went first");
    }

    #[test]
    fn a_second_reconcile_after_the_plan_is_a_noop() {
        let mut h = hook(&ALL);
        let mut j = job("a", "2026-01-01T10:01:00Z");
        j.phase = Some(JobPhase::Running);
        j.start_time = Some(ts("2026-01-01T10:01:30Z"));
        let w = world(vec![j]);
        step(&mut h, &w, ts("2026-01-01T10:02:00Z"), Some(200));
        let again = HookReconciler.reconcile(&h, &w, ts("2026-01-01T10:02:01Z"));
        assert!(again.is_noop(), "{:?}", again.summary());
    }

    fn tracked(uid: &str) -> HookTracked {
        HookTracked {
            uid: uid.to_owned(),
            started: false,
            retries: 0,
            finished: false,
        }
    }

    fn pending(id: &str) -> HookDelivery {
        let s = job("a", "2026-01-01T10:01:00Z");
        let mut d = delivery("h", &s, (HookEvent::Started, None, None));
        d.id = id.to_owned();
        d
    }

    #[test]
    fn a_subject_kind_is_named_as_kubernetes_names_it() {
        assert_eq!(SubjectKind::GryviaAIJob.as_str(), "GryviaAIJob");
        assert_eq!(SubjectKind::GryviaWorkflow.to_string(), "GryviaWorkflow");
        assert_eq!(
            serde_json::to_value(SubjectKind::GryviaWorkflow).unwrap(),
            "GryviaWorkflow"
        );
    }

    #[test]
    fn a_subject_raises_start_each_retry_and_its_end_once() {
        let mut s = job("a", "2026-01-01T10:01:00Z");
        s.start_time = Some(ts("2026-01-01T10:02:00Z"));
        s.retries = 2;
        s.phase = Some(JobPhase::Succeeded);
        s.completion_time = Some(ts("2026-01-01T10:03:00Z"));
        let mut rec = tracked("a-uid");
        let events: Vec<(HookEvent, Option<i32>)> = raise(&s, &mut rec)
            .into_iter()
            .map(|r| (r.0, r.1))
            .collect();
        assert_eq!(
            events,
            vec![
                (HookEvent::Started, None),
                (HookEvent::Retried, Some(1)),
                (HookEvent::Retried, Some(2)),
                (HookEvent::Succeeded, None)
            ]
        );
        assert!(raise(&s, &mut rec).is_empty(), "raised once");
    }

    #[test]
    fn a_delivery_id_names_the_hook_the_object_and_the_event() {
        let s = job("a", "2026-01-01T10:01:00Z");
        let d = delivery("h", &s, (HookEvent::Retried, Some(2), None));
        assert_eq!(d.id, "h.a-uid.retried-2");
        assert_eq!(
            (d.kind.as_str(), d.state),
            ("GryviaAIJob", DeliveryState::Pending)
        );
    }

    #[test]
    fn the_horizon_starts_at_the_hooks_creation_and_trails_the_clock() {
        let h = hook(&ALL);
        let now = ts("2026-01-01T11:00:00Z");
        let horizon = Horizon::of(&h, now);
        assert_eq!(horizon.created, ts("2026-01-01T10:00:00Z"));
        assert_eq!(horizon.handled_until, horizon.created);
        assert_eq!(horizon.next_handled, ts("2026-01-01T10:55:00Z"));
    }

    #[test]
    fn tracking_raises_deliveries_for_wanted_events_only() {
        let h = hook(&[HookEvent::Started]);
        let mut s = job("a", "2026-01-01T10:01:00Z");
        s.start_time = Some(ts("2026-01-01T10:02:00Z"));
        s.retries = 1;
        let mut status = GryviaJobHookStatus::default();
        let horizon = Horizon::of(&h, ts("2026-01-01T10:03:00Z"));
        let prune = track_subjects(&h, &world(vec![s]), &mut status, horizon);
        assert_eq!(prune, None);
        assert_eq!(status.deliveries.len(), 1);
        assert_eq!(status.tracked.len(), 1);
    }

    #[test]
    fn ready_says_whether_the_signing_key_can_be_read() {
        let h = hook(&ALL);
        let now = ts("2026-01-01T11:00:00Z");
        assert_eq!(ready(&h, &SecretState::Present, now).status, "True");
        let no_key = ready(&h, &SecretState::NoKey, now);
        assert_eq!(no_key.reason, "SecretMissing");
        assert!(no_key.message.contains("has no key \"secret\""));
        assert!(
            ready(&h, &SecretState::Missing, now)
                .message
                .contains("does not exist")
        );
    }

    #[test]
    fn a_notification_is_signed_with_the_hooks_key_and_times_out() {
        let n = notification(&hook(&ALL), &pending("x"));
        assert_eq!(n.id, "x");
        assert_eq!(
            n.secret,
            Some(("ml".into(), "hook-key".into(), "secret".into()))
        );
        assert_eq!(n.timeout_ms, Some(3000));
    }

    #[test]
    fn due_deliveries_are_sent_in_batches_and_wait_without_the_key() {
        let h = hook(&ALL);
        let now = ts("2026-01-01T11:00:00Z");
        let many: Vec<HookDelivery> = (0..delivery::BATCH + 1)
            .map(|i| pending(&format!("d{i}")))
            .collect();
        let mut plan = Plan::new();
        send_due(&mut plan, &h, &many, true, now);
        assert_eq!(plan.notifications.len(), delivery::BATCH);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(1)));
        let mut plan = Plan::new();
        send_due(&mut plan, &h, &many, false, now);
        assert!(plan.notifications.is_empty());
        assert_eq!(plan.requeue_after(), Some(SECRET_RECHECK));
    }
}
