//! Hyperparameter studies, as pure functions: a GryviaAutoTuner runs trials as GryviaAIJobs
//! rendered from its `trialTemplate` with sampled parameter values, reads the objective they
//! report, stops the poor ones early (ASHA) and names the best.
//!
//! - **Trials.** Trial `i` is the GryviaAIJob `<tuner>-<i>`, owned by the tuner (deleted with
//!   it), labelled `gryvia.io/autotuner` and `gryvia.io/trial-index`, its values in the
//!   annotation `gryvia.io/trial-parameters`. Its spec is the template with every
//!   `{{ .name }}` in its strings replaced by the value, and `GRYVIA_PARAM_<NAME>` (the name
//!   upper-cased) in its environment. At most `parallelTrials` run at once, `maxTrials` in
//!   all. A trial is an ordinary job: the queue, quotas, the budget gate and retries apply.
//! - **Metrics** ([`metrics`]): `gryvia-metric <metric>=<value> step=<n>` lines in the log of
//!   the trial's first worker, or in its termination message. The objective is the last value
//!   reported.
//! - **Algorithms** (all seeded by `spec.seed` and the trial's index, see [`suggest`]): `grid`
//!   ([`space::Space::grid_point`]), `random`, `bayesian` ([`bayes`]: a Gaussian process with
//!   expected improvement after [`initial_random`] random trials), `asha` (random trials with
//!   early stopping by [`asha`]).
//! - **Never stuck.** A failed trial counts as failed and the study goes on; a trial whose job
//!   disappears is recorded as vanished (after [`VANISH_GRACE`] for a job never seen); a
//!   trial stopped early is recorded first and its job deleted on the next reconcile, so its
//!   GPUs are freed at once and the record survives a crash in between. Jobs labelled for the
//!   tuner but missing from its status (the status write was lost) are adopted from their
//!   annotation. The study is rebuilt from its status and its jobs alone.
//! - **Invalid specs** (bounds, a grid that cannot be made, a template that does not render,
//!   a trial name over 52 characters) are `Ready=False, InvalidSpec` with the field named,
//!   and no trial starts.

pub mod asha;
pub mod bayes;
pub mod metrics;
pub mod rng;
pub mod space;

use std::collections::BTreeMap;
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::api::core::v1::EnvVar;
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::{
    Goal, GryviaAIJob, GryviaAIJobSpec, GryviaAutoTuner, GryviaAutoTunerSpec,
    GryviaAutoTunerStatus, JobPhase, Trial, TunerAlgorithm, labels,
};
use serde::{Deserialize, Serialize};

use crate::{Child, EventType, Plan, Timestamp};
use metrics::Report;
use rng::{Purpose, Rng};
use space::{Params, Space};

/// How long a trial whose job was never seen may be missing from the operator's cache before
/// it counts as vanished (the cache lags a create by a moment).
pub const VANISH_GRACE: Duration = Duration::from_secs(30);
/// How soon a study whose trial was just stopped early looks again, to delete its job.
pub const STOP_DELAY: Duration = Duration::from_millis(500);
/// How often a study with running trials reads their metrics, unless the operator says.
pub const DEFAULT_POLL: Duration = Duration::from_secs(10);

/// The name of trial `index`'s job.
pub fn trial_name(tuner: &str, index: i32) -> String {
    format!("{tuner}-{index}")
}

/// Random trials a bayesian study runs before the model: five, or one more than the
/// parameters when there are more.
pub fn initial_random(space: &Space) -> usize {
    (space.params.len() + 1).max(5)
}

/// Whether nothing more happens to `t`.
pub fn trial_done(t: &Trial) -> bool {
    t.early_stopped || t.vanished || t.phase.is_some_and(JobPhase::is_finished)
}

/// `value` to be minimised under `goal`.
fn minimised(goal: Goal, value: f64) -> f64 {
    match goal {
        Goal::Minimize => value,
        Goal::Maximize => -value,
    }
}

/// The parameters of the next trial of a study given its `trials` so far (a study's
/// `status.trials`, or a notebook's own list of the same shape): the trial's index is one
/// past the highest there. `None` when the study has nothing more to try (`maxTrials`
/// reached, the grid done).
///
/// Deterministic: the same spec (seed included) and the same trials give the same values.
/// `grid`, `random` and `asha` depend on the index alone; `bayesian` also on the finished
/// trials' objectives and the running trials' values.
///
/// # Errors
/// The spec's search space is invalid (the message names the field).
pub fn suggest(spec: &GryviaAutoTunerSpec, trials: &[Trial]) -> Result<Option<Params>, String> {
    let space = Space::of(spec)?;
    Ok(suggest_in(&space, spec, trials))
}

fn suggest_in(space: &Space, spec: &GryviaAutoTunerSpec, trials: &[Trial]) -> Option<Params> {
    let index = trials.iter().map(|t| t.index + 1).max().unwrap_or(0);
    if index >= spec.max_trials {
        return None;
    }
    let at = u64::try_from(index).unwrap_or_default();
    let mut sample = Rng::stream(spec.seed, at, Purpose::Sample);
    match spec.algorithm {
        TunerAlgorithm::Grid => space.grid_point(at),
        TunerAlgorithm::Random | TunerAlgorithm::Asha => Some(space.sample(&mut sample)),
        TunerAlgorithm::Bayesian => {
            if usize::try_from(index).unwrap_or_default() < initial_random(space) {
                return Some(space.sample(&mut sample));
            }
            let goal = spec.objective.goal;
            let observed: Vec<(Params, f64)> = trials
                .iter()
                .filter(|t| t.phase == Some(JobPhase::Succeeded) && !t.early_stopped)
                .filter_map(|t| Some((t.parameters.clone(), minimised(goal, t.objective_value?))))
                .collect();
            let pending: Vec<Params> = trials
                .iter()
                .filter(|t| !trial_done(t))
                .map(|t| t.parameters.clone())
                .collect();
            let mut candidates = Rng::stream(spec.seed, at, Purpose::Candidates);
            bayes::suggest(space, &observed, &pending, &mut candidates)
                .or_else(|| Some(space.sample(&mut sample)))
        }
    }
}

/// A trial's GryviaAIJob with `params` filled in.
///
/// # Errors
/// The template does not render (a placeholder naming no parameter, a value that makes the
/// spec unreadable), or the job name is too long; the message names the field.
pub fn trial_job(
    tuner: &GryviaAutoTuner,
    index: i32,
    params: &Params,
) -> Result<GryviaAIJob, String> {
    let name = trial_name(&tuner.metadata.name.clone().unwrap_or_default(), index);
    if name.len() > 52 {
        return Err(format!(
            "metadata.name: trial job names such as {name:?} would be longer than 52 characters; shorten the tuner's name"
        ));
    }
    let mut value = serde_json::to_value(&tuner.spec.trial_template)
        .map_err(|e| format!("spec.trialTemplate: cannot be read: {e}"))?;
    crate::template::substitute(&mut value, "spec.trialTemplate", params)
        .map_err(|e| e.to_string())?;
    let mut spec: GryviaAIJobSpec = serde_json::from_value(value)
        .map_err(|e| format!("spec.trialTemplate: not a job spec once filled in: {e}"))?;
    for (k, v) in params {
        let env = format!("GRYVIA_PARAM_{}", k.to_uppercase());
        spec.env.retain(|e| e.name != env);
        spec.env.push(EnvVar {
            name: env,
            value: Some(v.clone()),
            value_from: None,
        });
    }
    let tuner_name = tuner.metadata.name.clone().unwrap_or_default();
    let mut annotations = crate::workflow::inherited_annotations(&tuner.metadata);
    annotations.insert(
        labels::TRIAL_PARAMETERS.to_owned(),
        serde_json::to_string(params).unwrap_or_default(),
    );
    Ok(GryviaAIJob {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: tuner.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (labels::AUTOTUNER.to_owned(), tuner_name),
                (labels::TRIAL_INDEX.to_owned(), index.to_string()),
            ])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// What is wrong with the spec, naming the field, or `None`: the space, early stopping
/// without ASHA, and a trial rendered from the first point.
pub fn check(tuner: &GryviaAutoTuner) -> Option<String> {
    let spec = &tuner.spec;
    let space = match Space::of(spec) {
        Ok(s) => s,
        Err(e) => return Some(e),
    };
    if spec.parallel_trials > spec.max_trials {
        return Some("spec.parallelTrials must not exceed spec.maxTrials".to_owned());
    }
    match (spec.algorithm, &spec.early_stopping) {
        (TunerAlgorithm::Asha, None) => {
            return Some(
                "spec.earlyStopping: asha needs earlyStopping (minTrials, reductionFactor)"
                    .to_owned(),
            );
        }
        (TunerAlgorithm::Asha, _) | (_, None) => {}
        (_, Some(_)) => {
            return Some(
                "spec.earlyStopping: only the asha algorithm stops trials early".to_owned(),
            );
        }
    }
    let first = suggest_in(&space, spec, &[]).unwrap_or_default();
    trial_job(tuner, spec.max_trials - 1, &first).err()
}

/// A trial's job as observed, with what its first worker reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrialJob {
    /// The job's name.
    pub name: String,
    /// Its `gryvia.io/trial-index` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i32>,
    /// Its `gryvia.io/trial-parameters` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Params>,
    /// Its phase (`None` until the ai-operator has looked at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,
    /// When it was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<Timestamp>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
    /// Its status message (why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The objective's reports in its first worker's log and termination message, when the
    /// observer read them (`None`: not read, e.g. the trial was already done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reports: Option<Vec<Report>>,
}

impl TrialJob {
    /// A trial's job as the observer sees it (its reports not read: `None`).
    pub fn of(job: &GryviaAIJob) -> Self {
        let status = job.status.clone().unwrap_or_default();
        let meta = &job.metadata;
        TrialJob {
            name: meta.name.clone().unwrap_or_default(),
            index: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::TRIAL_INDEX))
                .and_then(|i| i.parse().ok()),
            parameters: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::TRIAL_PARAMETERS))
                .and_then(|p| serde_json::from_str(p).ok()),
            phase: status.phase,
            creation_time: meta.creation_timestamp.clone().map(|t| t.0),
            completion_time: status.completion_time.map(|t| t.0),
            message: status.message,
            reports: None,
        }
    }
}

/// What the tuner reconcile knows: the GryviaAIJobs labelled with its name and owned by it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TunerWorld {
    /// The trials' jobs.
    pub jobs: Vec<TrialJob>,
}

/// The GryviaAutoTuner controller's policy.
#[derive(Clone, Debug)]
pub struct TunerReconciler {
    /// How often a study with running trials reads their metrics.
    pub poll: Duration,
}

impl Default for TunerReconciler {
    fn default() -> Self {
        TunerReconciler { poll: DEFAULT_POLL }
    }
}

/// The trials of the status and the jobs not in it (adopted), by index.
fn merged_trials(status: &GryviaAutoTunerStatus, world: &TunerWorld) -> BTreeMap<i32, Trial> {
    let mut trials: BTreeMap<i32, Trial> =
        status.trials.iter().map(|t| (t.index, t.clone())).collect();
    for j in &world.jobs {
        let (Some(index), Some(parameters)) = (j.index, &j.parameters) else {
            continue;
        };
        trials.entry(index).or_insert_with(|| Trial {
            creation_time: j.creation_time.map(Time),
            ..Trial::new(j.name.clone(), index, parameters.clone())
        });
    }
    trials
}

/// What one reconcile does to the trials, gathered as it goes.
struct Pass<'a> {
    tuner: &'a GryviaAutoTuner,
    now: Timestamp,
    plan: Plan<GryviaAutoTunerStatus>,
    /// Trials with rungs first reached in this pass: (index, from which rung on).
    reached: Vec<(i32, usize)>,
}

impl Pass<'_> {
    /// Brings `t` up to date with its job (`None`: not in the cache).
    fn observe(&mut self, t: &mut Trial, job: Option<&TrialJob>) {
        if trial_done(t) {
            return;
        }
        let Some(job) = job else {
            self.missing(t);
            return;
        };
        if job.phase.is_some() {
            t.phase = job.phase;
        }
        if let Some(reports) = &job.reports {
            if let Some(last) = reports.last() {
                t.objective_value = Some(last.value);
                t.step = Some(last.step);
            }
            if let Some(es) = &self.tuner.spec.early_stopping {
                let rungs = asha::rungs(reports, es);
                let from = t.rungs.len();
                if rungs.len() > from {
                    t.rungs.extend_from_slice(&rungs[from..]);
                    self.reached.push((t.index, from));
                }
            }
        }
        match t.phase {
            Some(JobPhase::Succeeded) => {
                t.completion_time = Some(Time(job.completion_time.unwrap_or(self.now)));
                if t.objective_value.is_none() {
                    t.message = Some(format!(
                        "succeeded without reporting {}",
                        self.tuner.spec.objective.metric
                    ));
                }
            }
            Some(JobPhase::Failed) => {
                t.completion_time = Some(Time(job.completion_time.unwrap_or(self.now)));
                let why = job
                    .message
                    .clone()
                    .unwrap_or_else(|| "its job failed".to_owned());
                self.plan.event(
                    EventType::Warning,
                    "TrialFailed",
                    format!("trial {} failed: {why}; the study goes on", t.name),
                );
                t.message = Some(why);
            }
            _ => {}
        }
    }

    /// A trial whose job is not in the cache: vanished once it was seen or the grace passed.
    fn missing(&mut self, t: &mut Trial) {
        let created = t.creation_time.as_ref().map_or(self.now, |c| c.0);
        let grace_left = self
            .now
            .duration_since(created)
            .try_into()
            .map_or(VANISH_GRACE, |elapsed: Duration| {
                VANISH_GRACE.saturating_sub(elapsed)
            });
        if t.phase.is_none() && !grace_left.is_zero() {
            self.plan.requeue(grace_left);
            return;
        }
        t.vanished = true;
        t.completion_time = Some(Time(self.now));
        let seen = t.phase.map_or_else(
            || "before it was seen".to_owned(),
            |p| format!("while {p:?}"),
        );
        let why = format!("its GryviaAIJob {} disappeared {seen}", t.name);
        self.plan.event(
            EventType::Warning,
            "TrialVanished",
            format!("trial {}: {why}; counted as failed", t.name),
        );
        t.message = Some(why);
    }

    /// ASHA: judges the rungs first reached in this pass, in index order, against every
    /// value at the same rung.
    fn judge(&mut self, trials: &mut BTreeMap<i32, Trial>) {
        let Some(es) = self.tuner.spec.early_stopping.clone() else {
            return;
        };
        let succeeded = trials
            .values()
            .filter(|t| t.phase == Some(JobPhase::Succeeded) && !t.early_stopped)
            .count();
        if succeeded < usize::try_from(es.min_trials).unwrap_or(usize::MAX) {
            return;
        }
        let goal = self.tuner.spec.objective.goal;
        let metric = &self.tuner.spec.objective.metric;
        for (index, from) in std::mem::take(&mut self.reached) {
            let Some(t) = trials.get(&index) else {
                continue;
            };
            if trial_done(t) {
                continue;
            }
            let mut stop: Option<(usize, String)> = None;
            for (at, r) in t.rungs.iter().enumerate().skip(from) {
                let others: Vec<f64> = trials
                    .values()
                    .filter(|o| o.index != index)
                    .filter_map(|o| o.rungs.iter().find(|x| x.rung == r.rung).map(|x| x.value))
                    .collect();
                if !asha::goes_on(r.value, &others, goal, es.reduction_factor) {
                    stop = Some((
                        at,
                        format!(
                            "stopped early at rung {} (step {}): {metric} {} is not among the best {} of the {} trials there",
                            r.rung,
                            r.step,
                            r.value,
                            asha::kept(others.len() + 1, es.reduction_factor),
                            others.len() + 1
                        ),
                    ));
                    break;
                }
            }
            if let (Some((at, why)), Some(t)) = (stop, trials.get_mut(&index)) {
                // Rungs past the one it was stopped at were never earned: they do not count
                // against the trials that reach them.
                t.rungs.truncate(at + 1);
                t.early_stopped = true;
                t.completion_time = Some(Time(self.now));
                self.plan.event(
                    EventType::Normal,
                    "TrialEarlyStopped",
                    format!("trial {}: {why}", t.name),
                );
                t.message = Some(why);
                self.plan.requeue(STOP_DELAY);
            }
        }
    }
}

/// The best succeeded trial with an objective (the lowest index among equals).
fn best(trials: &BTreeMap<i32, Trial>, goal: Goal) -> Option<&Trial> {
    trials
        .values()
        .filter(|t| t.phase == Some(JobPhase::Succeeded) && !t.early_stopped)
        .filter(|t| t.objective_value.is_some())
        .fold(None, |b: Option<&Trial>, t| match b {
            Some(b)
                if !asha::better(
                    goal,
                    t.objective_value.unwrap_or_default(),
                    b.objective_value.unwrap_or_default(),
                ) =>
            {
                Some(b)
            }
            _ => Some(t),
        })
}

/// Fills the counts, the best trial, the phase and the Ready condition.
fn summarise(
    tuner: &GryviaAutoTuner,
    status: &mut GryviaAutoTunerStatus,
    trials: BTreeMap<i32, Trial>,
    invalid: Option<&String>,
    exhausted: bool,
    now: Timestamp,
) -> Vec<(EventType, &'static str, String)> {
    let count = |f: &dyn Fn(&Trial) -> bool| {
        i32::try_from(trials.values().filter(|t| f(t)).count()).unwrap_or(i32::MAX)
    };
    status.completed_trials = count(&trial_done);
    status.running_trials = count(&|t| !trial_done(t));
    status.early_stopped_trials = count(&|t| t.early_stopped);
    status.succeeded_trials = count(&|t| !t.early_stopped && t.phase == Some(JobPhase::Succeeded));
    status.failed_trials =
        count(&|t| !t.early_stopped && (t.vanished || t.phase == Some(JobPhase::Failed)));
    let goal = tuner.spec.objective.goal;
    let metric = &tuner.spec.objective.metric;
    status.best_trial = best(&trials, goal).cloned();
    status.trials = trials.into_values().collect();
    let mut events = Vec::new();
    let finished = status.running_trials == 0 && (exhausted || invalid.is_some());
    let phase = if !finished {
        JobPhase::Running
    } else if status.best_trial.is_some() {
        JobPhase::Succeeded
    } else {
        JobPhase::Failed
    };
    let (ready, reason, message) = match (invalid, phase, &status.best_trial) {
        (Some(why), _, _) => (Status::False, conditions::REASON_INVALID_SPEC, why.clone()),
        (None, JobPhase::Succeeded, Some(b)) => (
            Status::True,
            "Completed",
            format!(
                "{} trials finished; the best is {} with {metric}={}",
                status.completed_trials,
                b.name,
                b.objective_value.unwrap_or_default()
            ),
        ),
        (None, JobPhase::Failed, _) => (
            Status::False,
            "NoTrialSucceeded",
            format!(
                "{} trials finished, none succeeded reporting {metric}",
                status.completed_trials
            ),
        ),
        _ => (
            Status::True,
            "Running",
            format!(
                "{} of {} trials finished, {} running",
                status.completed_trials, tuner.spec.max_trials, status.running_trials
            ),
        ),
    };
    if finished && status.phase != Some(phase) {
        status.completion_time = Some(Time(now));
        events.push((
            if phase == JobPhase::Succeeded {
                EventType::Normal
            } else {
                EventType::Warning
            },
            if phase == JobPhase::Succeeded {
                "StudyCompleted"
            } else {
                "StudyFailed"
            },
            message.clone(),
        ));
    }
    status.phase = Some(phase);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            conditions::READY,
            ready,
            reason,
            message,
            tuner.metadata.generation,
            now,
        ),
    );
    events
}

impl TunerReconciler {
    /// Starts trials while there is room: at most `parallelTrials` running, a trial stopped
    /// early holding its slot until its job is gone (`stopping`: how many such jobs remain).
    fn start(
        &self,
        pass: &mut Pass<'_>,
        space: &Space,
        trials: &mut BTreeMap<i32, Trial>,
        stopping: usize,
    ) -> bool {
        let spec = &pass.tuner.spec;
        loop {
            let running = trials.values().filter(|t| !trial_done(t)).count() + stopping;
            if running >= usize::try_from(spec.parallel_trials).unwrap_or(1) {
                return false;
            }
            let list: Vec<Trial> = trials.values().cloned().collect();
            let Some(params) = suggest_in(space, spec, &list) else {
                return true;
            };
            let index = list.iter().map(|t| t.index + 1).max().unwrap_or(0);
            let job = match trial_job(pass.tuner, index, &params) {
                Ok(job) => job,
                Err(e) => {
                    pass.plan.event(EventType::Warning, "TrialNotCreated", e);
                    return false;
                }
            };
            match Child::from_resource(&job) {
                Ok(child) => pass.plan.apply_child(child),
                Err(e) => {
                    pass.plan.apply_built(Err(e));
                    return false;
                }
            };
            let values: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pass.plan.event(
                EventType::Normal,
                "TrialCreated",
                format!(
                    "trial {index} started as GryviaAIJob {} with {}",
                    child_name(&job),
                    values.join(", ")
                ),
            );
            trials.insert(
                index,
                Trial {
                    creation_time: Some(Time(pass.now)),
                    ..Trial::new(child_name(&job), index, params)
                },
            );
        }
    }
}

fn child_name(job: &GryviaAIJob) -> String {
    job.metadata.name.clone().unwrap_or_default()
}

impl crate::Reconcile for TunerReconciler {
    type Object = GryviaAutoTuner;
    type World = TunerWorld;
    type Status = GryviaAutoTunerStatus;

    fn name(&self) -> &'static str {
        "gryvia-autotuners"
    }

    fn reconcile(
        &self,
        tuner: &GryviaAutoTuner,
        world: &TunerWorld,
        now: Timestamp,
    ) -> Plan<GryviaAutoTunerStatus> {
        let current = tuner.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let mut pass = Pass {
            tuner,
            now,
            plan: Plan::new(),
            reached: Vec::new(),
        };
        let mut trials = merged_trials(&current, world);
        let jobs: BTreeMap<&str, &TrialJob> =
            world.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
        for t in trials.values_mut() {
            pass.observe(t, jobs.get(t.name.as_str()).copied());
        }
        pass.judge(&mut trials);
        // A trial recorded as stopped early (in the stored status) loses its job now, also
        // one that finished in between: a stopped trial never leaves a job behind.
        for t in current.trials.iter().filter(|t| t.early_stopped) {
            if let Some(j) = jobs.get(t.name.as_str()) {
                pass.plan.delete.push(crate::ObjectRef::namespaced(
                    "gryvia.io/v1alpha1",
                    "GryviaAIJob",
                    tuner.metadata.namespace.as_deref().unwrap_or_default(),
                    &j.name,
                ));
            }
        }
        let invalid = check(tuner);
        // A finished study starts nothing more.
        let mut exhausted = status.completion_time.is_some();
        if invalid.is_none()
            && !exhausted
            && let Ok(space) = Space::of(&tuner.spec)
        {
            // A trial stopped early still holds its GPUs until its job is gone.
            let stopping = trials
                .values()
                .filter(|t| t.early_stopped)
                .filter(|t| {
                    jobs.get(t.name.as_str())
                        .is_some_and(|j| !j.phase.is_some_and(JobPhase::is_finished))
                })
                .count();
            exhausted = self.start(&mut pass, &space, &mut trials, stopping);
        }
        for (type_, reason, message) in
            summarise(tuner, &mut status, trials, invalid.as_ref(), exhausted, now)
        {
            pass.plan.event(type_, reason, message);
        }
        let mut plan = pass.plan;
        if status.running_trials > 0 {
            plan.requeue(self.poll);
        }
        plan.set_status_if_changed(Some(&current), status);
        plan
    }

    fn record_failure(
        &self,
        tuner: &GryviaAutoTuner,
        error: &str,
        now: Timestamp,
    ) -> Option<GryviaAutoTunerStatus> {
        // A trial's job refused (by an admission webhook, a quota, the budget gate): the
        // study says so, and the reconcile is retried with backoff.
        let mut status = tuner.status.clone().unwrap_or_default();
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                Status::False,
                "TrialNotCreated",
                error,
                tuner.metadata.generation,
                now,
            ),
        );
        Some(status)
    }
}

#[cfg(test)]
mod tests;
