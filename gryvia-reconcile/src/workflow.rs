//! DAG workflows, as a pure function: a GryviaWorkflow runs its steps as GryviaAIJobs, each
//! once every step it depends on has succeeded.
//!
//! A step's job is named `<workflow>-<step>`, labelled `gryvia.io/workflow` and
//! `gryvia.io/workflow-step`, owned by the workflow (deleted with it) and created once: the job
//! spec is immutable, so a later change of the workflow or its template does not touch a step
//! that has started. A step's spec is inline (`job`) or rendered from a GryviaTemplate
//! (`templateRef`, with its parameters checked like `gryvia submit --template` does). The
//! workflow's `gryvia.io/priority-class` and `gryvia.io/reservation` annotations go on every
//! step's job.
//!
//! `failurePolicy: StopOnFailure` (the default) starts no step after one failed; the running
//! ones finish, then the workflow is Failed. `ContinueIndependent` keeps starting every step
//! whose dependencies succeeded; steps downstream of a failure never run. `parallelism` caps
//! the steps running at once. A dependency cycle, a job name over 52 characters or a template
//! that does not render is `Ready=False, InvalidSpec` with the reason named, and nothing runs.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::{
    FailurePolicy, GryviaAIJob, GryviaTemplate, GryviaWorkflow, GryviaWorkflowStatus, JobPhase,
    StepStatus, WorkflowStep, labels,
};
use serde::{Deserialize, Serialize};

use crate::{Child, EventType, Plan, Timestamp};

/// Label on a workflow step's job naming the step.
pub const STEP_LABEL: &str = labels::WORKFLOW_STEP;
/// How often a workflow waiting for a template that does not exist looks again.
pub const TEMPLATE_RECHECK: Duration = Duration::from_secs(30);
/// Annotations of the workflow that every step's job carries.
pub const INHERITED_ANNOTATIONS: [&str; 2] = [labels::PRIORITY_CLASS, labels::RESERVATION];

/// The annotations of `owner` that every job it makes carries ([`INHERITED_ANNOTATIONS`]:
/// its priority class and reservation), for workflow steps and tuner trials alike.
pub fn inherited_annotations(owner: &ObjectMeta) -> BTreeMap<String, String> {
    owner
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| INHERITED_ANNOTATIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A step's job as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepJob {
    /// The step (its `gryvia.io/workflow-step` label).
    pub step: String,
    /// The job's name.
    pub name: String,
    /// Its phase (`None` until the ai-operator has looked at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
}

impl StepJob {
    /// A job of a workflow step (`None` without the step label).
    pub fn of(job: &GryviaAIJob) -> Option<Self> {
        let step = job.metadata.labels.as_ref()?.get(STEP_LABEL)?.clone();
        let status = job.status.clone().unwrap_or_default();
        Some(StepJob {
            step,
            name: job.metadata.name.clone().unwrap_or_default(),
            phase: status.phase,
            start_time: status.start_time.map(|t| t.0),
            completion_time: status.completion_time.map(|t| t.0),
        })
    }
}

/// What the workflow reconcile knows: the jobs of its steps and the templates its steps name.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WorkflowWorld {
    /// Jobs labelled `gryvia.io/workflow: <name>` in the workflow's namespace.
    pub jobs: Vec<StepJob>,
    /// The templates named by `templateRef` steps, by name (absent ones are missing).
    pub templates: BTreeMap<String, GryviaTemplate>,
}

/// The name of a step's job.
pub fn job_name(workflow: &str, step: &str) -> String {
    format!("{workflow}-{step}")
}

/// A dependency cycle, as the steps along it (`a -> b -> a`), if there is one.
pub fn find_cycle(steps: &[WorkflowStep]) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, &[String]> = steps
        .iter()
        .map(|s| (s.name.as_str(), s.depends_on.as_slice()))
        .collect();
    // Depth-first search, colouring steps: on the path (grey) or finished (black).
    fn visit<'a>(
        step: &'a str,
        deps: &BTreeMap<&'a str, &'a [String]>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == step) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(step.to_owned());
            return Some(cycle);
        }
        if done.contains(step) {
            return None;
        }
        path.push(step);
        for d in deps.get(step).copied().unwrap_or_default() {
            if deps.contains_key(d.as_str())
                && let Some(c) = visit(d, deps, path, done)
            {
                return Some(c);
            }
        }
        path.pop();
        done.insert(step);
        None
    }
    let mut done = BTreeSet::new();
    for s in steps {
        if let Some(c) = visit(&s.name, &deps, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// What is wrong with the spec, in one line naming the field, or `None`.
pub fn check(workflow: &GryviaWorkflow) -> Option<String> {
    let name = workflow.metadata.name.clone().unwrap_or_default();
    let names: BTreeSet<&str> = workflow
        .spec
        .steps
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    for s in &workflow.spec.steps {
        if let Some(d) = s.depends_on.iter().find(|d| !names.contains(d.as_str())) {
            return Some(format!(
                "spec.steps[{}].dependsOn: {d:?} is not a step of this workflow",
                s.name
            ));
        }
        if s.job.is_some() == s.template_ref.is_some() {
            return Some(format!(
                "spec.steps[{}]: a step needs exactly one of job and templateRef",
                s.name
            ));
        }
        let job = job_name(&name, &s.name);
        if job.len() > 52 {
            return Some(format!(
                "spec.steps[{}]: its job name {job:?} would be longer than 52 characters; shorten the workflow or step name",
                s.name
            ));
        }
    }
    find_cycle(&workflow.spec.steps)
        .map(|c| format!("spec.steps: dependency cycle {}", c.join(" -> ")))
}

/// Why a step's job cannot be built (yet).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum StepError {
    /// The template the step names does not exist (yet): the step waits.
    #[error("step {step} waits for GryviaTemplate {template}, which does not exist")]
    TemplateMissing {
        /// The step.
        step: String,
        /// The template.
        template: String,
    },
    /// The template does not render with the step's parameters.
    #[error("spec.steps[{step}].templateRef: template {template}: {source}")]
    Render {
        /// The step.
        step: String,
        /// The template.
        template: String,
        /// Why, naming the parameter or field.
        #[source]
        source: crate::template::RenderError,
    },
    /// The step has neither an inline job nor a template (or both).
    #[error("spec.steps[{0}]: a step needs exactly one of job and templateRef")]
    NoJob(String),
}

/// The job of `step`, built from its inline spec or its template.
///
/// # Errors
/// [`StepError::TemplateMissing`] while its template does not exist, another [`StepError`]
/// when it cannot be built.
fn step_job(
    workflow: &GryviaWorkflow,
    step: &WorkflowStep,
    world: &WorkflowWorld,
) -> Result<GryviaAIJob, StepError> {
    let wf = workflow.metadata.name.clone().unwrap_or_default();
    let ns = workflow.metadata.namespace.clone().unwrap_or_default();
    let name = job_name(&wf, &step.name);
    let mut job = match (&step.job, &step.template_ref) {
        (Some(spec), _) => GryviaAIJob {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(ns),
                ..ObjectMeta::default()
            },
            spec: spec.clone(),
            status: None,
        },
        (None, Some(r)) => {
            let template =
                world
                    .templates
                    .get(&r.name)
                    .ok_or_else(|| StepError::TemplateMissing {
                        step: step.name.clone(),
                        template: r.name.clone(),
                    })?;
            crate::template::render(template, &name, &ns, &r.parameters).map_err(|source| {
                StepError::Render {
                    step: step.name.clone(),
                    template: r.name.clone(),
                    source,
                }
            })?
        }
        (None, None) => {
            return Err(StepError::NoJob(step.name.clone()));
        }
    };
    let labels = job.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(labels::WORKFLOW.to_owned(), wf);
    labels.insert(STEP_LABEL.to_owned(), step.name.clone());
    let inherited = inherited_annotations(&workflow.metadata);
    if !inherited.is_empty() {
        job.metadata.annotations = Some(inherited);
    }
    Ok(job)
}

/// The GryviaWorkflow controller's policy.
#[derive(Clone, Debug, Default)]
pub struct WorkflowReconciler;

/// The phase of every step's job (Pending until the ai-operator looked at it), by step;
/// steps without a job are absent.
fn step_phases(world: &WorkflowWorld) -> BTreeMap<&str, JobPhase> {
    world
        .jobs
        .iter()
        .map(|j| (j.step.as_str(), j.phase.unwrap_or(JobPhase::Pending)))
        .collect()
}

/// What starting the ready steps came to.
#[derive(Debug, Default)]
struct Starts<'a> {
    /// The steps started now, with their jobs.
    started: Vec<(&'a WorkflowStep, Child)>,
    /// A step waits for a template that does not exist.
    waiting_for: Option<String>,
    /// A step's job cannot be built from its template: nothing starts.
    invalid: Option<String>,
}

/// Whether `step` can start: not started, every dependency succeeded.
fn ready_to_start(step: &WorkflowStep, phases: &BTreeMap<&str, JobPhase>) -> bool {
    !phases.contains_key(step.name.as_str())
        && step
            .depends_on
            .iter()
            .all(|d| phases.get(d.as_str()) == Some(&JobPhase::Succeeded))
}

/// Builds the jobs of the steps that can start, in spec order, as many as `parallelism`
/// leaves room for; the first step whose template does not render stops everything.
fn start_steps<'a>(
    plan: &mut Plan<GryviaWorkflowStatus>,
    workflow: &'a GryviaWorkflow,
    world: &WorkflowWorld,
    phases: &BTreeMap<&str, JobPhase>,
    active: usize,
) -> Starts<'a> {
    let mut out = Starts::default();
    let slots = workflow.spec.parallelism.map_or(usize::MAX, |p| {
        usize::try_from(p).unwrap_or(0).saturating_sub(active)
    });
    for s in &workflow.spec.steps {
        if out.started.len() >= slots {
            break;
        }
        if !ready_to_start(s, phases) {
            continue;
        }
        match step_job(workflow, s, world) {
            Ok(job) => match Child::from_resource(&job) {
                Ok(child) => out.started.push((s, child)),
                Err(e) => {
                    plan.apply_built(Err(e));
                }
            },
            Err(e @ StepError::TemplateMissing { .. }) => {
                out.waiting_for = Some(e.to_string());
                plan.requeue(TEMPLATE_RECHECK);
            }
            Err(e) => {
                // Nothing starts from an invalid spec (steps already running finish).
                out.invalid = Some(e.to_string());
                out.started.clear();
                break;
            }
        }
    }
    out
}

/// The status of every step, in spec order (`started`: the steps whose job is created now).
fn step_statuses(
    workflow: &GryviaWorkflow,
    world: &WorkflowWorld,
    started: &[(&WorkflowStep, Child)],
) -> Vec<StepStatus> {
    let jobs: BTreeMap<&str, &StepJob> = world.jobs.iter().map(|j| (j.step.as_str(), j)).collect();
    let wf = workflow.metadata.name.as_deref().unwrap_or_default();
    workflow
        .spec
        .steps
        .iter()
        .map(|s| {
            let job = jobs.get(s.name.as_str());
            let starting = started.iter().any(|(t, _)| t.name == s.name);
            StepStatus {
                name: s.name.clone(),
                phase: job.map_or(JobPhase::Pending, |j| j.phase.unwrap_or(JobPhase::Pending)),
                job_name: job
                    .map(|j| j.name.clone())
                    .or_else(|| starting.then(|| job_name(wf, &s.name))),
                start_time: job.and_then(|j| j.start_time).map(Time),
                completion_time: job.and_then(|j| j.completion_time).map(Time),
            }
        })
        .collect()
}

/// The workflow's phase: Succeeded when every step did; Failed when nothing runs and nothing
/// more will after an invalid spec or a failed step; Running while anything runs or ran;
/// else Pending.
fn workflow_phase(
    steps: &[StepStatus],
    invalid: bool,
    failed: bool,
    still_active: bool,
) -> JobPhase {
    if steps.iter().all(|s| s.phase == JobPhase::Succeeded) {
        JobPhase::Succeeded
    } else if (invalid || failed) && !still_active {
        // Under StopOnFailure nothing starts after a failure; under ContinueIndependent every
        // startable step has been started.
        JobPhase::Failed
    } else if still_active || steps.iter().any(|s| s.phase != JobPhase::Pending) {
        JobPhase::Running
    } else {
        JobPhase::Pending
    }
}

/// The Ready condition's status, reason and message.
fn ready(
    invalid: Option<&String>,
    phase: JobPhase,
    failed: &[&str],
    waiting_for: Option<&String>,
    succeeded: i32,
    steps: usize,
) -> (Status, &'static str, String) {
    match (invalid, phase) {
        (Some(reason), _) => (
            Status::False,
            conditions::REASON_INVALID_SPEC,
            reason.clone(),
        ),
        (None, JobPhase::Succeeded) => (
            Status::True,
            "Succeeded",
            format!("all {steps} steps succeeded"),
        ),
        (None, JobPhase::Failed) => (
            Status::False,
            "StepFailed",
            format!("step {} failed", failed.join(", step ")),
        ),
        (None, _) => match waiting_for {
            Some(w) => (Status::False, "TemplateNotFound", w.clone()),
            None => (
                Status::True,
                "Running",
                format!("{succeeded} of {steps} steps succeeded"),
            ),
        },
    }
}

impl crate::Reconcile for WorkflowReconciler {
    type Object = GryviaWorkflow;
    type World = WorkflowWorld;
    type Status = GryviaWorkflowStatus;

    fn name(&self) -> &'static str {
        "gryvia-workflows"
    }

    fn reconcile(
        &self,
        workflow: &GryviaWorkflow,
        world: &WorkflowWorld,
        now: Timestamp,
    ) -> Plan<GryviaWorkflowStatus> {
        let mut plan = Plan::new();
        let current = workflow.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let steps = &workflow.spec.steps;
        let phases = step_phases(world);
        let phase_of = |step: &str| phases.get(step).copied();
        let failed: Vec<&str> = steps
            .iter()
            .filter(|s| phase_of(&s.name) == Some(JobPhase::Failed))
            .map(|s| s.name.as_str())
            .collect();
        let active = steps
            .iter()
            .filter(|s| phase_of(&s.name).is_some_and(|p| !p.is_finished()))
            .count();
        let mut invalid = check(workflow);
        let mut starts = Starts::default();
        if invalid.is_none()
            && (failed.is_empty()
                || workflow.spec.failure_policy == FailurePolicy::ContinueIndependent)
        {
            starts = start_steps(&mut plan, workflow, world, &phases, active);
            invalid = starts.invalid.take();
        }
        for (s, child) in &starts.started {
            plan.event(
                EventType::Normal,
                "StepStarted",
                format!(
                    "step {} started as GryviaAIJob {}",
                    s.name, child.object_ref.name
                ),
            );
            plan.apply_child(child.clone());
        }
        status.steps = step_statuses(workflow, world, &starts.started);
        status.succeeded_steps = i32::try_from(
            status
                .steps
                .iter()
                .filter(|s| s.phase == JobPhase::Succeeded)
                .count(),
        )
        .unwrap_or(i32::MAX);
        let still_active = active + starts.started.len() > 0;
        let phase = workflow_phase(
            &status.steps,
            invalid.is_some(),
            !failed.is_empty(),
            still_active,
        );
        let (cond_status, reason, message) = ready(
            invalid.as_ref(),
            phase,
            &failed,
            starts.waiting_for.as_ref(),
            status.succeeded_steps,
            steps.len(),
        );
        let was = conditions::find(&current.conditions, conditions::READY).cloned();
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                cond_status,
                reason,
                message.clone(),
                workflow.metadata.generation,
                now,
            ),
        );
        if current.phase != Some(phase) && phase.is_finished() {
            let type_ = if phase == JobPhase::Succeeded {
                EventType::Normal
            } else {
                EventType::Warning
            };
            plan.event(type_, reason, message.clone());
        } else if invalid.is_some() && was.is_none_or(|c| c.message != message) {
            plan.event(EventType::Warning, conditions::REASON_INVALID_SPEC, message);
        }
        status.phase = Some(phase);
        plan.set_status_if_changed(workflow.status.as_ref(), status);
        plan
    }

    fn record_failure(
        &self,
        workflow: &GryviaWorkflow,
        error: &str,
        now: Timestamp,
    ) -> Option<GryviaWorkflowStatus> {
        // A step's job refused (by an admission webhook, a quota): the workflow says so.
        let mut status = workflow.status.clone().unwrap_or_default();
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                Status::False,
                "StepNotCreated",
                error,
                workflow.metadata.generation,
                now,
            ),
        );
        Some(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reconcile;
    use gryvia_types::{GryviaAIJobSpec, GryviaWorkflowSpec, TemplateRef};

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn spec(image: &str) -> GryviaAIJobSpec {
        serde_json::from_value(serde_json::json!({"image": image, "gpus": 1})).unwrap()
    }

    fn step(name: &str, deps: &[&str]) -> WorkflowStep {
        WorkflowStep {
            name: name.to_owned(),
            depends_on: deps.iter().map(|d| (*d).to_owned()).collect(),
            job: Some(spec(&format!("registry.local/{name}:1"))),
            template_ref: None,
        }
    }

    fn workflow(steps: Vec<WorkflowStep>) -> GryviaWorkflow {
        let mut wf = GryviaWorkflow::new(
            "pipe",
            GryviaWorkflowSpec {
                steps,
                failure_policy: FailurePolicy::StopOnFailure,
                parallelism: None,
            },
        );
        wf.metadata.namespace = Some("ml".to_owned());
        wf.metadata.generation = Some(1);
        wf
    }

    /// A diamond: prepare -> (train-a, train-b) -> evaluate.
    fn diamond() -> GryviaWorkflow {
        workflow(vec![
            step("prepare", &[]),
            step("train-a", &["prepare"]),
            step("train-b", &["prepare"]),
            step("evaluate", &["train-a", "train-b"]),
        ])
    }

    fn job(step: &str, phase: JobPhase) -> StepJob {
        StepJob {
            step: step.to_owned(),
            name: job_name("pipe", step),
            phase: Some(phase),
            start_time: Some(ts("2026-01-01T10:00:00Z")),
            completion_time: phase.is_finished().then(|| ts("2026-01-01T10:05:00Z")),
        }
    }

    fn started(plan: &Plan<GryviaWorkflowStatus>) -> Vec<String> {
        plan.apply
            .iter()
            .map(|c| c.object_ref.name.clone())
            .collect()
    }

    fn world(jobs: Vec<StepJob>) -> WorkflowWorld {
        WorkflowWorld {
            jobs,
            templates: BTreeMap::new(),
        }
    }

    const NOW: &str = "2026-01-01T11:00:00Z";

    #[test]
    fn steps_start_when_their_dependencies_succeed() {
        let wf = diamond();
        let plan = WorkflowReconciler.reconcile(&wf, &world(vec![]), ts(NOW));
        assert_eq!(started(&plan), ["pipe-prepare"]);
        let child = &plan.apply[0];
        assert_eq!(child.object["metadata"]["labels"][labels::WORKFLOW], "pipe");
        assert_eq!(child.object["metadata"]["labels"][STEP_LABEL], "prepare");
        assert_eq!(child.object["spec"]["image"], "registry.local/prepare:1");
        assert!(child.owned);
        assert_eq!(child.object_ref.api_version, "gryvia.io/v1alpha1");
        assert_eq!(child.object_ref.kind, "GryviaAIJob");
        assert_eq!(child.object_ref.namespace.as_deref(), Some("ml"));
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Running));
        assert_eq!(st.steps[0].job_name.as_deref(), Some("pipe-prepare"));
        assert_eq!(st.steps[1].job_name, None);

        // Prepare running: nothing new.
        let plan = WorkflowReconciler.reconcile(
            &wf,
            &world(vec![job("prepare", JobPhase::Running)]),
            ts(NOW),
        );
        assert!(started(&plan).is_empty());
        // Prepare done: both trainings at once.
        let plan = WorkflowReconciler.reconcile(
            &wf,
            &world(vec![job("prepare", JobPhase::Succeeded)]),
            ts(NOW),
        );
        assert_eq!(started(&plan), ["pipe-train-a", "pipe-train-b"]);
        // One training done: evaluate still waits.
        let w = world(vec![
            job("prepare", JobPhase::Succeeded),
            job("train-a", JobPhase::Succeeded),
            job("train-b", JobPhase::Running),
        ]);
        assert!(started(&WorkflowReconciler.reconcile(&wf, &w, ts(NOW))).is_empty());
        let w = world(vec![
            job("prepare", JobPhase::Succeeded),
            job("train-a", JobPhase::Succeeded),
            job("train-b", JobPhase::Succeeded),
        ]);
        assert_eq!(
            started(&WorkflowReconciler.reconcile(&wf, &w, ts(NOW))),
            ["pipe-evaluate"]
        );
        let w = world(vec![
            job("prepare", JobPhase::Succeeded),
            job("train-a", JobPhase::Succeeded),
            job("train-b", JobPhase::Succeeded),
            job("evaluate", JobPhase::Succeeded),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert!(started(&plan).is_empty());
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Succeeded));
        assert_eq!(st.succeeded_steps, 4);
        assert_eq!(
            st.steps[3].completion_time,
            Some(Time(ts("2026-01-01T10:05:00Z")))
        );
        assert_eq!(plan.events.last().unwrap().reason, "Succeeded");
    }

    #[test]
    fn a_second_reconcile_after_the_plan_is_a_noop() {
        let mut wf = diamond();
        let w = world(vec![job("prepare", JobPhase::Running)]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        wf.status = plan.status;
        let again = WorkflowReconciler.reconcile(&wf, &w, ts("2026-01-01T11:00:05Z"));
        assert!(again.is_noop(), "{:?}", again.summary());
    }

    #[test]
    fn stop_on_failure_starts_nothing_after_a_failure_and_fails_when_the_rest_finished() {
        let wf = diamond();
        let w = world(vec![
            job("prepare", JobPhase::Succeeded),
            job("train-a", JobPhase::Failed),
            job("train-b", JobPhase::Running),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert!(started(&plan).is_empty());
        assert_eq!(
            plan.status.unwrap().phase,
            Some(JobPhase::Running),
            "train-b still runs"
        );
        let w = world(vec![
            job("prepare", JobPhase::Succeeded),
            job("train-a", JobPhase::Failed),
            job("train-b", JobPhase::Succeeded),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert!(started(&plan).is_empty(), "evaluate never runs");
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Failed));
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str()),
            ("StepFailed", "step train-a failed")
        );
        assert_eq!(st.steps[3].phase, JobPhase::Pending);
    }

    #[test]
    fn continue_independent_runs_what_does_not_depend_on_the_failure() {
        let mut wf = workflow(vec![
            step("a", &[]),
            step("b", &[]),
            step("after-a", &["a"]),
            step("after-b", &["b"]),
        ]);
        wf.spec.failure_policy = FailurePolicy::ContinueIndependent;
        let w = world(vec![
            job("a", JobPhase::Failed),
            job("b", JobPhase::Succeeded),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert_eq!(started(&plan), ["pipe-after-b"]);
        assert_eq!(plan.status.unwrap().phase, Some(JobPhase::Running));
        let w = world(vec![
            job("a", JobPhase::Failed),
            job("b", JobPhase::Succeeded),
            job("after-b", JobPhase::Succeeded),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert!(started(&plan).is_empty());
        assert_eq!(plan.status.unwrap().phase, Some(JobPhase::Failed));
    }

    #[test]
    fn parallelism_caps_the_running_steps() {
        let mut wf = workflow((0..5).map(|i| step(&format!("s{i}"), &[])).collect());
        wf.spec.parallelism = Some(2);
        let plan = WorkflowReconciler.reconcile(&wf, &world(vec![]), ts(NOW));
        assert_eq!(started(&plan), ["pipe-s0", "pipe-s1"]);
        let w = world(vec![
            job("s0", JobPhase::Succeeded),
            job("s1", JobPhase::Running),
        ]);
        assert_eq!(
            started(&WorkflowReconciler.reconcile(&wf, &w, ts(NOW))),
            ["pipe-s2"]
        );
    }

    #[test]
    fn a_refused_step_is_recorded_in_the_ready_condition() {
        let wf = diamond();
        let st = WorkflowReconciler
            .record_failure(&wf, "apply GryviaAIJob/ml/pipe-prepare: denied", ts(NOW))
            .unwrap();
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.message.as_str()
            ),
            (
                "False",
                "StepNotCreated",
                "apply GryviaAIJob/ml/pipe-prepare: denied"
            )
        );
    }

    #[test]
    fn a_cycle_is_named_and_nothing_runs() {
        let wf = workflow(vec![
            step("a", &["c"]),
            step("b", &["a"]),
            step("c", &["b"]),
            step("d", &[]),
        ]);
        let plan = WorkflowReconciler.reconcile(&wf, &world(vec![]), ts(NOW));
        assert!(started(&plan).is_empty());
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Failed));
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(ready.reason, conditions::REASON_INVALID_SPEC);
        assert_eq!(
            ready.message,
            "spec.steps: dependency cycle a -> c -> b -> a"
        );
        assert_eq!(plan.events[0].reason, conditions::REASON_INVALID_SPEC);
        assert_eq!(find_cycle(&diamond().spec.steps), None);
        assert_eq!(
            find_cycle(&[step("x", &["x"])]),
            Some(vec!["x".to_owned(), "x".to_owned()])
        );
    }

    #[test]
    fn a_job_name_over_52_characters_is_refused() {
        let mut wf = workflow(vec![step("a-rather-long-step-name-for-a-job", &[])]);
        wf.metadata.name = Some("a-workflow-with-a-long-name".to_owned());
        let plan = WorkflowReconciler.reconcile(&wf, &world(vec![]), ts(NOW));
        assert!(started(&plan).is_empty());
        let st = plan.status.unwrap();
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert!(
            ready.message.contains("longer than 52 characters"),
            "{}",
            ready.message
        );
    }

    fn template() -> GryviaTemplate {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
            "metadata": {"name": "fine-tune"},
            "spec": {
                "category": "fine-tuning",
                "defaults": {"image": "registry.local/ft:{{ .version }}", "gpus": 2},
                "parameters": [{"name": "version", "type": "string", "required": true}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn template_steps_render_wait_for_their_template_and_refuse_bad_parameters() {
        let mut wf = workflow(vec![WorkflowStep {
            name: "ft".to_owned(),
            depends_on: vec![],
            job: None,
            template_ref: Some(TemplateRef {
                name: "fine-tune".to_owned(),
                parameters: [("version".to_owned(), "v3".to_owned())].into(),
            }),
        }]);
        wf.metadata.annotations = Some(
            [
                (labels::PRIORITY_CLASS.to_owned(), "urgent".to_owned()),
                ("other".to_owned(), "x".to_owned()),
            ]
            .into(),
        );
        // No template yet: wait, say so, look again.
        let plan = WorkflowReconciler.reconcile(&wf, &world(vec![]), ts(NOW));
        assert!(started(&plan).is_empty());
        assert_eq!(plan.requeue_after(), Some(TEMPLATE_RECHECK));
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Pending));
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(ready.reason, "TemplateNotFound");

        let mut w = world(vec![]);
        w.templates.insert("fine-tune".to_owned(), template());
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert_eq!(started(&plan), ["pipe-ft"]);
        let job = &plan.apply[0].object;
        assert_eq!(job["spec"]["image"], "registry.local/ft:v3");
        assert_eq!(job["spec"]["templateRef"]["name"], "fine-tune");
        assert_eq!(job["metadata"]["labels"][labels::TEMPLATE], "fine-tune");
        assert_eq!(job["metadata"]["labels"][STEP_LABEL], "ft");
        assert_eq!(
            job["metadata"]["annotations"][labels::PRIORITY_CLASS],
            "urgent"
        );
        assert!(job["metadata"]["annotations"].get("other").is_none());

        if let Some(r) = wf.spec.steps[0].template_ref.as_mut() {
            r.parameters.insert("unknown".to_owned(), "1".to_owned());
        }
        let plan = WorkflowReconciler.reconcile(&wf, &w, ts(NOW));
        assert!(started(&plan).is_empty());
        let st = plan.status.unwrap();
        assert_eq!(st.phase, Some(JobPhase::Failed));
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert!(
            ready
                .message
                .starts_with("spec.steps[ft].templateRef: template fine-tune:"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn a_step_without_a_phase_is_pending() {
        let mut j = job("prepare", JobPhase::Running);
        j.phase = None;
        let w = world(vec![j]);
        assert_eq!(step_phases(&w).get("prepare"), Some(&JobPhase::Pending));
    }

    #[test]
    fn a_step_is_ready_once_every_dependency_succeeded() {
        let wf = diamond();
        let evaluate = &wf.spec.steps[3];
        let mut phases = BTreeMap::from([("train-a", JobPhase::Succeeded)]);
        assert!(!ready_to_start(evaluate, &phases));
        phases.insert("train-b", JobPhase::Succeeded);
        assert!(ready_to_start(evaluate, &phases));
        phases.insert("evaluate", JobPhase::Pending);
        assert!(!ready_to_start(evaluate, &phases), "started already");
    }

    #[test]
    fn starting_respects_parallelism() {
        let mut wf = diamond();
        wf.spec.parallelism = Some(2);
        let w = world(vec![job("prepare", JobPhase::Succeeded)]);
        let phases = step_phases(&w);
        let mut plan = Plan::new();
        let starts = start_steps(&mut plan, &wf, &w, &phases, 1);
        let names: Vec<&str> = starts
            .started
            .iter()
            .map(|(s, _)| s.name.as_str())
            .collect();
        assert_eq!(
            names,
            vec!["train-a"],
            "one slot is taken by a running step"
        );
        assert!(starts.invalid.is_none() && starts.waiting_for.is_none());
    }

    #[test]
    fn step_statuses_name_the_jobs_of_started_steps() {
        let wf = diamond();
        let w = world(vec![job("prepare", JobPhase::Succeeded)]);
        let mut plan = Plan::new();
        let starts = start_steps(&mut plan, &wf, &w, &step_phases(&w), 0);
        let s = step_statuses(&wf, &w, &starts.started);
        assert_eq!(s[0].phase, JobPhase::Succeeded);
        assert_eq!(s[1].job_name.as_deref(), Some("pipe-train-a"));
        assert_eq!(s[3].job_name, None);
    }

    #[test]
    fn the_workflow_fails_only_when_nothing_runs_any_more() {
        let st = |phase| StepStatus {
            name: "s".into(),
            phase,
            job_name: None,
            start_time: None,
            completion_time: None,
        };
        let done = [st(JobPhase::Succeeded)];
        assert_eq!(
            workflow_phase(&done, false, false, false),
            JobPhase::Succeeded
        );
        let mixed = [st(JobPhase::Failed), st(JobPhase::Pending)];
        assert_eq!(workflow_phase(&mixed, false, true, true), JobPhase::Running);
        assert_eq!(workflow_phase(&mixed, false, true, false), JobPhase::Failed);
        assert_eq!(
            workflow_phase(&mixed[1..], true, false, false),
            JobPhase::Failed
        );
        assert_eq!(
            workflow_phase(&mixed[1..], false, false, false),
            JobPhase::Pending
        );
    }

    #[test]
    fn ready_names_the_invalid_field_the_failed_steps_or_the_missing_template() {
        let why = "spec.steps: cycle".to_owned();
        assert_eq!(
            ready(Some(&why), JobPhase::Failed, &[], None, 0, 2).1,
            conditions::REASON_INVALID_SPEC
        );
        assert_eq!(
            ready(None, JobPhase::Failed, &["a", "b"], None, 0, 2).2,
            "step a, step b failed"
        );
        let wait = "waits".to_owned();
        assert_eq!(
            ready(None, JobPhase::Pending, &[], Some(&wait), 0, 2).1,
            "TemplateNotFound"
        );
        assert_eq!(
            ready(None, JobPhase::Running, &[], None, 1, 2).2,
            "1 of 2 steps succeeded"
        );
    }
}
