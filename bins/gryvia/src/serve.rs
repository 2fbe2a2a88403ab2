//! `gryvia model list|history|promote` (GryviaModelRegistries) and `gryvia serve status`
//! (GryviaInferenceServices).

use anyhow::Context;
use clap::Subcommand;
use gryvia_types::{GryviaInferenceService, GryviaModelRegistry, ModelStage};
use kube::api::{Api, ListParams, PostParams};

use crate::output::{Output, Table, print_objects};

/// A stage, as the CLI takes it.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Registered only.
    None,
    /// Being validated.
    Staging,
    /// Serving traffic.
    Production,
    /// Retired.
    Archived,
}

impl From<Stage> for ModelStage {
    fn from(s: Stage) -> Self {
        match s {
            Stage::None => ModelStage::None,
            Stage::Staging => ModelStage::Staging,
            Stage::Production => ModelStage::Production,
            Stage::Archived => ModelStage::Archived,
        }
    }
}

/// `gryvia model ...`.
#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Every version of the registries in a namespace with its stage, and what is served.
    List {
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// A registry's audit trail: every stage change, who made it and when.
    History {
        /// GryviaModelRegistry name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
    /// Move a version to a stage; to production, the previous production version is archived
    /// in the same change (and served by `autoServe` as a canary first).
    Promote {
        /// GryviaModelRegistry name.
        name: String,
        /// The version.
        version: String,
        /// The stage.
        #[arg(long, value_enum)]
        stage: Stage,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

/// `gryvia serve ...`.
#[derive(Subcommand, Debug)]
pub enum ServeCommand {
    /// An inference service: versions, replicas, URL, its canary's checks and decision.
    Status {
        /// GryviaInferenceService name.
        name: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

fn stage_word(s: Option<ModelStage>) -> String {
    s.map_or("-".to_owned(), |s| format!("{s:?}").to_lowercase())
}

/// The versions of `registries`, one row each.
pub fn render_list(registries: &[GryviaModelRegistry]) -> String {
    let mut table = Table::new(&["REGISTRY", "MODEL", "VERSION", "STAGE", "URI", "SERVED"]);
    for r in registries {
        let st = r.status.clone().unwrap_or_default();
        for v in &r.spec.versions {
            let served = st.serving_version.as_deref() == Some(v.version.as_str());
            table.row(vec![
                r.metadata.name.clone().unwrap_or_default(),
                r.spec.model_name.clone(),
                v.version.clone(),
                stage_word(Some(v.stage)),
                v.uri.clone(),
                if served {
                    st.inference_service.clone().unwrap_or_default()
                } else {
                    String::new()
                },
            ]);
        }
    }
    table.render()
}

/// A registry's audit trail, one row per change.
pub fn render_history(r: &GryviaModelRegistry) -> String {
    let mut table = Table::new(&["TIME", "VERSION", "FROM", "TO", "BY"]);
    for e in r.status.iter().flat_map(|s| &s.history) {
        table.row(vec![
            e.time.0.to_string(),
            e.version.clone(),
            stage_word(e.from),
            e.to.map_or("removed".to_owned(), |s| stage_word(Some(s))),
            e.user
                .clone()
                .unwrap_or_else(|| "(not recorded)".to_owned()),
        ]);
    }
    table.render()
}

/// An inference service as text.
pub fn render_status(s: &GryviaInferenceService) -> String {
    let st = s.status.clone().unwrap_or_default();
    let spec = &s.spec;
    let mut out = format!(
        "Service:    {}/{}\nModel:      {} (runtime {:?}, image {})\nServing:    {} ({} ready of {}..{} replicas)\nURL:        {}\n",
        s.metadata.namespace.as_deref().unwrap_or_default(),
        s.metadata.name.as_deref().unwrap_or_default(),
        spec.model.name,
        spec.runtime,
        spec.image,
        st.stable_version
            .clone()
            .unwrap_or_else(|| spec.model.version.clone()),
        st.ready_replicas,
        spec.replicas.min,
        spec.replicas.max,
        st.url.clone().unwrap_or_else(|| "-".to_owned()),
    );
    if let Some(c) = gryvia_types::conditions::find(&st.conditions, "Ready") {
        out.push_str(&format!(
            "Condition:  Ready={} {}: {}\n",
            c.status, c.reason, c.message
        ));
    }
    if let Some(v) = &st.canary_version {
        out.push_str(&format!(
            "Canary:     {v} {} ({} of {} replicas ready)\n",
            st.canary_phase.clone().unwrap_or_default(),
            st.canary_ready_replicas,
            st.canary_replicas
        ));
    }
    if let Some(d) = &st.decision {
        out.push_str(&format!(
            "Decision:   {} at {}: {}\n",
            d.outcome, d.time.0, d.message
        ));
    }
    if st.checks.is_empty() {
        return out;
    }
    let mut table = Table::new(&["TIME", "RESULT", "ERRORS %", "P99 MS", "READY", "MESSAGE"]);
    for c in &st.checks {
        table.row(vec![
            c.time.0.to_string(),
            c.result.clone(),
            c.error_rate_percent
                .map_or("-".to_owned(), |e| format!("{e:.2}")),
            c.latency_ms.map_or("-".to_owned(), |l| format!("{l:.0}")),
            c.ready_replicas.to_string(),
            c.message.clone(),
        ]);
    }
    out.push('\n');
    out.push_str(&table.render());
    out
}

async fn registry_api(
    namespace: Option<String>,
) -> anyhow::Result<(Api<GryviaModelRegistry>, String)> {
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    Ok((Api::namespaced(client, &ns), ns))
}

async fn promote(
    name: &str,
    version: &str,
    stage: Stage,
    namespace: Option<String>,
) -> anyhow::Result<()> {
    let (api, ns) = registry_api(namespace).await?;
    // Read, change, replace with the read resourceVersion; a concurrent change (409) is read
    // again, a few times.
    for attempt in 0..5 {
        let mut r = crate::get_named(&api, &ns, name).await?;
        let before = r
            .spec
            .versions
            .iter()
            .find(|v| v.version == version)
            .map(|v| v.stage);
        let archived =
            gryvia_reconcile::registry::promote(&mut r.spec.versions, version, stage.into())
                .map_err(|e| anyhow::anyhow!("GryviaModelRegistry {ns}/{name}: {e}"))?;
        match api.replace(name, &PostParams::default(), &r).await {
            Ok(_) => {
                let mut line = format!(
                    "{name}: {version} {} -> {}",
                    stage_word(before),
                    stage_word(Some(stage.into()))
                );
                if let Some(a) = archived {
                    line.push_str(&format!(" ({a} production -> archived)"));
                }
                return crate::print_out(&format!("{line}\n"));
            }
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("update GryviaModelRegistry {ns}/{name}"));
            }
        }
    }
    anyhow::bail!("GryviaModelRegistry {ns}/{name} kept changing; try again")
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached, the registry or version does not
/// exist, or the change is refused.
pub async fn run_model(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {
        ModelCommand::List { namespace, output } => {
            let (api, ns) = registry_api(namespace).await?;
            let mut list = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list GryviaModelRegistries in {ns}"))?
                .items;
            list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            if output != Output::Table {
                return print_objects(&list, output);
            }
            crate::print_out(&render_list(&list))
        }
        ModelCommand::History { name, namespace } => {
            let (api, ns) = registry_api(namespace).await?;
            let r = crate::get_named(&api, &ns, &name).await?;
            crate::print_out(&render_history(&r))
        }
        ModelCommand::Promote {
            name,
            version,
            stage,
            namespace,
        } => promote(&name, &version, stage, namespace).await,
    }
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached or the service does not exist.
pub async fn run_serve(cmd: ServeCommand) -> anyhow::Result<()> {
    let ServeCommand::Status {
        name,
        namespace,
        output,
    } = cmd;
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let api: Api<GryviaInferenceService> = Api::namespaced(client, &ns);
    let s = crate::get_named(&api, &ns, &name).await?;
    if output != Output::Table {
        return print_objects(&[s], output);
    }
    crate::print_out(&render_status(&s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_canary_reads_as_versions_checks_and_decision() {
        let s: GryviaInferenceService = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaInferenceService",
            "metadata": {"name": "chat", "namespace": "ml"},
            "spec": {"model": {"name": "llama", "version": "v1"}, "runtime": "vllm", "image": "vllm:1",
                     "replicas": {"min": 2, "max": 4}},
            "status": {"readyReplicas": 2, "stableVersion": "v1", "url": "http://chat.ml.svc:8080",
                "canaryVersion": "v2", "canaryPhase": "RolledBack", "canaryReplicas": 0,
                "checks": [{"time": "2026-12-05T08:00:00Z", "errorRatePercent": 12.5, "latencyMs": 80.0,
                            "readyReplicas": 1, "result": "Failed", "message": "error rate 12.50% over 1%"}],
                "decision": {"time": "2026-12-05T08:00:00Z", "outcome": "RolledBack", "message": "check failed: error rate 12.50% over 1%"}}
        }))
        .unwrap();
        let text = render_status(&s);
        assert!(
            text.contains("Serving:    v1 (2 ready of 2..4 replicas)"),
            "{text}"
        );
        assert!(text.contains("Canary:     v2 RolledBack"), "{text}");
        assert!(
            text.contains("Decision:   RolledBack at 2026-12-05T08:00:00Z: check failed"),
            "{text}"
        );
        assert!(text.contains("12.50") && text.contains("Failed"), "{text}");
    }

    #[test]
    fn versions_and_history_read_as_tables() {
        let r: GryviaModelRegistry = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaModelRegistry",
            "metadata": {"name": "llama", "namespace": "ml"},
            "spec": {"modelName": "llama", "versions": [
                {"version": "v1", "uri": "s3://m/v1", "stage": "archived"},
                {"version": "v2", "uri": "s3://m/v2", "stage": "production"}]},
            "status": {"servingVersion": "v2", "inferenceService": "llama", "history": [
                {"version": "v2", "from": "staging", "to": "production", "user": "alice", "time": "2026-12-05T08:00:00Z"},
                {"version": "v1", "from": "production", "to": "archived", "time": "2026-12-05T08:00:00Z"}]}
        }))
        .unwrap();
        let list = render_list(std::slice::from_ref(&r));
        let v2 = list.lines().find(|l| l.contains("v2")).unwrap();
        assert!(
            v2.contains("production") && v2.trim_end().ends_with("llama"),
            "{list}"
        );
        let history = render_history(&r);
        assert!(
            history.contains("staging") && history.contains("alice"),
            "{history}"
        );
        assert!(history.contains("(not recorded)"), "{history}");
    }
}
