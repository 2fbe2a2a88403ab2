//! `gryvia-collector --node NAME`: the node's eBPF collector.
//!
//! Loads and attaches the programs of `gryvia-ebpf`, reads their maps every interval, joins
//! cgroups to this node's pods through the kubelet's cgroup paths, and reports the window:
//! Prometheus counters per pod, interface and TCP health on `/metrics`, and the status of the
//! node's GryviaFabricSignal and GryviaFlowAggregate (named after the node). Needs root (a
//! privileged pod with the host's cgroup and network namespaces); off by default in
//! `deploy/collector/` (it runs only on nodes labelled `gryvia.io/collector=enabled`).
//!
//! GryviaFlowPolicies with `action: deny` (resolved to addresses by the network-operator) are
//! watched; their entries for this node's pods go into the programs' deny map, and the drops
//! per policy into the GryviaFabricSignal's `policyDrops` (`deny.rs`).
//!
//! A thin binary: flags and wiring. The kernel side and the window arithmetic are
//! `gryvia_ebpf`; this file lists pods and writes objects.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gryvia_client::metrics::{Health, Metrics};
use gryvia_client::operators::{exit_code, init_logging, shutdown_signal};
use gryvia_ebpf::report::{self, CgroupIndex, PodRef, PodResolver};
use gryvia_ebpf::{Collector, Options, Programs, Snapshot};
use gryvia_reconcile::network::collector::{Settings, settings as collector_settings};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::{
    AppliedCollectorConfig, CollectorProgram, GryviaCollectorConfig, GryviaFabricSignal,
    GryviaFabricSignalStatus, GryviaFlowAggregate, labels,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use tracing::{info, warn};

mod deny;

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
    /// Write this node's fabric status (interfaces, retransmissions, RTT, the config it runs,
    /// deny drops) into its own GryviaFabricSignal, named after the node; the network-operator's
    /// --merge-fabric-signals folds those into one. `--fabric-status-per-node=false` writes only
    /// the GryviaFlowAggregate.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fabric_status_per_node: bool,
    /// Only serve metrics; write no Kubernetes objects and list no pods.
    #[arg(long)]
    no_kubernetes: bool,
    /// Stop after this many windows (benchmarks and tests).
    #[arg(long)]
    iterations: Option<u64>,
    /// Capacity of each per-flow map (the least recently used flows are evicted beyond it;
    /// 65,536 by default, at least 1,024). The kernel allocates the two per-CPU maps whole, 96
    /// bytes a flow for each possible CPU: about 6 MiB per CPU at the default.
    #[arg(long, value_parser = clap::value_parser!(u32).range(i64::from(gryvia_ebpf::MIN_FLOWS)..))]
    max_flows: Option<u32>,
    /// Have the kernel time every run of the eBPF programs (BPF_ENABLE_STATS, host-wide, for
    /// as long as the collector runs) and serve the figures as gryvia_ebpf_program_runs and
    /// gryvia_ebpf_program_run_time_nanoseconds. Off by default: the timing reads the clock
    /// twice around each run, so on every packet.
    #[arg(long)]
    program_stats: bool,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.log_format);
    exit_code(run(flags))
}

/// The programs `--programs` names (all of them when it names none).
fn programs(names: &[String]) -> anyhow::Result<BTreeSet<CollectorProgram>> {
    let all = [
        CollectorProgram::CgroupTraffic,
        CollectorProgram::TcpFlows,
        CollectorProgram::TcpRetransmits,
        CollectorProgram::InterfaceCounters,
    ];
    if names.is_empty() {
        return Ok(all.into());
    }
    names
        .iter()
        .map(|n| {
            all.into_iter().find(|p| p.as_str() == n).with_context(|| {
                format!(
                    "--programs: {n:?} is not one of cgroup-traffic, tcp-flows, tcp-retransmits, interface-counters"
                )
            })
        })
        .collect()
}

/// The eBPF collector's switches for `programs`.
fn switches(programs: &BTreeSet<CollectorProgram>) -> Programs {
    Programs {
        cgroup_traffic: programs.contains(&CollectorProgram::CgroupTraffic),
        tcp_flows: programs.contains(&CollectorProgram::TcpFlows),
        tcp_retransmits: programs.contains(&CollectorProgram::TcpRetransmits),
        interface_counters: programs.contains(&CollectorProgram::InterfaceCounters),
    }
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
            "Runs of an eBPF program since it was loaded (with --program-stats)",
            n.program_runs.clone(),
        );
        m.register(
            "ebpf_program_run_time_nanoseconds",
            "Time an eBPF program ran since it was loaded (with --program-stats)",
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
    // Before anything else: a collector that cannot load programs says so in one line.
    let uid = gryvia_ebpf::host::effective_uid();
    if uid != 0 {
        return Err(gryvia_ebpf::Error::NotRoot(uid).into());
    }
    let defaults = Settings {
        programs: programs(&flags.programs)?,
        interval_seconds: flags.interval,
        interfaces: flags.interfaces.clone(),
        source: None,
    };
    let runtime = tokio::runtime::Runtime::new().context("start the async runtime")?;
    runtime.block_on(async move {
        tokio::select! {
            r = collect(&flags, defaults) => r,
            () = shutdown_signal() => Ok(()),
        }
    })
}

/// The eBPF programs as they run, and the settings they were started with.
struct Running {
    collector: Collector,
    settings: Settings,
    ifaces: BTreeMap<u32, String>,
}

/// Starts the programs `settings` name.
fn start(settings: &Settings, flags: &Flags) -> anyhow::Result<Running> {
    let mut ifaces = BTreeMap::new();
    for name in &settings.interfaces {
        let path = format!("/sys/class/net/{name}/ifindex");
        let index: u32 = std::fs::read_to_string(&path)
            .with_context(|| format!("interface {name}: read {path}"))?
            .trim()
            .parse()
            .with_context(|| format!("interface {name}: {path} is not a number"))?;
        ifaces.insert(index, name.clone());
    }
    let options = Options {
        programs: switches(&settings.programs),
        cgroup: flags.cgroup.clone(),
        interfaces: settings.interfaces.clone(),
        xdp_generic: flags.xdp_generic,
        object: flags.object.clone(),
        max_flows: flags.max_flows,
    };
    let mut collector = Collector::start(&options)?;
    if flags.program_stats
        && let Err(e) = collector.enable_stats()
    {
        warn!(error = %e, "per-program run time is not available");
    }
    let from = settings.source.as_ref().map_or_else(
        || "the command line".to_owned(),
        |(n, g)| format!("GryviaCollectorConfig {n} (generation {g})"),
    );
    let names: Vec<&str> = settings.programs.iter().map(|p| p.as_str()).collect();
    let max_flows = collector.max_flows()?;
    info!(node = %flags.node, cgroup = %collector.cgroup().display(), interfaces = ?settings.interfaces,
          programs = ?names, interval = settings.interval_seconds, max_flows, %from, "eBPF programs attached");
    Ok(Running {
        collector,
        settings: settings.clone(),
        ifaces,
    })
}

/// What the collector follows: its node's labels and every GryviaCollectorConfig, watched; each
/// change sends the settings of the config the node follows (or `defaults`) on `tx`.
async fn follow_configs(
    client: kube::Client,
    node: String,
    defaults: Settings,
    tx: tokio::sync::watch::Sender<Option<Settings>>,
) {
    use futures::{FutureExt, StreamExt};
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let (configs, config_writer) = reflector::store::<GryviaCollectorConfig>();
    let (nodes, node_writer) = reflector::store::<Node>();
    fn relevant<K>(e: &Result<watcher::Event<K>, watcher::Error>) -> bool {
        match e {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                true
            }
            Ok(_) => false,
            Err(err) => {
                warn!(error = %err, "watch collector configs or this node");
                false
            }
        }
    }
    let config_events = reflector(
        config_writer,
        watcher(
            Api::<GryviaCollectorConfig>::all(client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .map(|e| relevant(&e));
    let node_events = reflector(
        node_writer,
        watcher(
            Api::<Node>::all(client),
            watcher::Config::default().fields(&format!("metadata.name={node}")),
        ),
    )
    .default_backoff()
    .map(|e| relevant(&e));
    let mut events = std::pin::pin!(futures::stream::select(config_events, node_events));
    let (mut configs_ready, mut node_ready) = (false, false);
    while let Some(changed) = events.next().await {
        if !changed {
            continue;
        }
        configs_ready = configs_ready || configs.wait_until_ready().now_or_never().is_some();
        node_ready = node_ready || nodes.wait_until_ready().now_or_never().is_some();
        if !(configs_ready && node_ready) {
            continue;
        }
        let labels = nodes
            .state()
            .first()
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let all: Vec<GryviaCollectorConfig> =
            configs.state().iter().map(|c| (**c).clone()).collect();
        let next = collector_settings(&all, &labels, &defaults);
        tx.send_if_modified(|cur| {
            let new = cur.as_ref() != Some(&next);
            if new {
                *cur = Some(next);
            }
            new
        });
    }
}

/// Switches `running` to `desired`: the same programs under another name are only renamed;
/// otherwise the programs are detached and started again with the new settings, and when
/// those cannot start, with `defaults` (the error is returned beside them). Says whether the
/// programs were started again (their counters from zero).
fn switch(
    running: Running,
    desired: &Settings,
    defaults: &Settings,
    flags: &Flags,
) -> anyhow::Result<(Running, Option<String>, bool)> {
    let same = |a: &Settings, b: &Settings| {
        a.programs == b.programs
            && a.interval_seconds == b.interval_seconds
            && a.interfaces == b.interfaces
    };
    if same(&running.settings, desired) {
        let mut running = running;
        running.settings.source.clone_from(&desired.source);
        return Ok((running, None, false));
    }
    // Detached before the new ones attach: an interface takes one XDP program.
    drop(running);
    let (r, failed) = begin(desired.clone(), defaults, flags)?;
    Ok((r, failed.map(|(_, why)| why), true))
}

async fn collect(flags: &Flags, defaults: Settings) -> anyhow::Result<()> {
    let (client, mut rx) = connect(flags, &defaults).await?;
    let mut deny = deny::Enforcer::new(client.as_ref());
    let first = rx
        .borrow_and_update()
        .clone()
        .unwrap_or_else(|| defaults.clone());
    let (mut running, mut failed) = begin(first, &defaults, flags)?;
    // The node's objects exist once the programs are attached.
    if let Some(c) = &client {
        ensure_objects(c, &flags.node, flags.fabric_status_per_node).await?;
    }
    let (net, health) = serve_metrics(flags.metrics_addr);
    let mut resolver = PodResolver {
        cgroups: CgroupIndex::scan(running.collector.cgroup()),
        pods: BTreeMap::new(),
    };
    let mut before = Snapshot::default();
    let mut links_before = BTreeMap::new();
    let mut start_at = now();
    let mut ticker = ticker_of(running.settings.interval_seconds).await;
    let mut windows = 0u64;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            Ok(()) = rx.changed() => {
                let Some(desired) = rx.borrow_and_update().clone() else { continue };
                let tried = failed.as_ref().is_some_and(|(d, _): &(Settings, String)| *d == desired);
                if tried || desired == running.settings {
                    continue;
                }
                let (r, error, reloaded) = switch(running, &desired, &defaults, flags)?;
                running = r;
                failed = error.map(|e| (desired, e));
                if reloaded {
                    deny.reloaded(&mut running.collector);
                    // Counters start again with the programs: the next window is from now.
                    before = Snapshot::default();
                    start_at = now();
                    ticker = ticker_of(running.settings.interval_seconds).await;
                }
                continue;
            }
            Ok(()) = deny.rx.changed() => {
                deny.enforce(&mut running.collector);
                continue;
            }
        }
        if let Some(c) = &client {
            refresh_pods(
                c,
                &flags.node,
                &mut resolver,
                &mut deny,
                &mut running.collector,
            )
            .await;
        }
        let collector = &running.collector;
        let snapshot = collector.snapshot()?;
        let window = report::delta(&before, &snapshot);
        let end = now();
        if window
            .cgroups()
            .keys()
            .any(|id| !resolver.cgroups.contains(*id))
        {
            resolver.cgroups = CgroupIndex::scan(collector.cgroup());
        }
        let fabric = fabric_of(
            &running,
            failed.as_ref(),
            &deny,
            &window,
            &end,
            &mut links_before,
        );
        record(&net, &window, &fabric, &resolver, collector);
        net.tracked
            .set(i64::try_from(snapshot.flows.len()).unwrap_or(i64::MAX));
        if let Some(c) = &client {
            let flows =
                report::flow_aggregate_status(&window, &resolver, start_at.clone(), end.clone());
            let fabric = flags.fabric_status_per_node.then(|| json!(fabric));
            if let Err(e) = write_status(c, &flags.node, fabric.as_ref(), &json!(flows)).await {
                net.write_errors.inc();
                warn!(error = %format!("{e:#}"), "write the node's network objects");
            }
        }
        health.set_ready(true);
        before = snapshot;
        start_at = end;
        windows += 1;
        if flags.iterations.is_some_and(|n| windows >= n) {
            return Ok(());
        }
    }
}

/// Serves /metrics, /healthz and /readyz at `addr`: the collector's counters and readiness.
fn serve_metrics(addr: SocketAddr) -> (NetMetrics, Health) {
    let metrics = Metrics::new();
    let net = NetMetrics::register(&metrics);
    let health = Health::default();
    tokio::spawn(gryvia_client::metrics::serve(
        addr,
        metrics.clone(),
        health.clone(),
    ));
    (net, health)
}

/// The window as the status of the node's GryviaFabricSignal; `links_before` moves on to the
/// links read now.
fn fabric_of(
    running: &Running,
    failed: Option<&(Settings, String)>,
    deny: &deny::Enforcer,
    window: &Snapshot,
    end: &Time,
    links_before: &mut BTreeMap<String, report::Link>,
) -> GryviaFabricSignalStatus {
    let secs = i32::try_from(running.settings.interval_seconds).unwrap_or(i32::MAX);
    let mut fabric = report::fabric_signal_status(window, &running.ifaces, secs, end.clone());
    fabric.programs = running.settings.programs.iter().copied().collect();
    fabric.config = applied(running, failed);
    fabric.policy_drops = deny.drops(&running.collector);
    let links: BTreeMap<String, report::Link> = running
        .ifaces
        .values()
        .map(|n| (n.clone(), report::read_link(Path::new("/sys/class/net"), n)))
        .collect();
    report::add_links(&mut fabric, &links, links_before);
    *links_before = links;
    fabric
}

/// Lists this node's pods again (for the cgroup join and the deny entries' addresses) and
/// loads the deny entries for them.
async fn refresh_pods(
    client: &kube::Client,
    node: &str,
    resolver: &mut PodResolver,
    deny: &mut deny::Enforcer,
    collector: &mut Collector,
) {
    match node_pods(client, node).await {
        Ok((pods, ips)) => {
            resolver.pods = pods;
            deny.local = ips;
        }
        Err(e) => warn!(error = %format!("{e:#}"), "list this node's pods"),
    }
    deny.enforce(collector);
}

/// The API client (none with `--no-kubernetes`), and the settings the node follows, watched; waits up to [`CONFIG_WAIT`] for the first, so the
/// collector starts with its config rather than switching to it a window later.
async fn connect(
    flags: &Flags,
    defaults: &Settings,
) -> anyhow::Result<(
    Option<kube::Client>,
    tokio::sync::watch::Receiver<Option<Settings>>,
)> {
    let (tx, mut rx) = tokio::sync::watch::channel(None);
    if flags.no_kubernetes {
        return Ok((None, rx));
    }
    let c = gryvia_client::connect().await?;
    tokio::spawn(follow_configs(
        c.clone(),
        flags.node.clone(),
        defaults.clone(),
        tx,
    ));
    let _ = tokio::time::timeout(CONFIG_WAIT, rx.wait_for(Option::is_some)).await;
    Ok((Some(c), rx))
}

/// The first programs: those of `first`, else (a config that cannot be applied) `defaults`'s
/// with the reason beside them.
fn begin(
    first: Settings,
    defaults: &Settings,
    flags: &Flags,
) -> anyhow::Result<(Running, Option<(Settings, String)>)> {
    match start(&first, flags) {
        Ok(r) => Ok((r, None)),
        Err(e) if first.source.is_some() => {
            let why = format!("{e:#}");
            warn!(error = %why, "the collector config cannot be applied; the command line's settings run");
            Ok((start(defaults, flags)?, Some((first, why))))
        }
        Err(e) => Err(e),
    }
}

/// The config the collector reports following: the one it could not apply (with why), else
/// the one it runs; none when it runs its command line.
fn applied(
    running: &Running,
    failed: Option<&(Settings, String)>,
) -> Option<AppliedCollectorConfig> {
    let (settings, error) = match failed {
        Some((desired, why)) => (desired, Some(why.clone())),
        None => (&running.settings, None),
    };
    settings
        .source
        .as_ref()
        .map(|(name, generation)| AppliedCollectorConfig {
            name: name.clone(),
            generation: *generation,
            error,
        })
}

/// How long a starting collector waits for the config its node follows.
const CONFIG_WAIT: Duration = Duration::from_secs(10);

/// A ticker of `seconds` whose first tick has passed (the first window is a whole one).
async fn ticker_of(seconds: u64) -> tokio::time::Interval {
    let mut t = tokio::time::interval(Duration::from_secs(seconds));
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    t.tick().await;
    t
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

/// This node's pods by UID, with the tenant of the pod or its namespace; and the addresses of
/// those with their own (not the host's network).
async fn node_pods(
    client: &kube::Client,
    node: &str,
) -> anyhow::Result<(BTreeMap<String, PodRef>, BTreeSet<String>)> {
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
    let ips = pods
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.host_network) != Some(true))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    let by_uid = pods
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
        .collect();
    Ok((by_uid, ips))
}

/// Creates the node's GryviaFlowAggregate, and its GryviaFabricSignal when `fabric`, when they
/// are missing.
async fn ensure_objects(client: &kube::Client, node: &str, fabric: bool) -> anyhow::Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    let spec = json!({"nodeName": node});
    if fabric {
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
    }
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

/// Writes the status of the node's GryviaFabricSignal (when `fabric` is given) and
/// GryviaFlowAggregate.
async fn write_status(
    client: &kube::Client,
    node: &str,
    fabric: Option<&serde_json::Value>,
    flows: &serde_json::Value,
) -> anyhow::Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    if let Some(fabric) = fabric {
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
    }
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
