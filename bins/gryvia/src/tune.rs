//! `gryvia tune status NAME`: a hyperparameter study's progress, its trials and the best.

use clap::Subcommand;
use gryvia_types::{GryviaAutoTuner, JobPhase, Trial};
use kube::api::Api;

use crate::output::{Output, Table, print_objects};

/// `gryvia tune ...`.
#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Show a study: progress, every trial with its parameters and objective, the best.
    Status {
        /// GryviaAutoTuner name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// What happened to a trial, in a word.
pub fn state(t: &Trial) -> String {
    if t.early_stopped {
        "EarlyStopped".to_owned()
    } else if t.vanished {
        "Vanished".to_owned()
    } else {
        t.phase
            .map_or_else(|| "Created".to_owned(), |p| format!("{p:?}"))
    }
}

fn params(t: &Trial) -> String {
    t.parameters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The study as text: a header, then one row per trial.
pub fn render(study: &GryviaAutoTuner) -> String {
    let st = study.status.clone().unwrap_or_default();
    let spec = &study.spec;
    let metric = &spec.objective.metric;
    let mut out = format!(
        "Study:      {}/{}\nAlgorithm:  {:?}, seed {}\nObjective:  {:?} {metric}\nPhase:      {}\n",
        study.metadata.namespace.as_deref().unwrap_or_default(),
        study.metadata.name.as_deref().unwrap_or_default(),
        spec.algorithm,
        spec.seed,
        spec.objective.goal,
        st.phase
            .map_or("-".to_owned(), |p: JobPhase| format!("{p:?}")),
    );
    out.push_str(&format!(
        "Progress:   {} of {} trials finished, {} running (at most {}); {} succeeded, {} failed, {} stopped early\n",
        st.completed_trials,
        spec.max_trials,
        st.running_trials,
        spec.parallel_trials,
        st.succeeded_trials,
        st.failed_trials,
        st.early_stopped_trials
    ));
    match &st.best_trial {
        Some(b) => out.push_str(&format!(
            "Best:       {} {metric}={} ({})\n",
            b.name,
            b.objective_value.map_or("-".to_owned(), |v| v.to_string()),
            params(b)
        )),
        None => out.push_str("Best:       - (no trial has succeeded yet)\n"),
    }
    if let Some(c) = gryvia_types::conditions::find(&st.conditions, "Ready") {
        out.push_str(&format!(
            "Condition:  Ready={} {}: {}\n",
            c.status, c.reason, c.message
        ));
    }
    if st.trials.is_empty() {
        return out;
    }
    let mut table = Table::new(&[
        "TRIAL",
        "STATE",
        "STEP",
        &metric.to_uppercase(),
        "PARAMETERS",
        "NOTE",
    ]);
    for t in &st.trials {
        table.row(vec![
            t.name.clone(),
            state(t),
            t.step.map_or("-".to_owned(), |s| s.to_string()),
            t.objective_value.map_or("-".to_owned(), |v| v.to_string()),
            params(t),
            t.message.clone().unwrap_or_default(),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached or the study does not exist.
pub async fn run(cmd: TuneCommand) -> anyhow::Result<()> {
    let TuneCommand::Status {
        name,
        namespace,
        output,
    } = cmd;
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let api: Api<GryviaAutoTuner> = Api::namespaced(client, &ns);
    let study = crate::get_named(&api, &ns, &name).await?;
    if output != Output::Table {
        return print_objects(&[study], output);
    }
    crate::print_out(&render(&study))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_study_reads_as_progress_best_and_trials() {
        let study: GryviaAutoTuner = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAutoTuner",
            "metadata": {"name": "lr-sweep", "namespace": "ml"},
            "spec": {
                "objective": {"metric": "loss", "goal": "minimize"}, "algorithm": "asha",
                "parameters": [{"name": "lr", "type": "double", "min": 0.001, "max": 0.1}],
                "maxTrials": 12, "parallelTrials": 4, "seed": 7,
                "earlyStopping": {"minTrials": 2},
                "trialTemplate": {"image": "registry.local/train:1"}
            },
            "status": {
                "phase": "Running", "completedTrials": 2, "runningTrials": 1,
                "succeededTrials": 1, "earlyStoppedTrials": 1,
                "bestTrial": {"name": "lr-sweep-0", "index": 0, "parameters": {"lr": "0.01"}, "phase": "Succeeded", "objectiveValue": 0.25, "step": 9},
                "trials": [
                    {"name": "lr-sweep-0", "index": 0, "parameters": {"lr": "0.01"}, "phase": "Succeeded", "objectiveValue": 0.25, "step": 9},
                    {"name": "lr-sweep-1", "index": 1, "parameters": {"lr": "0.09"}, "phase": "Running", "objectiveValue": 2.5, "step": 1, "earlyStopped": true, "message": "stopped early at rung 0"},
                    {"name": "lr-sweep-2", "index": 2, "parameters": {"lr": "0.002"}}
                ]
            }
        }))
        .unwrap();
        let text = render(&study);
        assert!(text.contains("Progress:   2 of 12 trials finished, 1 running (at most 4); 1 succeeded, 0 failed, 1 stopped early"), "{text}");
        assert!(
            text.contains("Best:       lr-sweep-0 loss=0.25 (lr=0.01)"),
            "{text}"
        );
        assert!(
            text.contains("TRIAL        STATE          STEP   LOSS   PARAMETERS   NOTE"),
            "{text}"
        );
        assert!(
            text.contains(
                "lr-sweep-1   EarlyStopped   1      2.5    lr=0.09      stopped early at rung 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("lr-sweep-2   Created        -      -      lr=0.002"),
            "{text}"
        );
    }
}
