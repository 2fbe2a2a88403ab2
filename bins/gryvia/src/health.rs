//! `gryvia health`, `gryvia get node` and `gryvia maintenance`: flags and presentation; the
//! work is in `gryvia_client::ops::nodes`.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use gryvia_client::ops::nodes::DrainProgress;
use gryvia_reconcile::health::report;
use gryvia_types::{GryviaGpuNode, GryviaHealthCheck, GryviaNetwork, GryviaStorage, Verdict};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::output::{Output, Table, print_objects};

/// What `gryvia health` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HealthScope {
    /// GPU nodes and health checks.
    Gpu,
    /// Storage systems.
    Storage,
    /// Networks.
    Network,
}

/// `gryvia get ...`.
#[derive(Subcommand, Debug)]
pub enum GetCommand {
    /// One node: its GPUs as the agent last saw them, its verdicts and quarantine state.
    Node {
        /// Node name.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// `gryvia maintenance ...`.
#[derive(Subcommand, Debug)]
pub enum MaintenanceCommand {
    /// Cordon a node for maintenance and optionally drain it (Eviction API, respects PDBs).
    Start {
        /// Node name.
        node: String,
        /// Why (recorded on the node as the gryvia.io/maintenance annotation).
        #[arg(long)]
        reason: String,
        /// Evict the node's pods (DaemonSet, mirror and finished pods stay).
        #[arg(long)]
        drain: bool,
        /// Seconds to wait for the drain before giving up (the node stays cordoned).
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Return a node to service: uncordon it and remove the gryvia.io/gpu-unhealthy taint.
    End {
        /// Node name.
        node: String,
    },
}

fn verdict(v: Option<Verdict>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:?}"))
}

fn age(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    report::age(t.map(|t| t.0), jiff::Timestamp::now())
}

/// One section of `gryvia health`: its table and its objects for `-o json|yaml`.
struct Section {
    table: String,
    objects: serde_json::Value,
}

/// `gryvia health [gpu|storage|network]`.
pub async fn health(scope: Option<HealthScope>, output: Output) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let show = |s: HealthScope| scope.is_none() || scope == Some(s);
    let mut sections = Vec::new();
    if show(HealthScope::Gpu) {
        sections.push(gpu_section(&client).await?);
    }
    if show(HealthScope::Storage) {
        sections.push(storage_section(&client).await?);
    }
    if show(HealthScope::Network) {
        sections.push(network_section(&client).await?);
    }
    match output {
        Output::Table => {
            let tables: Vec<_> = sections.iter().map(|s| s.table.as_str()).collect();
            crate::print_out(&tables.join("\n"))
        }
        _ => {
            let objects: Vec<_> = sections.into_iter().map(|s| s.objects).collect();
            print_objects(&objects, output)
        }
    }
}

/// The health checks' summaries and every GPU node's verdict.
async fn gpu_section(client: &kube::Client) -> anyhow::Result<Section> {
    let lp = ListParams::default();
    let mut checks = Api::<GryviaHealthCheck>::all(client.clone())
        .list(&lp)
        .await
        .context("list GryviaHealthChecks")?
        .items;
    checks.sort_by_key(ResourceExt::name_any);
    let mut nodes = Api::<GryviaGpuNode>::all(client.clone())
        .list(&lp)
        .await
        .context("list GryviaGpuNodes")?
        .items;
    nodes.sort_by(|a, b| a.spec.node_name.cmp(&b.spec.node_name));
    let mut t = Table::new(&[
        "HEALTH CHECK",
        "NODES",
        "HEALTHY",
        "WARNING",
        "FAILED",
        "UNKNOWN",
        "QUARANTINED",
        "LAST RUN",
    ]);
    let now = jiff::Timestamp::now();
    for c in report::check_rows(&checks) {
        t.row(vec![
            c.name,
            c.nodes.to_string(),
            c.summary.healthy.to_string(),
            c.summary.warning.to_string(),
            c.summary.failed.to_string(),
            c.summary.unknown.to_string(),
            c.summary.quarantined.to_string(),
            report::age(c.last_run, now),
        ]);
    }
    let mut table = t.render();
    let mut t = Table::new(&["GPU NODE", "GPUS", "VERDICT", "SOURCE", "OBSERVED"]);
    for n in report::gpu_node_rows(&checks, &nodes) {
        t.row(vec![
            n.node,
            n.gpus.to_string(),
            verdict(n.verdict),
            n.source.unwrap_or_else(|| "-".into()),
            report::age(n.observed_at, now),
        ]);
    }
    table.push('\n');
    table.push_str(&t.render());
    let objects = serde_json::json!({"healthChecks": checks, "gpuNodes": nodes});
    Ok(Section { table, objects })
}

/// The GryviaStorages' probe results.
async fn storage_section(client: &kube::Client) -> anyhow::Result<Section> {
    let items = Api::<GryviaStorage>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list GryviaStorages")?
        .items;
    let mut t = Table::new(&["STORAGE", "TYPE", "PHASE", "LATENCY", "CHECKED", "MESSAGE"]);
    for s in &items {
        let st = s.status.clone().unwrap_or_default();
        t.row(vec![
            s.name_any(),
            serde_json::to_value(s.spec.type_)?
                .as_str()
                .unwrap_or("-")
                .to_owned(),
            st.phase
                .map_or_else(|| "Unknown".into(), |p| format!("{p:?}")),
            st.latency_millis
                .map_or_else(|| "-".into(), |l| format!("{l}ms")),
            age(st.last_checked.as_ref()),
            st.message.unwrap_or_default(),
        ]);
    }
    let objects = serde_json::json!({"storage": items});
    Ok(Section {
        table: t.render(),
        objects,
    })
}

/// The GryviaNetworks' probe results.
async fn network_section(client: &kube::Client) -> anyhow::Result<Section> {
    let items = Api::<GryviaNetwork>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list GryviaNetworks")?
        .items;
    let mut t = Table::new(&[
        "NETWORK", "TYPE", "PHASE", "NODES", "DEGRADED", "GBPS", "CHECKED", "MESSAGE",
    ]);
    for n in &items {
        let st = n.status.clone().unwrap_or_default();
        t.row(vec![
            n.name_any(),
            serde_json::to_value(n.spec.type_)?
                .as_str()
                .unwrap_or("-")
                .to_owned(),
            st.phase
                .map_or_else(|| "Unknown".into(), |p| format!("{p:?}")),
            st.nodes_total.to_string(),
            st.nodes_degraded.to_string(),
            st.measured_bandwidth_gbps
                .map_or_else(|| "-".into(), |g| format!("{g:.1}")),
            age(st.last_checked.as_ref()),
            st.message.unwrap_or_default(),
        ]);
    }
    let objects = serde_json::json!({"networks": items});
    Ok(Section {
        table: t.render(),
        objects,
    })
}

/// `gryvia get node NAME`.
pub async fn get_node(name: &str, output: Output) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let report = gryvia_client::ops::nodes::node_report(&client, name).await?;
    if output != Output::Table {
        let json = serde_json::json!({
            "node": report.node.name_any(),
            "unschedulable": report.node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            "taints": report.node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default(),
            "gpuNode": report.gpu_node,
            "healthChecks": report.results.iter().map(|(c, r)| serde_json::json!({"healthCheck": c, "result": r})).collect::<Vec<_>>(),
        });
        return print_objects(&[json], output);
    }
    let state = report::node_state(&report.node);
    let mut out = format!(
        "Node:          {}\nSchedulable:   {}\nQuarantined:   {}\nMaintenance:   {}\n",
        state.name,
        if state.schedulable {
            "yes"
        } else {
            "no (cordoned)"
        },
        state
            .quarantined_by
            .as_ref()
            .map_or_else(|| "no".to_owned(), |c| format!("yes, by health check {c}")),
        state
            .maintenance
            .as_ref()
            .map_or_else(|| "no".to_owned(), |r| format!("yes: {r}")),
    );
    match &report.gpu_node {
        None => out.push_str("GPUs:          no GryviaGpuNode (no node agent reports this node)\n"),
        Some(g) => {
            let st = g.status.clone().unwrap_or_default();
            out.push_str(&format!(
                "Source:        {} (observed {} ago)\nDriver:        {} (CUDA {})\n\n",
                st.source.clone().unwrap_or_else(|| "-".into()),
                age(st.observed_at.as_ref()),
                st.driver_version.clone().unwrap_or_else(|| "-".into()),
                st.cuda_version.clone().unwrap_or_else(|| "-".into()),
            ));
            out.push_str(&gpu_table(&st.gpus));
            if let Some(r) = &st.remediation_result {
                out.push_str(&format!(
                    "\nLast remediation: {:?} {:?} ({})\n",
                    r.action,
                    r.phase,
                    r.message.clone().unwrap_or_default()
                ));
            }
        }
    }
    out.push_str(&check_results(&report.results));
    crate::print_out(&out)
}

/// `gryvia maintenance start|end`.
pub async fn maintenance(cmd: MaintenanceCommand) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    match cmd {
        MaintenanceCommand::Start {
            node,
            reason,
            drain,
            timeout,
        } => {
            if reason.trim().is_empty() {
                bail!("--reason must not be empty");
            }
            let was_schedulable =
                gryvia_client::ops::nodes::start_maintenance(&client, &node, &reason).await?;
            println!(
                "node {node} {} (reason: {reason})",
                if was_schedulable {
                    "cordoned"
                } else {
                    "was already cordoned"
                }
            );
            if drain {
                let mut progress =
                    crate::progress::Progress::start_on_stdout(&format!("drain {node}"));
                let result = gryvia_client::ops::nodes::drain(
                    &client,
                    &node,
                    Duration::from_secs(timeout),
                    Duration::from_secs(2),
                    |p| match p {
                        DrainProgress::Evicted(pod) => progress.line(&format!("evicted {pod}")),
                        DrainProgress::Blocked(pod) => progress.line(&format!(
                            "eviction of {pod} blocked by a PodDisruptionBudget; retrying"
                        )),
                        DrainProgress::Waiting {
                            evictable,
                            blocked,
                            terminating,
                        } => progress.state(&format!(
                            "waiting: {evictable} to evict, {blocked} blocked by a PodDisruptionBudget, {terminating} terminating"
                        )),
                    },
                )
                .await;
                progress.finish();
                match result {
                    Ok(plan) => println!(
                        "node {node} drained ({} pod(s) left alone: DaemonSet, mirror or finished)",
                        plan.skipped.len()
                    ),
                    Err(e) => bail!("drain of {node} incomplete (the node stays cordoned): {e}"),
                }
            }
            Ok(())
        }
        MaintenanceCommand::End { node } => {
            let done = gryvia_client::ops::nodes::end_maintenance(&client, &node).await?;
            if done.is_empty() {
                println!("node {node}: maintenance ended (nothing to undo)");
            } else {
                println!("node {node}: maintenance ended: {}", done.join(", "));
            }
            Ok(())
        }
    }
}

/// The GPUs table of `gryvia get node`.
fn gpu_table(gpus: &[gryvia_types::GpuObservation]) -> String {
    let mut t = Table::new(&[
        "GPU",
        "PRODUCT",
        "TEMP",
        "UTIL",
        "MEMORY",
        "ECC SBE/DBE",
        "NVLINK",
        "POWER",
        "XID",
    ]);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for gpu in gpus {
        t.row(vec![
            gpu.index.to_string(),
            opt(gpu.product.clone()),
            opt(gpu.temperature_c.map(|v| format!("{v}C"))),
            opt(gpu.utilization_percent.map(|v| format!("{v}%"))),
            match (gpu.memory_used_mib, gpu.memory_total_mib) {
                (Some(u), Some(t)) => format!("{u}/{t} MiB"),
                _ => "-".into(),
            },
            format!(
                "{}/{}",
                opt(gpu.ecc_single_bit.map(|v| v.to_string())),
                opt(gpu.ecc_double_bit.map(|v| v.to_string()))
            ),
            gpu.nvlink.as_ref().map_or_else(
                || "-".into(),
                |l| format!("{}/{} up", l.links_up, l.links_total),
            ),
            opt(gpu.power_draw_watts.map(|v| format!("{v:.0}W"))),
            gpu.xid_events
                .iter()
                .map(|x| x.code.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ]);
    }
    t.render()
}

/// Each health check's result for the node, with its remediation step and blocked evictions.
fn check_results(results: &[(String, gryvia_types::NodeHealthResult)]) -> String {
    let mut out = String::new();
    for (check, r) in results {
        out.push_str(&format!(
            "\nHealth check {check}: {:?} (consecutive failures {})\n",
            r.verdict, r.consecutive_failures
        ));
        for reason in &r.reasons {
            out.push_str(&format!("  - {reason}\n"));
        }
        if let Some(rem) = &r.remediation {
            out.push_str(&format!(
                "  remediation: step {} {:?} {:?} {}\n",
                rem.step_index + 1,
                rem.action,
                rem.phase,
                rem.message
            ));
        }
        if let Some(d) = &r.drain {
            for b in &d.blocked {
                out.push_str(&format!("  eviction blocked: {b}\n"));
            }
        }
    }
    out
}
