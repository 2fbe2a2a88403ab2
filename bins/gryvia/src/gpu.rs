//! `gryvia gpu training` and `gryvia gpu nccl --job JOB`: the network side of distributed
//! training jobs, from the network-operator's GryviaTrainingInsights.

use anyhow::Context;
use clap::Subcommand;
use gryvia_types::{GryviaAIJob, GryviaTrainingInsight};
use kube::api::{Api, ListParams};

use crate::output::Table;

/// `gryvia gpu ...`.
#[derive(Subcommand, Debug)]
pub enum GpuCommand {
    /// Distributed jobs' ranks: how many, how many straggle, the median rank's throughput
    /// (from every GryviaTrainingInsight).
    Training {
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// A job's communication: its NCCL and rendezvous environment, each rank's traffic, the
    /// rank-to-rank bytes and the stragglers (from its GryviaTrainingInsight).
    Nccl {
        /// The GryviaAIJob.
        #[arg(long)]
        job: String,
        /// Namespace (default: the kubeconfig's).
        #[arg(short, long)]
        namespace: Option<String>,
    },
}

fn rate(bytes_per_second: f64) -> String {
    format!("{bytes_per_second:.0}")
}

/// The insights as a table: one row per job.
pub fn training_table(insights: &[GryviaTrainingInsight]) -> String {
    let mut t = Table::new(&[
        "NAMESPACE",
        "JOB",
        "RANKS",
        "STRAGGLERS",
        "MEDIAN B/S",
        "UPDATED",
    ]);
    for i in insights {
        let st = i.status.clone().unwrap_or_default();
        t.row(vec![
            i.metadata.namespace.clone().unwrap_or_default(),
            i.spec.job_name.clone(),
            st.workers.len().to_string(),
            st.straggler_count.to_string(),
            st.median_bytes_per_second
                .map_or_else(|| "-".to_owned(), rate),
            st.updated_at
                .map_or_else(|| "-".to_owned(), |t| t.0.to_string()),
        ]);
    }
    t.render()
}

/// The NCCL and rendezvous variables of `job`'s workers: those of `spec.env` named `NCCL_*`
/// and what the controller sets (rank, world size, master).
pub fn nccl_env(job: &GryviaAIJob) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = gryvia_reconcile::aijob::worker_env(job)
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default().to_owned();
            let value = e["value"]
                .as_str()
                .map_or_else(|| "(the pod's completion index)".to_owned(), str::to_owned);
            (name, value)
        })
        .collect();
    out.extend(
        job.spec
            .env
            .iter()
            .filter(|e| e.name.starts_with("NCCL_"))
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default())),
    );
    out.sort();
    out
}

/// What `gryvia gpu nccl` prints for `job` and its insight.
pub fn nccl_report(job: &GryviaAIJob, insight: Option<&GryviaTrainingInsight>) -> String {
    let mut out = String::from("Environment:\n");
    for (name, value) in nccl_env(job) {
        out.push_str(&format!("  {name}={value}\n"));
    }
    let Some(st) = insight.and_then(|i| i.status.as_ref()) else {
        out.push_str("\nNo GryviaTrainingInsight of the job has a status yet: create one (spec.jobName) for the network-operator to fill.\n");
        return out;
    };
    let mut ranks = Table::new(&[
        "RANK",
        "POD",
        "NODE",
        "TX B/S",
        "RX B/S",
        "RETRANSMITS",
        "STRAGGLER",
    ]);
    for w in &st.workers {
        ranks.row(vec![
            w.rank.to_string(),
            w.pod.clone(),
            w.node.clone(),
            rate(w.tx_bytes_per_second),
            rate(w.rx_bytes_per_second),
            w.retransmits.to_string(),
            if w.straggler { "yes" } else { "no" }.to_owned(),
        ]);
    }
    out.push_str("\nRanks (the last window of each rank's node):\n");
    out.push_str(&ranks.render());
    let mut matrix = Table::new(&["FROM RANK", "TO RANK", "BYTES"]);
    for p in &st.matrix {
        matrix.row(vec![
            p.from.to_string(),
            p.to.to_string(),
            p.bytes.to_string(),
        ]);
    }
    out.push_str("\nRank to rank (as each rank's node saw it, both ways):\n");
    out.push_str(&matrix.render());
    out.push_str(&format!("\nStragglers: {}\n", st.straggler_count));
    for r in &st.recommendations {
        out.push_str(&format!("  {r}\n"));
    }
    out
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached or the job does not exist.
pub async fn run(cmd: GpuCommand) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    match cmd {
        GpuCommand::Training {
            namespace,
            all_namespaces,
        } => {
            let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
            let api: Api<GryviaTrainingInsight> = if all_namespaces {
                Api::all(client)
            } else {
                Api::namespaced(client, &ns)
            };
            let mut items = api
                .list(&ListParams::default())
                .await
                .context("list GryviaTrainingInsights")?
                .items;
            items.sort_by(|a, b| {
                (&a.metadata.namespace, &a.spec.job_name)
                    .cmp(&(&b.metadata.namespace, &b.spec.job_name))
            });
            if items.is_empty() {
                let r#where = if all_namespaces {
                    "any namespace".to_owned()
                } else {
                    format!("namespace {ns}")
                };
                return crate::print_out(&format!("No GryviaTrainingInsight in {where}.\n"));
            }
            crate::print_out(&training_table(&items))
        }
        GpuCommand::Nccl { job, namespace } => {
            let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
            let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns);
            let j = crate::get_named(&jobs, &ns, &job).await?;
            let insights: Api<GryviaTrainingInsight> = Api::namespaced(client, &ns);
            let all = insights
                .list(&ListParams::default())
                .await
                .with_context(|| format!("list GryviaTrainingInsights in {ns}"))?
                .items;
            let insight = all.iter().find(|i| i.spec.job_name == job);
            crate::print_out(&nccl_report(&j, insight))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nccl_environment_is_the_jobs_nccl_variables_and_the_rendezvous() {
        let job: GryviaAIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob", "metadata": {"name": "t"},
            "spec": {"image": "x", "gpus": 8, "replicas": 2,
                     "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}, {"name": "LR", "value": "1"}]}
        }))
        .unwrap();
        let env = nccl_env(&job);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert!(
            names.contains(&"NCCL_IB_HCA") && !names.contains(&"LR"),
            "{names:?}"
        );
        assert!(env.contains(&("RANK".to_owned(), "(the pod's completion index)".to_owned())));
        assert!(env.contains(&("MASTER_ADDR".to_owned(), "t-0.t".to_owned())));
        let report = nccl_report(&job, None);
        assert!(report.contains("No GryviaTrainingInsight"), "{report}");
    }
}
