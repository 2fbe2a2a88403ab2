//! `gryvia-collector --node NAME`: the node's eBPF collector.
//!
//! Loads and attaches the programs of `gryvia-ebpf`, reads their maps every interval, joins
//! cgroups to this node's pods through the kubelet's cgroup paths, and reports the window:
//! Prometheus counters per pod, interface and TCP health on `/metrics`, and the status of the
//! node's GryviaFabricSignal and GryviaFlowAggregate (named after the node). Needs root (a
//! privileged pod with the host's cgroup and network namespaces); off by default in
//! `deploy/collector/` (it runs only on nodes labelled `gryvia.io/collector=enabled`).
//!
//! A thin binary: flags and wiring. The kernel side and the window arithmetic are
//! `gryvia_ebpf`; this file lists pods and writes objects.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gryvia_client::metrics::{Health, Metrics};
use gryvia_client::operators::{exit_code, init_logging, shutdown_signal};
use gryvia_ebpf::report::{self, CgroupIndex, PodRef, PodResolver};
use gryvia_ebpf::{Collector, Options, Programs, Snapshot};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{GryviaFabricSignal, GryviaFabricSignalStatus, GryviaFlowAggregate, labels};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use tracing::{info, warn};

const MANAGER: &str = "gryvia-collector";

/// Collects per-pod and per-flow network counters with eBPF on this node.
#[derive(Parser, Debug)]
#[command(name = "gryvia-collector", version, about)]
struct Flags {
    /// The Kubernetes node this collector runs on (names its GryviaFabricSignal and
    /// GryviaFlowAggregate).
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// Seconds between two map reads (the reporting window).
    #[arg(long, default_value_t = 10)]
    interval: u64,
    /// Fabric-facing interfaces the XDP program counts on (comma-separated).
    #[arg(long, value_delimiter = ',')]
    interfaces: Vec<String>,
    /// Attach XDP in generic (skb) mode.
    #[arg(long)]
    xdp_generic: bool,
    /// Programs to run (comma-separated): cgroup-traffic, tcp-flows, tcp-retransmits,
    /// interface-counters. All by default.
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
    /// The cgroup v2 directory the cgroup programs attach to (the cgroup v2 root by default).
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Load the programs from this object file instead of the ones built into the collector
    /// (same program and map names).
    #[arg(long)]
    object: Option<PathBuf>,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long, default_value = "0.0.0.0:9102")]
    metrics_addr: SocketAddr,
    /// Only serve metrics; write no Kubernetes objects and list no pods.
    #[arg(long)]
    no_kubernetes: bool,
    /// Stop after this many windows (benchmarks and tests).
    #[arg(long)]
    iterations: Option<u64>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.log_format);
    exit_code(run(flags))
}

fn programs(names: &[String]) -> anyhow::Result<Programs> {
    if names.is_empty() {
        return Ok(Programs::default());
    }
    let mut p = Programs {
        cgroup_traffic: false,
        tcp_flows: false,
        tcp_retransmits: false,
        interface_counters: false,
    };
    for n in names {
        match n.as_str() {
            "cgroup-traffic" => p.cgroup_traffic = true,
            "tcp-flows" => p.tcp_flows = true,
            "tcp-retransmits" => p.tcp_retransmits = true,
            "interface-counters" => p.interface_counters = true,
            other => anyhow::bail!(
                "--programs: {other:?} is not one of cgroup-traffic, tcp-flows, tcp-retransmits, interface-counters"
            ),
        }
    }
    Ok(p)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PodLabels {
    namespace: String,
    pod: String,
    tenant: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InterfaceLabels {
    interface: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProgramLabels {
    program: String,
}

struct NetMetrics {
    pod_bytes: Family<PodLabels, Counter>,
    pod_packets: Family<PodLabels, Counter>,
    iface_bytes: Family<InterfaceLabels, Counter>,
    iface_packets: Family<InterfaceLabels, Counter>,
    retransmits: Counter,
    connections: Counter,
    flows: Gauge,
    tracked: Gauge,
    median_srtt: Gauge,
    program_runs: Family<ProgramLabels, Gauge>,
    program_ns: Family<ProgramLabels, Gauge>,
    write_errors: Counter,
}

impl NetMetrics {
    fn register(m: &Metrics) -> Self {
        let n = NetMetrics {
            pod_bytes: Family::default(),
            pod_packets: Family::default(),
            iface_bytes: Family::default(),
            iface_packets: Family::default(),
            retransmits: Counter::default(),
            connections: Counter::default(),
            flows: Gauge::default(),
            tracked: Gauge::default(),
            median_srtt: Gauge::default(),
            program_runs: Family::default(),
            program_ns: Family::default(),
            write_errors: Counter::default(),
        };
        m.register(
            "pod_network_bytes",
            "Bytes a pod sent or received (from the IP header on)",
            n.pod_bytes.clone(),
        );
        m.register(
            "pod_network_packets",
            "Packets a pod sent or received",
            n.pod_packets.clone(),
        );
        m.register(
            "interface_rx_bytes",
            "Frame bytes received on a counted interface",
            n.iface_bytes.clone(),
        );
        m.register(
            "interface_rx_packets",
            "Frames received on a counted interface",
            n.iface_packets.clone(),
        );
        m.register(
            "tcp_retransmits",
            "TCP segments retransmitted on this node",
            n.retransmits.clone(),
        );
        m.register(
            "tcp_connections_established",
            "TCP connections that reached ESTABLISHED",
            n.connections.clone(),
        );
        m.register(
            "flows_in_window",
            "Flows active in the last window",
            n.flows.clone(),
        );
        m.register(
            "flows_tracked",
            "Flows in the eBPF maps (least recently used ones are evicted beyond 65,536)",
            n.tracked.clone(),
        );
        m.register(
            "tcp_median_srtt_microseconds",
            "Median smoothed RTT of the flows sampled in the last window",
            n.median_srtt.clone(),
        );
        m.register(
            "ebpf_program_runs",
            "Runs of an eBPF program since it was loaded",
            n.program_runs.clone(),
        );
        m.register(
            "ebpf_program_run_time_nanoseconds",
            "Time an eBPF program ran since it was loaded",
            n.program_ns.clone(),
        );
        m.register(
            "collector_write_errors",
            "Failed writes of the node's network objects",
            n.write_errors.clone(),
        );
        n
    }
}

fn run(flags: Flags) -> anyhow::Result<()> {
    if flags.interval == 0 || flags.interval > 3600 {
        anyhow::bail!("--interval must be 1-3600 seconds, got {}", flags.interval);
    }
    let options = Options {
        programs: programs(&flags.programs)?,
        cgroup: flags.cgroup.clone(),
        interfaces: flags.interfaces.clone(),
        xdp_generic: flags.xdp_generic,
        object: flags.object.clone(),
    };
    let mut collector = Collector::start(&options)?;
    if let Err(e) = collector.enable_stats() {
        warn!(error = %e, "per-program run time is not available");
    }
    let mut ifaces = BTreeMap::new();
    for name in &flags.interfaces {
        let path = format!("/sys/class/net/{name}/ifindex");
        let index: u32 = std::fs::read_to_string(&path)
            .with_context(|| format!("--interfaces: read {path}"))?
            .trim()
            .parse()
            .with_context(|| format!("--interfaces: {path} is not a number"))?;
        ifaces.insert(index, name.clone());
    }
    info!(node = %flags.node, cgroup = %collector.cgroup().display(), interfaces = ?flags.interfaces, "eBPF programs attached");
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    runtime.block_on(async move {
        tokio::select! {
            r = collect(&flags, &collector, &ifaces) => r,
            () = shutdown_signal() => Ok(()),
        }
    })
}

async fn collect(
    flags: &Flags,
    collector: &Collector,
    ifaces: &BTreeMap<u32, String>,
) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    let net = NetMetrics::register(&metrics);
    let health = Health::default();
    tokio::spawn(gryvia_client::metrics::serve(
        flags.metrics_addr,
        metrics.clone(),
        health.clone(),
    ));
    let client = if flags.no_kubernetes {
        None
    } else {
        let c = gryvia_client::connect().await?;
        ensure_objects(&c, &flags.node).await?;
        Some(c)
    };
    let cgroup_root = collector.cgroup().to_path_buf();
    let mut resolver = PodResolver {
        cgroups: CgroupIndex::scan(&cgroup_root),
        pods: BTreeMap::new(),
    };
    let mut before = Snapshot::default();
    let mut links_before = BTreeMap::new();
    let mut start = now();
    let mut ticker = tokio::time::interval(Duration::from_secs(flags.interval));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut windows = 0u64;
    loop {
        ticker.tick().await;
        let snapshot = collector.snapshot()?;
        let window = report::delta(&before, &snapshot);
        let end = now();
        if window
            .cgroups
            .keys()
            .any(|id| !resolver.cgroups.contains(*id))
        {
            resolver.cgroups = CgroupIndex::scan(&cgroup_root);
        }
        if let Some(c) = &client {
            match node_pods(c, &flags.node).await {
                Ok(p) => resolver.pods = p,
                Err(e) => warn!(error = %format!("{e:#}"), "list this node's pods"),
            }
        }
        let secs = i32::try_from(flags.interval).unwrap_or(i32::MAX);
        let mut fabric = report::fabric_signal_status(&window, ifaces, secs, end.clone());
        let links: BTreeMap<String, report::Link> = ifaces
            .values()
            .map(|n| (n.clone(), report::read_link(Path::new("/sys/class/net"), n)))
            .collect();
        report::add_links(&mut fabric, &links, &links_before);
        links_before = links;
        record(&net, &window, &fabric, &resolver, collector);
        net.tracked
            .set(i64::try_from(snapshot.flows.len()).unwrap_or(i64::MAX));
        if let Some(c) = &client {
            let flows =
                report::flow_aggregate_status(&window, &resolver, start.clone(), end.clone());
            if let Err(e) = write_status(c, &flags.node, &json!(fabric), &json!(flows)).await {
                net.write_errors.inc();
                warn!(error = %format!("{e:#}"), "write the node's network objects");
            }
        }
        health.set_ready(true);
        before = snapshot;
        start = end;
        windows += 1;
        if flags.iterations.is_some_and(|n| windows >= n) {
            return Ok(());
        }
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn record(
    net: &NetMetrics,
    window: &Snapshot,
    fabric: &GryviaFabricSignalStatus,
    resolver: &PodResolver,
    collector: &Collector,
) {
    for (pod, t) in report::pod_traffic(window, resolver).into_values() {
        for (direction, bytes, packets) in [
            ("rx", t.rx_bytes, t.rx_packets),
            ("tx", t.tx_bytes, t.tx_packets),
        ] {
            let l = PodLabels {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                tenant: pod.tenant.clone().unwrap_or_default(),
                direction: direction.to_owned(),
            };
            net.pod_bytes.get_or_create(&l).inc_by(bytes);
            net.pod_packets.get_or_create(&l).inc_by(packets);
        }
    }
    // The window's counters as the GryviaFabricSignal states them.
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    for i in &fabric.interfaces {
        let l = InterfaceLabels {
            interface: i.name.clone(),
        };
        net.iface_bytes.get_or_create(&l).inc_by(n(i.rx_bytes));
        net.iface_packets.get_or_create(&l).inc_by(n(i.rx_packets));
    }
    net.retransmits.inc_by(n(fabric.tcp_retransmits));
    net.median_srtt.set(fabric.median_srtt_micros.unwrap_or(0));
    net.connections
        .inc_by(window.flows.values().map(|f| f.tcp.established).sum());
    net.flows
        .set(i64::try_from(window.flows.len()).unwrap_or(i64::MAX));
    for p in collector.program_stats() {
        let l = ProgramLabels { program: p.name };
        net.program_runs
            .get_or_create(&l)
            .set(i64::try_from(p.run_count).unwrap_or(i64::MAX));
        net.program_ns
            .get_or_create(&l)
            .set(i64::try_from(p.run_time_ns).unwrap_or(i64::MAX));
    }
}

/// This node's pods by UID, with the tenant of the pod or its namespace.
async fn node_pods(client: &kube::Client, node: &str) -> anyhow::Result<BTreeMap<String, PodRef>> {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .context("list pods")?;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default().labels(labels::TENANT))
        .await
        .context("list tenant namespaces")?;
    let tenant_of_ns: BTreeMap<String, String> = namespaces
        .items
        .into_iter()
        .filter_map(|n| {
            let t = n.metadata.labels.as_ref()?.get(labels::TENANT)?.clone();
            Some((n.metadata.name?, t))
        })
        .collect();
    Ok(pods
        .items
        .into_iter()
        .filter_map(|p| {
            let uid = p.metadata.uid?;
            let namespace = p.metadata.namespace?;
            let tenant = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::TENANT).cloned())
                .or_else(|| tenant_of_ns.get(&namespace).cloned());
            Some((
                uid,
                PodRef {
                    namespace,
                    name: p.metadata.name?,
                    tenant,
                },
            ))
        })
        .collect())
}

/// Creates the node's GryviaFabricSignal and GryviaFlowAggregate when they are missing.
async fn ensure_objects(client: &kube::Client, node: &str) -> anyhow::Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    let spec = json!({"nodeName": node});
    Api::<GryviaFabricSignal>::all(client.clone())
        .patch(
            node,
            &params,
            &Patch::Apply(json!({
            "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFabricSignal",
            "metadata": {"name": node}, "spec": spec})),
        )
        .await
        .with_context(|| format!("apply GryviaFabricSignal {node}"))?;
    Api::<GryviaFlowAggregate>::all(client.clone())
        .patch(
            node,
            &params,
            &Patch::Apply(json!({
            "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFlowAggregate",
            "metadata": {"name": node}, "spec": spec})),
        )
        .await
        .with_context(|| format!("apply GryviaFlowAggregate {node}"))?;
    Ok(())
}

async fn write_status(
    client: &kube::Client,
    node: &str,
    fabric: &serde_json::Value,
    flows: &serde_json::Value,
) -> anyhow::Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    Api::<GryviaFabricSignal>::all(client.clone())
        .patch_status(
            node,
            &params,
            &Patch::Apply(json!({
            "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFabricSignal",
            "metadata": {"name": node}, "status": fabric})),
        )
        .await
        .with_context(|| format!("write the status of GryviaFabricSignal {node}"))?;
    Api::<GryviaFlowAggregate>::all(client.clone())
        .patch_status(
            node,
            &params,
            &Patch::Apply(json!({
            "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaFlowAggregate",
            "metadata": {"name": node}, "status": flows})),
        )
        .await
        .with_context(|| format!("write the status of GryviaFlowAggregate {node}"))?;
    Ok(())
}
