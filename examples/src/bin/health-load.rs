//! `health-load`: detect-to-cordon latency of the gpu-operator on a fleet of KWOK GPU nodes.
//!
//! Against a running testenv (`testenv/up --nodes 500`) and a running
//! `gryvia-gpu-operator --gpu-health --gpu-remediation`, this tool plays the node agents of
//! every `gryvia.io/testenv=true` node (it writes their GryviaGpuNode status the way
//! `gryvia-node-agent` does, rendered from the same trace format), creates a health check on a
//! production schedule (`--schedule`, default every five minutes), then makes nodes report
//! uncorrected ECC errors (a fatal reading, evaluated at once) and measures, per node, the time
//! from that report being written to the node being tainted `gryvia.io/gpu-unhealthy` (seen
//! through a watch). Two phases: isolated failures (one node every `--pace-ms`) and a burst
//! (many nodes at once; `--max-percent` sets the check's `maxQuarantinedPercent`, so the
//! guard may hold part of it back). It also reports the check's first full pass over the fleet:
//! its time and the size of the status it wrote. It cleans up after itself.
//!
//! `health-load [--paced N] [--burst N] [--pace-ms MS] [--max-percent P] [--schedule CRON]`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use gryvia_client::gpu_agent::{AGENT_MANAGER, Trace};
use gryvia_types::{GryviaGpuNode, GryviaHealthCheck, labels};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use gryvia_examples::load::{number_arg, text_arg};

const CHECK: &str = "health-load";

async fn report(client: &kube::Client, node: &Node, trace: &Trace) -> anyhow::Result<()> {
    let name = node.name_any();
    let api: Api<GryviaGpuNode> = Api::all(client.clone());
    let gpus = trace.render(&trace.frames[0], &name, jiff::Timestamp::now())?;
    let body = json!({
        "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaGpuNode",
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.meta().uid}]},
        "spec": {"nodeName": name, "reportIntervalSeconds": 30},
    });
    let pp = PatchParams::apply(AGENT_MANAGER).force();
    api.patch(&name, &pp, &Patch::Apply(&body)).await?;
    let status = json!({
        "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaGpuNode",
        "status": {"gpus": gpus, "gpuCount": gpus.len(), "source": "file:health-load",
                   "observedAt": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())},
    });
    api.patch_status(&name, &pp, &Patch::Apply(&status)).await?;
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a short list"
    )]
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Creates the health check over every testenv node and waits for its first run over all
/// `nodes` of them.
async fn start_check(
    client: &kube::Client,
    nodes: usize,
    schedule: &str,
    max_percent: usize,
) -> anyhow::Result<Api<GryviaHealthCheck>> {
    let checks: Api<GryviaHealthCheck> = Api::all(client.clone());
    let _ = checks.delete(CHECK, &DeleteParams::default()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let hc: GryviaHealthCheck = serde_json::from_value(json!({
        "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaHealthCheck",
        "metadata": {"name": CHECK},
        "spec": {
            "target": {"type": "selector", "nodeSelector": {"gryvia.io/testenv": "true"}},
            "schedule": schedule,
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}],
            "onFailure": {"cordon": true, "consecutiveFailures": 1},
            "maxQuarantinedPercent": max_percent
        }
    }))?;
    checks.create(&PostParams::default(), &hc).await?;
    // Wait for a first run over every node: the full pass a schedule makes.
    let t = Instant::now();
    loop {
        let st = checks.get(CHECK).await?.status;
        if let Some(s) = st.as_ref().filter(|s| s.summary.healthy as usize == nodes) {
            println!(
                "full pass over {nodes} nodes: status seen {:.2}s after the check was created; status {} bytes ({} node results)",
                t.elapsed().as_secs_f64(),
                serde_json::to_vec(s)?.len(),
                s.nodes.len()
            );
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            bail!(
                "the health check did not evaluate all {} nodes within 60 s",
                nodes
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(checks)
}

/// When each node got the quarantine taint, as a watch sees it.
type Tainted = Arc<Mutex<BTreeMap<String, Instant>>>;

/// Watches nodes and records when each one is first seen with the quarantine taint.
fn watch_taints(client: &kube::Client) -> (Tainted, tokio::task::JoinHandle<()>) {
    let tainted: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let seen = tainted.clone();
    let watch_client = client.clone();
    let watch = tokio::spawn(async move {
        let mut s = watcher(Api::<Node>::all(watch_client), watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(n)) = s.next().await {
            let has = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == labels::GPU_UNHEALTHY_TAINT));
            if has {
                let mut m = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                m.entry(n.name_any()).or_insert_with(Instant::now);
            }
        }
    });
    (tainted, watch)
}

/// Prints detect-to-cordon percentiles per phase: from each report written to its taint seen.
fn print_latencies<const N: usize>(
    tainted: &BTreeMap<String, Instant>,
    written: &BTreeMap<String, Instant>,
    phases: [(&str, Vec<String>); N],
) {
    for (phase, names) in phases {
        let mut lat: Vec<f64> = names
            .iter()
            .filter_map(|n| {
                Some(
                    tainted
                        .get(n)?
                        .duration_since(*written.get(n)?)
                        .as_secs_f64(),
                )
            })
            .collect();
        lat.sort_by(f64::total_cmp);
        println!(
            "{phase}: {} of {} nodes quarantined; detect-to-cordon p50 {:.0} ms p99 {:.0} ms max {:.0} ms",
            lat.len(),
            names.len(),
            percentile(&lat, 50.0) * 1000.0,
            percentile(&lat, 99.0) * 1000.0,
            lat.last().copied().unwrap_or(f64::NAN) * 1000.0
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let paced = number_arg("--paced", 50)?;
    let burst = number_arg("--burst", 100)?;
    let pace = Duration::from_millis(u64::try_from(number_arg("--pace-ms", 1500)?)?);
    let max_percent = number_arg("--max-percent", 40)?;
    let schedule = text_arg("--schedule").unwrap_or_else(|| "*/5 * * * *".to_owned());
    let client = gryvia_client::connect().await?;
    let nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("gryvia.io/testenv=true"))
        .await?
        .items;
    if nodes.len() < paced + burst {
        bail!(
            "need {} testenv nodes, found {} (testenv/up --nodes 500)",
            paced + burst,
            nodes.len()
        );
    }
    let healthy = Trace::parse("frames: [{gpus: []}]", "healthy")?;
    let failing = Trace::parse("frames: [{gpus: [{index: 3, eccDoubleBit: 2}]}]", "failing")?;
    eprintln!("reporting {} healthy nodes", nodes.len());
    let started = Instant::now();
    futures::stream::iter(nodes.iter().map(|n| report(&client, n, &healthy)))
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!("  done in {:.1}s", started.elapsed().as_secs_f64());

    let checks = start_check(&client, nodes.len(), &schedule, max_percent).await?;

    // Watch taints.
    let (tainted, watch) = watch_taints(&client);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut written: BTreeMap<String, Instant> = BTreeMap::new();
    eprintln!("phase 1: {paced} isolated failures, one every {pace:?}");
    for n in nodes.iter().take(paced) {
        report(&client, n, &failing).await?;
        written.insert(n.name_any(), Instant::now());
        tokio::time::sleep(pace).await;
    }
    let paced_names: Vec<String> = nodes
        .iter()
        .take(paced)
        .map(ResourceExt::name_any)
        .collect();
    eprintln!("phase 2: {burst} failures at once");
    let burst_nodes: Vec<&Node> = nodes.iter().skip(paced).take(burst).collect();
    let burst_start = Instant::now();
    for n in &burst_nodes {
        report(&client, n, &failing).await?;
        written.insert(n.name_any(), Instant::now());
    }
    eprintln!(
        "  reports written in {:.2}s",
        burst_start.elapsed().as_secs_f64()
    );
    // The guard lets at most this many be quarantined.
    let allowed = (nodes.len() * max_percent / 100).min(written.len());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let done = tainted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
            >= allowed;
        if done || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watch.abort();
    let tainted = tainted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    print_latencies(
        &tainted,
        &written,
        [
            ("isolated", paced_names),
            ("burst", burst_nodes.iter().map(|n| n.name_any()).collect()),
        ],
    );

    // Clean up: the check, the agents' objects, the quarantines.
    checks.delete(CHECK, &DeleteParams::default()).await?;
    let gpu_nodes: Api<GryviaGpuNode> = Api::all(client.clone());
    for n in &nodes {
        let _ = gpu_nodes
            .delete(&n.name_any(), &DeleteParams::default())
            .await;
    }
    for name in written.keys() {
        gryvia_client::ops::nodes::end_maintenance(&client, name).await?;
    }
    Ok(())
}
