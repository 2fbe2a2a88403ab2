//! `flow-load`: the network-operator under the collectors of a fleet.
//!
//! Against a running testenv (`testenv/up --nodes 100`) and a running
//! `gryvia-network-operator`, this tool puts `--pods-per-node` pods on every
//! `gryvia.io/testenv=true` node (KWOK gives them addresses), labels the nodes with three zones,
//! and creates what the operator keeps: a GryviaNetworkBaseline per node, a GryviaServiceGraph
//! of the pods' namespace and a GryviaNetworkCost by tenant that writes usage records. Then,
//! every `--interval` seconds for `--windows` windows, it writes every node's
//! GryviaFlowAggregate status the way the collector does: `--flows-per-node` client-side flows
//! from the node's pods to pods of other nodes (a tenth to an address outside the cluster), and
//! the server's side of each pod-to-pod flow on the peer's node. Per window it measures the
//! time from its last write until the graph and the cost have folded in every node's window,
//! and at the end how many baselines folded the last one. It cleans up after itself.
//!
//! `flow-load [--pods-per-node N] [--flows-per-node N] [--windows N] [--interval S]`

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use gryvia_types::{
    GryviaFlowAggregate, GryviaNetworkBaseline, GryviaNetworkCost, GryviaServiceGraph,
    GryviaUsageRecord,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use gryvia_examples::load::number_arg;

const NS: &str = "flow-load";
const COST: &str = "flow-load";
const MANAGER: &str = "gryvia-collector";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "an index into a short list"
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// A small deterministic generator (the same load every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from((self.0 >> 33) % u64::try_from(below.max(1)).unwrap_or(1)).unwrap_or(0)
    }
}

/// Pods on `nodes`, `per_node` each, with their addresses: (node, pod name, IP).
async fn pods(
    client: &kube::Client,
    nodes: &[String],
    per_node: usize,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut made = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for k in 0..per_node {
            made.push((node.clone(), format!("w-{i}-{k}")));
        }
    }
    futures::stream::iter(made.iter().cloned())
        .map(|(node, name)| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"app": "worker", "gryvia.io/job-name": format!("job-{}", name.split('-').nth(1).unwrap_or("0"))}},
                    "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.local/train:1"}]}
                }))?;
                api.create(&PostParams::default(), &pod).await.map(|_| ()).or_else(|e| match e {
                    kube::Error::Api(ae) if ae.code == 409 => Ok(()),
                    e => Err(e),
                })?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    let started = Instant::now();
    loop {
        let listed = api.list(&ListParams::default()).await?;
        let ips: BTreeMap<String, String> = listed
            .items
            .iter()
            .filter_map(|p| Some((p.name_any(), p.status.as_ref()?.pod_ip.clone()?)))
            .collect();
        if ips.len() >= made.len() {
            return Ok(made
                .into_iter()
                .map(|(node, name)| {
                    let ip = ips[&name].clone();
                    (node, name, ip)
                })
                .collect());
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!(
                "{} of {} pods have an address after 10 minutes",
                ips.len(),
                made.len()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Each node's flow records of one window.
fn window_flows(
    pods: &[(String, String, String)],
    nodes: &[String],
    flows_per_node: usize,
    rng: &mut Lcg,
) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> =
        nodes.iter().map(|n| (n.clone(), Vec::new())).collect();
    let by_node: BTreeMap<&str, Vec<&(String, String, String)>> =
        pods.iter().fold(BTreeMap::new(), |mut m, p| {
            m.entry(p.0.as_str()).or_insert_with(Vec::new).push(p);
            m
        });
    for node in nodes {
        let Some(local) = by_node.get(node.as_str()) else {
            continue;
        };
        for f in 0..flows_per_node {
            let src = local[rng.next(local.len())];
            let port = 32768 + i32::try_from(f).unwrap_or(0);
            let tx = i64::try_from(10_000 + rng.next(1_000_000)).unwrap_or(0);
            let rx = tx / 10;
            if f % 10 == 0 {
                out.entry(node.clone()).or_default().push(json!({"srcIp": src.2, "srcPort": port, "dstIp": format!("203.0.113.{}", f % 250), "dstPort": 443, "protocol": "TCP", "txBytes": tx, "rxBytes": rx, "retransmits": 0, "pod": format!("{NS}/{}", src.1)}));
                continue;
            }
            let dst = pods[rng.next(pods.len())].clone();
            out.entry(node.clone()).or_default().push(json!({"srcIp": src.2, "srcPort": port, "dstIp": dst.2, "dstPort": 9000, "protocol": "TCP", "txBytes": tx, "rxBytes": rx, "retransmits": 0, "pod": format!("{NS}/{}", src.1)}));
            out.entry(dst.0.clone()).or_default().push(json!({"srcIp": dst.2, "srcPort": 9000, "dstIp": src.2, "dstPort": port, "protocol": "TCP", "txBytes": rx, "rxBytes": tx, "retransmits": 0, "pod": format!("{NS}/{}", dst.1)}));
        }
    }
    out
}

async fn write_window(
    client: &kube::Client,
    flows: BTreeMap<String, Vec<Value>>,
    end: jiff::Timestamp,
    interval: u64,
) -> anyhow::Result<usize> {
    let api: Api<GryviaFlowAggregate> = Api::all(client.clone());
    let start = end - jiff::SignedDuration::from_secs(i64::try_from(interval).unwrap_or(10));
    let params = PatchParams::apply(MANAGER).force();
    let total: usize = flows.values().map(Vec::len).sum();
    futures::stream::iter(flows)
        .map(|(node, records)| {
            let (api, params) = (api.clone(), params.clone());
            async move {
                api.patch(
                    &node,
                    &params,
                    &Patch::Apply(json!({
                    "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFlowAggregate",
                    "metadata": {"name": node}, "spec": {"nodeName": node}})),
                )
                .await?;
                let count = records.len();
                api.patch_status(
                    &node,
                    &params,
                    &Patch::Apply(json!({
                    "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFlowAggregate",
                    "metadata": {"name": node},
                    "status": {"windowStart": start.to_string(), "windowEnd": end.to_string(),
                               "flowCount": count, "flows": records}})),
                )
                .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    Ok(total)
}

/// Seconds until `folded` (of the graph, of the cost) holds `end` for each of `nodes`.
async fn fold_latency(client: &kube::Client, nodes: usize, end: i64) -> anyhow::Result<(f64, f64)> {
    let graphs: Api<GryviaServiceGraph> = Api::namespaced(client.clone(), NS);
    let costs: Api<GryviaNetworkCost> = Api::all(client.clone());
    let started = Instant::now();
    let (mut graph, mut cost) = (None, None);
    while graph.is_none() || cost.is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            bail!("the graph or the cost did not fold the window ending {end} within 120 s");
        }
        let done =
            |folded: &BTreeMap<String, k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                folded.values().filter(|t| t.0.as_second() >= end).count() >= nodes
            };
        if graph.is_none()
            && graphs
                .get(NS)
                .await?
                .status
                .is_some_and(|s| done(&s.folded))
        {
            graph = Some(started.elapsed().as_secs_f64());
        }
        if cost.is_none()
            && costs
                .get(COST)
                .await?
                .status
                .is_some_and(|s| done(&s.folded))
        {
            cost = Some(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((graph.unwrap_or_default(), cost.unwrap_or_default()))
}

async fn setup(client: &kube::Client, nodes: &[String]) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(
        json!({"metadata": {"name": NS, "labels": {"gryvia.io/tenant": "flow-load"}}}),
    )?;
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let node_api: Api<Node> = Api::all(client.clone());
    for (i, n) in nodes.iter().enumerate() {
        node_api
            .patch(n, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"topology.kubernetes.io/zone": format!("zone-{}", i % 3)}}})))
            .await?;
    }
    let apply = PatchParams::apply("flow-load").force();
    Api::<GryviaServiceGraph>::namespaced(client.clone(), NS)
        .patch(
            NS,
            &apply,
            &Patch::Apply(
                json!({"apiVersion": gryvia_types::API_VERSION, "kind": "GryviaServiceGraph",
            "metadata": {"name": NS}, "spec": {"windowMinutes": 60}}),
            ),
        )
        .await?;
    Api::<GryviaNetworkCost>::all(client.clone())
        .patch(COST, &apply, &Patch::Apply(json!({"apiVersion": gryvia_types::API_VERSION, "kind": "GryviaNetworkCost",
            "metadata": {"name": COST}, "spec": {"groupBy": "team", "egressPerGib": "0.09", "crossZonePerGib": "0.01", "usageRecords": true}})))
        .await?;
    let baselines: Api<GryviaNetworkBaseline> = Api::all(client.clone());
    for n in nodes {
        baselines
            .patch(n, &apply, &Patch::Apply(json!({"apiVersion": gryvia_types::API_VERSION, "kind": "GryviaNetworkBaseline",
                "metadata": {"name": n}, "spec": {"nodeName": n, "minSamples": 5, "sensitivitySigma": 3}})))
            .await?;
    }
    Ok(())
}

async fn cleanup(client: &kube::Client, nodes: &[String]) {
    let dp = DeleteParams::background();
    let _ = Api::<Namespace>::all(client.clone()).delete(NS, &dp).await;
    let _ = Api::<GryviaNetworkCost>::all(client.clone())
        .delete(COST, &dp)
        .await;
    for n in nodes {
        let _ = Api::<GryviaNetworkBaseline>::all(client.clone())
            .delete(n, &dp)
            .await;
        let _ = Api::<GryviaFlowAggregate>::all(client.clone())
            .delete(n, &dp)
            .await;
    }
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    if let Ok(l) = records
        .list(&ListParams::default().labels(&format!("gryvia.io/network-cost={COST}")))
        .await
    {
        for r in l.items {
            let _ = records.delete(&r.name_any(), &dp).await;
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let per_node = number_arg("--pods-per-node", 10)?;
    let flows_per_node = number_arg("--flows-per-node", 50)?;
    let windows = number_arg("--windows", 12)?;
    let interval = u64::try_from(number_arg("--interval", 10)?).unwrap_or(10);
    let client = kube::Client::try_default()
        .await
        .context("connect to the API server")?;
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels("gryvia.io/testenv=true"))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    nodes.sort();
    if nodes.is_empty() {
        bail!("no gryvia.io/testenv=true node: start testenv first");
    }
    setup(&client, &nodes).await?;
    let t = Instant::now();
    let pods = pods(&client, &nodes, per_node).await?;
    println!(
        "{} nodes, {} pods with addresses in {:.1} s",
        nodes.len(),
        pods.len(),
        t.elapsed().as_secs_f64()
    );
    let mut rng = Lcg(42);
    let (mut graph, mut cost, mut records) = (Vec::new(), Vec::new(), 0);
    let mut last_end = 0;
    for w in 0..windows {
        let tick = Instant::now();
        let flows = window_flows(&pods, &nodes, flows_per_node, &mut rng);
        let end = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())?;
        let write = Instant::now();
        records = write_window(&client, flows, end, interval).await?;
        let wrote = write.elapsed().as_secs_f64();
        let (g, c) = fold_latency(&client, nodes.len(), end.as_second()).await?;
        println!(
            "window {w}: {records} flow records written in {wrote:.2} s; folded by the graph {g:.2} s, by the cost {c:.2} s after the last write"
        );
        graph.push(g);
        cost.push(c);
        last_end = end.as_second();
        tokio::time::sleep(Duration::from_secs(interval).saturating_sub(tick.elapsed())).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baselines = Api::<GryviaNetworkBaseline>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let folded = baselines
        .items
        .iter()
        .filter(|b| nodes.contains(&b.name_any()))
        .filter(|b| {
            b.status
                .as_ref()
                .and_then(|s| s.window_end.as_ref())
                .is_some_and(|t| t.0.as_second() >= last_end)
        })
        .count();
    graph.sort_by(f64::total_cmp);
    cost.sort_by(f64::total_cmp);
    let edges = Api::<GryviaServiceGraph>::namespaced(client.clone(), NS)
        .get(NS)
        .await?
        .status
        .map_or(0, |s| s.edges.len());
    println!("flow records per window: {records}; windows: {windows}");
    println!(
        "fold latency after the last write, graph: p50 {:.2} s, p95 {:.2} s, max {:.2} s",
        percentile(&graph, 0.5),
        percentile(&graph, 0.95),
        percentile(&graph, 1.0)
    );
    println!(
        "fold latency after the last write, cost: p50 {:.2} s, p95 {:.2} s, max {:.2} s",
        percentile(&cost, 0.5),
        percentile(&cost, 0.95),
        percentile(&cost, 1.0)
    );
    println!(
        "baselines that folded the last window: {folded} of {}; graph edges: {edges}",
        nodes.len()
    );
    cleanup(&client, &nodes).await;
    Ok(())
}
