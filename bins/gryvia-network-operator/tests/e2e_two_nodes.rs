//! End-to-end, as root, on the real kernel and against a real control plane: two nodes, each a
//! network namespace with a cgroup subtree of its own, joined by a veth pair. Each runs the
//! collector binary (under `deploy/collector/rbac.yaml`, its cgroup programs attached to its
//! node's subtree); the network-operator binary runs under `deploy/network-operator/rbac.yaml`.
//!
//! The pods are pods of the API server on two KWOK nodes in two zones: a four-rank job `train`
//! (ranks 0 and 1 on node a, 2 and 3 on node b), a job `loader` on node b and a `store` pod on
//! node a. Each has a cgroup under its node's subtree, named as the kubelet's systemd driver
//! names it, and its address in its node's namespace. Real datagrams of 1,000 bytes on the wire
//! run between them:
//!
//! - a ring, rank r to rank r+1 on port 29500, 100 a second, except rank 1, injected slow: it
//!   sends 10 a second and rank 0 sends it 10 a second;
//! - the loader to the store on port 9000, 100 a second;
//! - an injected burst: 100 datagrams from the loader, each from a socket of its own, in one
//!   window of node b;
//! - 50 datagrams from the loader to the store's port 9001, which a deny policy forbids.
//!
//! Each answer is checked against that traffic: node b's connection-flood anomaly (observed
//! 105 connections against a baseline of 5) raised and resolved; rank 1 the only straggler,
//! named with node a; the service graph's two edges with the bytes the senders sent, exactly;
//! the bytes between the two zones and each job's cross-zone bytes, exactly; the auto policy's
//! two learned flows and its suggestions, which replay every one as allowed; the 50 denied
//! datagrams refused by the kernel and counted in the policy's status, the other traffic of
//! the same pods untouched.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gryvia_testsupport::{ClusterObject, Process, wait_for};
use gryvia_types::{
    AnomalyType, GryviaAutoPolicy, GryviaFabricSignal, GryviaFlowAggregate, GryviaFlowPolicy,
    GryviaNetworkAnomaly, GryviaNetworkBaseline, GryviaNetworkCost, GryviaServiceGraph,
    GryviaTrainingInsight, GryviaTrainingInsightStatus, Protocol, Severity, ZonePairBytes,
    conditions,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The ring's port (NCCL's usual), the store's, and the one the deny policy forbids.
const RING: u16 = 29_500;
const STORE: u16 = 9_000;
const DENIED: u16 = 9_001;
/// Payload of every datagram: 1,000 bytes with the IPv4 and UDP headers, as the programs count.
const PAYLOAD: u64 = 972;
const WIRE: i64 = 1_000;
/// Seconds every peer sends for, and the collectors' window.
const SECONDS: u64 = 24;
const INTERVAL: &str = "2";

/// Where cgroup v2 is mounted.
fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .unwrap()
}

/// A pod of the test: its name, node (0 or 1), address and cgroup.
struct TestPod {
    name: String,
    node: usize,
    ip: String,
    cgroup: PathBuf,
}

/// A node: its network namespace and cgroup subtree, removed on drop (after the processes in
/// them, which are dropped first).
struct NodeRig {
    netns: String,
    cgroup: PathBuf,
}

impl Drop for NodeRig {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        // Deepest first.
        let mut dirs: Vec<PathBuf> = walk(&self.cgroup);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(walk(&e.path()));
            }
        }
    }
    out
}

/// The two nodes' namespaces, joined by a veth pair, each with its pods' addresses on its end
/// and a permanent neighbour entry for each of the other's (no ARP on the way).
fn network(tag: &str, pods: &[TestPod]) -> [NodeRig; 2] {
    let root = cgroup2_root();
    let rigs = ["a", "b"].map(|side| NodeRig {
        netns: format!("{tag}{side}"),
        cgroup: root.join(format!("gryvia-e2e-{tag}{side}")),
    });
    let (na, nb) = (&rigs[0].netns, &rigs[1].netns);
    let (va, vb) = (format!("{tag}va"), format!("{tag}vb"));
    common::sh(&format!(
        "ip netns add {na} && ip netns add {nb} && \
         ip link add {va} type veth peer name {vb} && \
         ip link set {va} netns {na} && ip link set {vb} netns {nb} && \
         ip netns exec {na} sysctl -qw net.ipv6.conf.{va}.disable_ipv6=1 && \
         ip netns exec {nb} sysctl -qw net.ipv6.conf.{vb}.disable_ipv6=1 && \
         ip netns exec {na} ip link set lo up && ip netns exec {nb} ip link set lo up && \
         ip netns exec {na} ip link set {va} up && ip netns exec {nb} ip link set {vb} up"
    ));
    let ends = [(na, &va), (nb, &vb)];
    let macs = ends.map(|(ns, dev)| {
        common::sh(&format!(
            "ip netns exec {ns} cat /sys/class/net/{dev}/address"
        ))
    });
    for p in pods {
        let (ns, dev) = ends[p.node];
        let (other_ns, other_dev) = ends[1 - p.node];
        let mac = &macs[p.node];
        common::sh(&format!(
            "ip netns exec {ns} ip addr add {ip}/32 dev {dev} && \
             ip netns exec {other_ns} ip route add {ip}/32 dev {other_dev} && \
             ip netns exec {other_ns} ip neigh replace {ip} lladdr {mac} dev {other_dev} nud permanent",
            ip = p.ip
        ));
    }
    rigs
}

/// A process in `pod`'s cgroup and its node's namespace: `gryvia-traffic` with `args`.
fn in_pod(pod: &TestPod, rigs: &[NodeRig; 2], args: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(format!(
        "echo $$ > {cg}/cgroup.procs && exec ip netns exec {ns} {bin} {args}",
        cg = pod.cgroup.display(),
        ns = rigs[pod.node].netns,
        bin = common::sibling("gryvia-traffic").display()
    ));
    c
}

/// Runs `gryvia-traffic` in `pod` to its end: what it printed.
fn traffic(pod: &TestPod, rigs: &[NodeRig; 2], args: &str) -> Value {
    let out = in_pod(pod, rigs, args).output().unwrap();
    assert!(
        out.status.success(),
        "{args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Peers sending in the background, killed on drop (a failed test leaves none).
struct Peers(Vec<(String, Child)>);

impl Peers {
    fn start(&mut self, pod: &TestPod, rigs: &[NodeRig; 2], args: &str) {
        let child = in_pod(pod, rigs, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        self.0.push((pod.name.clone(), child));
    }

    /// Each peer's report, by pod, once all have ended.
    fn finish(mut self) -> std::collections::BTreeMap<String, Value> {
        std::mem::take(&mut self.0)
            .into_iter()
            .map(|(name, child)| {
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "{name}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                (name, serde_json::from_slice(&out.stdout).unwrap())
            })
            .collect()
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Creates the pod (labels `labels`) on `node` and its cgroup under the node's subtree.
async fn pod(
    client: &kube::Client,
    ns: &str,
    (name, labels): (&str, Value),
    (node, index): (&str, usize),
    tag: &str,
) -> TestPod {
    let ip = common::pod_ip(client, ns, name, node, labels).await;
    let uid = Api::<Pod>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let side = ["a", "b"][index];
    let cgroup = cgroup2_root()
        .join(format!("gryvia-e2e-{tag}{side}"))
        .join("kubepods.slice/kubepods-besteffort.slice")
        .join(format!(
            "kubepods-besteffort-pod{}.slice",
            uid.replace('-', "_")
        ));
    std::fs::create_dir_all(&cgroup).unwrap();
    TestPod {
        name: name.to_owned(),
        node: index,
        ip,
        cgroup,
    }
}

/// The namespaced and cluster objects the operator keeps: graph, cost, insight, auto policy
/// (learning for `learn_for` from now), deny policy.
async fn objects(client: &kube::Client, n: &str, learn_for: i64) -> ClusterObject {
    let create = |kind: &str, name: &str, spec: Value| {
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": kind,
               "metadata": {"name": name, "namespace": n}, "spec": spec})
    };
    let pp = PostParams::default();
    Api::<GryviaServiceGraph>::namespaced(client.clone(), n)
        .create(
            &pp,
            &serde_json::from_value(create(
                "GryviaServiceGraph",
                "ml",
                json!({"windowMinutes": 60}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<GryviaTrainingInsight>::namespaced(client.clone(), n)
        .create(
            &pp,
            &serde_json::from_value(create(
                "GryviaTrainingInsight",
                "train",
                json!({"jobName": "train"}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<GryviaFlowPolicy>::namespaced(client.clone(), n)
        .create(
            &pp,
            &serde_json::from_value(create(
                "GryviaFlowPolicy",
                "loader-not-9001",
                json!({"podSelector": {"app": "loader"}, "action": "deny",
                       "egress": [{"podSelector": {"app": "store"},
                                   "ports": [{"port": DENIED, "protocol": "UDP"}]}]}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    // The learning period is at least 5 minutes: begun so that it ends `learn_for` from now.
    let since = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(300 - learn_for);
    common::auto_policy(client, n, "suggest", since).await;
    ClusterObject::create::<GryviaNetworkCost>(
        client,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaNetworkCost",
               "metadata": {"name": format!("{n}-job")},
               "spec": {"groupBy": "job", "egressPerGib": "0.09", "crossZonePerGib": "0.01"}}),
    )
    .await
    .unwrap()
}

/// The collector of node `index`, its programs attached to the node's cgroup subtree.
fn collector(
    node: &str,
    rig: &NodeRig,
    access: &gryvia_testsupport::ServiceAccountAccess,
    port: u16,
) -> Process {
    let cgroup = rig.cgroup.to_str().unwrap().to_owned();
    let addr = format!("127.0.0.1:{port}");
    Process::start(
        common::sibling("gryvia-collector").to_str().unwrap(),
        &[
            "--node",
            node,
            "--interval",
            INTERVAL,
            "--programs",
            "cgroup-traffic",
            "--cgroup",
            &cgroup,
            "--metrics-addr",
            &addr,
        ],
        Some(&access.kubeconfig),
        &format!("gryvia-collector-two-nodes-{}", rig.netns),
    )
    .unwrap()
}

/// The end of `node`'s current window.
async fn window_end(client: &kube::Client, node: &str) -> Option<jiff::Timestamp> {
    let a = Api::<GryviaFlowAggregate>::all(client.clone())
        .get(node)
        .await
        .ok()?;
    Some(a.status?.window_end?.0)
}

/// `node`'s window once one starts at or after `after` and has `flows` flows: its end.
async fn steady_window(
    client: &kube::Client,
    node: &str,
    after: jiff::Timestamp,
    flows: i64,
) -> jiff::Timestamp {
    let aggregates: Api<GryviaFlowAggregate> = Api::all(client.clone());
    wait_for("a steady window", Duration::from_secs(60), || async {
        let s = aggregates.get(node).await.ok()?.status?;
        (s.window_start.as_ref()?.0 >= after && s.flow_count == flows).then_some(s.window_end?.0)
    })
    .await
    .unwrap()
}

/// The insight once both nodes' windows in it began after `after`.
async fn insight_after(
    client: &kube::Client,
    n: &str,
    after: jiff::Timestamp,
) -> GryviaTrainingInsightStatus {
    let api: Api<GryviaTrainingInsight> = Api::namespaced(client.clone(), n);
    let interval = jiff::SignedDuration::from_secs(INTERVAL.parse().unwrap());
    wait_for(
        "the insight of steady windows",
        Duration::from_secs(60),
        || async {
            let s = api.get("train").await.ok()?.status?;
            (s.windows.len() == 2 && s.windows.values().all(|t| t.0 - interval >= after))
                .then_some(s)
        },
    )
    .await
    .unwrap()
}

/// Node b's connection-flood anomalies.
async fn floods(client: &kube::Client, node: &str) -> Vec<GryviaNetworkAnomaly> {
    Api::<GryviaNetworkAnomaly>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|a| a.spec.node == node && a.spec.type_ == AnomalyType::ConnectionFlood)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn real_traffic_between_two_node_namespaces_answers_every_network_question() {
    let Some(rig) = common::root_rig("the two-node e2e test", "netnodes", "nodes", 2).await else {
        return;
    };
    let (client, n, nodes) = (rig.client.clone(), rig.ns.name.as_str(), &rig.nodes);
    let (operator_access, collector_access) = (&rig.operator, &rig.collector);
    let (za, zb) = (format!("{n}-a"), format!("{n}-b"));
    for (node, zone) in nodes.names.iter().zip([&za, &zb]) {
        Api::<Node>::all(client.clone())
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}}),
                ),
            )
            .await
            .unwrap();
    }
    let node = |i: usize| (nodes.names[i].as_str(), i);
    let tag = format!("gn{}", std::process::id() % 100_000);

    // The job `train` (its pods made as its Indexed Job would make them), the loader, the store.
    Api::<gryvia_types::GryviaAIJob>::namespaced(client.clone(), n)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                "metadata": {"name": "train"},
                "spec": {"image": "registry.local/train:1", "gpus": 1, "replicas": 4}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut pods = Vec::new();
    for rank in 0..4 {
        let labels = json!({"gryvia.io/job-name": "train",
                            "batch.kubernetes.io/job-completion-index": rank.to_string()});
        let name = format!("train-{rank}");
        pods.push(pod(&client, n, (&name, labels), node(rank / 2), &tag).await);
    }
    let loader_labels = json!({"gryvia.io/job-name": "loader", "app": "loader"});
    pods.push(pod(&client, n, ("loader-0", loader_labels), node(1), &tag).await);
    pods.push(
        pod(
            &client,
            n,
            ("store-0", json!({"app": "store"})),
            node(0),
            &tag,
        )
        .await,
    );
    let rigs = network(&tag, &pods);
    let (ranks, loader, store) = (&pods[0..4], &pods[4], &pods[5]);

    let _cost = objects(&client, n, 90).await;
    let _operator = common::operator(operator_access, n, "network-operator-two-nodes");
    let port = 19_400 + u16::try_from(std::process::id() % 200).unwrap();
    let collectors = [
        collector(&nodes.names[0], &rigs[0], collector_access, port),
        collector(&nodes.names[1], &rigs[1], collector_access, port + 1),
    ];
    // Both collectors write windows; node b's has loaded the deny entries of its loader.
    for i in 0..2 {
        wait_for("the node's windows", Duration::from_secs(60), || {
            window_end(&client, &nodes.names[i])
        })
        .await
        .unwrap();
    }
    let signals: Api<GryviaFabricSignal> = Api::all(client.clone());
    let deny_key = format!("{n}/loader-not-9001");
    wait_for(
        "the deny entries loaded",
        Duration::from_secs(60),
        || async {
            let s = signals.get(&nodes.names[1]).await.ok()?.status?;
            s.policy_drops.contains_key(&deny_key).then_some(())
        },
    )
    .await
    .unwrap();

    // The traffic: the ring (rank 1 slow) and the loader to the store.
    let began = jiff::Timestamp::now();
    let mut peers = Peers(Vec::new());
    let peer = |from: &TestPod, to: &TestPod, port: u16, rate: u32| {
        format!(
            "peer --listen {ip}:{RING} --from {ip} --to {to}:{port} --rate {rate} --size {PAYLOAD} \
             --seconds {SECONDS} --delay 1",
            ip = from.ip,
            to = to.ip
        )
    };
    for (r, rank) in ranks.iter().enumerate() {
        let rate = if r <= 1 { 10 } else { 100 };
        peers.start(rank, &rigs, &peer(rank, &ranks[(r + 1) % 4], RING, rate));
    }
    peers.start(
        loader,
        &rigs,
        &format!(
            "peer --from {} --to {}:{STORE} --rate 100 --size {PAYLOAD} --seconds {SECONDS} --delay 1",
            loader.ip, store.ip
        ),
    );
    peers.start(
        store,
        &rigs,
        &format!(
            "peer --listen {}:{STORE} --seconds {SECONDS} --delay 1",
            store.ip
        ),
    );
    let sending = began + jiff::SignedDuration::from_secs(1);

    // Node b's flows in a steady window: rank 2 to 3 (both ends), 3 to 0, 1 to 2 (its end),
    // the loader's. Its baseline learns from the windows after that one.
    steady_window(&client, &nodes.names[1], sending, 5).await;
    let baselines: Api<GryviaNetworkBaseline> = Api::all(client.clone());
    let b = nodes.names[1].clone();
    baselines
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaNetworkBaseline",
                "metadata": {"name": b},
                "spec": {"nodeName": b, "sensitivitySigma": 3.0, "minSamples": 3}
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // The straggler: rank 1 moves 20 datagrams a second against the median rank's 110.
    let insight = insight_after(&client, n, sending).await;
    let stragglers: Vec<(i32, &str)> = insight
        .workers
        .iter()
        .filter(|w| w.straggler)
        .map(|w| (w.rank, w.node.as_str()))
        .collect();
    assert_eq!(stragglers, [(1, nodes.names[0].as_str())], "{insight:#?}");
    assert_eq!(insight.straggler_count, 1);
    let ring: Vec<(i32, i32)> = insight.matrix.iter().map(|p| (p.from, p.to)).collect();
    for pair in [(0, 1), (1, 2), (2, 3), (3, 0)] {
        assert!(ring.contains(&pair), "{pair:?} in {ring:?}");
    }
    assert!(
        insight.recommendations[0].starts_with(&format!(
            "rank 1 ({n}/train-1) on node {} moves",
            nodes.names[0]
        )),
        "{:?}",
        insight.recommendations
    );

    // The baseline is warm at 5 connections; right after one of node b's windows ends, the
    // burst: 100 more flows in the next.
    let warm = wait_for("the baseline warm", Duration::from_secs(60), || async {
        let s = baselines.get(&b).await.ok()?.status?;
        (s.metrics.get("connections")?.samples >= 4).then_some(s)
    })
    .await
    .unwrap();
    assert_eq!(warm.metrics["connections"].mean, 5.0);
    assert!(floods(&client, &b).await.is_empty());
    let last = window_end(&client, &b).await.unwrap();
    wait_for("node b's next window", Duration::from_secs(30), || async {
        window_end(&client, &b).await.filter(|t| *t > last)
    })
    .await
    .unwrap();
    let burst = traffic(
        loader,
        &rigs,
        &format!(
            "udp --from {} --to {}:{STORE} --count 100 --size {PAYLOAD} --new-socket-each",
            loader.ip, store.ip
        ),
    );
    assert_eq!(burst["refused"], 0);
    let raised = wait_for("the connection flood", Duration::from_secs(60), || async {
        let f = floods(&client, &b).await;
        (!f.is_empty()).then_some(f)
    })
    .await
    .unwrap();
    assert_eq!(raised.len(), 1, "{raised:#?}");
    let flood = &raised[0].spec;
    assert_eq!(
        (
            flood.metric.as_str(),
            flood.baseline,
            flood.observed,
            flood.severity
        ),
        ("connections", 5.0, 105.0, Severity::Critical)
    );
    wait_for("the flood resolved", Duration::from_secs(60), || async {
        let f = floods(&client, &b).await;
        (f.len() == 1 && f[0].status.as_ref()?.resolved_at.is_some()).then_some(())
    })
    .await
    .unwrap();

    // The deny policy: every datagram to port 9001 refused and counted on node b.
    let denied = traffic(
        loader,
        &rigs,
        &format!(
            "udp --from {} --to {}:{DENIED} --count 50 --size {PAYLOAD}",
            loader.ip, store.ip
        ),
    );
    assert_eq!(denied["refused"], 50);
    let policies: Api<GryviaFlowPolicy> = Api::namespaced(client.clone(), n);
    let deny = wait_for("the drops counted", Duration::from_secs(60), || async {
        let s = policies.get("loader-not-9001").await.ok()?.status?;
        (s.drops > 0).then_some(s)
    })
    .await
    .unwrap();
    assert_eq!(deny.drops, 50);
    assert_eq!(deny.drops_by_node.get(&b), Some(&50));

    // What every peer sent arrived: the other traffic of the same pods untouched.
    let done = peers.finish();
    let sent = |pod: &str| i64::try_from(done[pod]["sent"].as_u64().unwrap()).unwrap();
    let received = |pod: &str| i64::try_from(done[pod]["received"].as_u64().unwrap()).unwrap();
    for r in 0..4 {
        let from = format!("train-{}", (r + 3) % 4);
        assert_eq!(received(&format!("train-{r}")), sent(&from), "rank {r}");
    }
    assert_eq!(received("store-0"), sent("loader-0") + 100);
    assert_eq!(
        ["train-0", "train-1", "train-2", "train-3", "loader-0"].map(sent),
        [240, 240, 2_400, 2_400, 2_400]
    );

    // The graph: each edge with the bytes its clients sent, exactly.
    let ring_bytes = WIRE * (0..4).map(|r| sent(&format!("train-{r}"))).sum::<i64>();
    let store_bytes = WIRE * (sent("loader-0") + 100);
    let graphs: Api<GryviaServiceGraph> = Api::namespaced(client.clone(), n);
    let expected = vec![
        (
            format!("{n}/loader"),
            format!("{n}/store-0"),
            i32::from(STORE),
            store_bytes,
        ),
        (
            format!("{n}/train"),
            format!("{n}/train"),
            i32::from(RING),
            ring_bytes,
        ),
    ];
    let edges = wait_for(
        "the graph's exact bytes",
        Duration::from_secs(60),
        || async {
            let s = graphs.get("ml").await.ok()?.status?;
            let e: Vec<_> = s
                .edges
                .iter()
                .map(|e| (e.from.clone(), e.to.clone(), e.port, e.bytes))
                .collect();
            (e == expected).then_some(e)
        },
    )
    .await;
    assert!(
        edges.is_ok(),
        "the graph: {:#?}",
        graphs.get("ml").await.unwrap().status
    );

    // The cost: the bytes between the zones (rank 1 to 2, rank 3 to 0, the loader to the
    // store), each job paying for its pods' ends.
    let cross_ring = WIRE * (sent("train-1") + sent("train-3"));
    let costs: Api<GryviaNetworkCost> = Api::all(client.clone());
    let cost_name = format!("{n}-job");
    let (lo, hi) = if za < zb { (&za, &zb) } else { (&zb, &za) };
    let pair = ZonePairBytes {
        from: lo.clone(),
        to: hi.clone(),
        bytes: cross_ring + store_bytes,
    };
    let cost = wait_for(
        "the cost's exact bytes",
        Duration::from_secs(60),
        || async {
            let s = costs.get(&cost_name).await.ok()?.status?;
            s.zone_pairs.contains(&pair).then_some(s)
        },
    )
    .await;
    let cost = match cost {
        Ok(c) => c,
        Err(e) => panic!("{e}: {:#?}", costs.get(&cost_name).await.unwrap().status),
    };
    // The store has no job: its end of the bytes is unattributed. (The cost is the cluster's:
    // a window other tests left behind may add egress of their pods to `unattributed`.)
    let cross: Vec<(String, i64, i64)> = cost
        .entries
        .iter()
        .map(|e| (e.name.clone(), e.cross_zone_bytes, e.egress_bytes))
        .collect();
    assert_eq!(
        cross[..2],
        [
            (format!("{n}/loader"), store_bytes, 0),
            (format!("{n}/train"), 2 * cross_ring, 0),
        ]
    );
    assert_eq!(
        (cross.len(), cross[2].0.as_str(), cross[2].1),
        (3, "unattributed", store_bytes)
    );

    // The auto policy: the two flows it learned (the denied one never passed), a suggestion
    // per workload, every learned flow replayed as allowed.
    let autos: Api<GryviaAutoPolicy> = Api::namespaced(client.clone(), n);
    let learned = wait_for(
        "the auto policy ready",
        Duration::from_secs(120),
        || async {
            let s = autos.get("learn").await.ok()?.status?;
            (s.phase.as_deref() == Some("Ready")).then_some(s)
        },
    )
    .await
    .unwrap();
    let flows: Vec<(Option<&str>, Option<&str>, i32, Protocol)> = learned
        .flows
        .iter()
        .map(|f| {
            (
                f.from.workload.as_deref(),
                f.to.workload.as_deref(),
                f.port,
                f.protocol,
            )
        })
        .collect();
    assert_eq!(
        flows,
        [
            (
                Some("loader"),
                Some("store-0"),
                i32::from(STORE),
                Protocol::UDP
            ),
            (Some("train"), Some("train"), i32::from(RING), Protocol::UDP),
        ],
        "{learned:#?}"
    );
    let ready = conditions::find(&learned.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Learned"),
        "{}",
        ready.message
    );
    let mut names: Vec<&str> = learned
        .suggestions
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["learn-loader", "learn-store-0", "learn-train"]);

    drop(collectors);
    drop(rigs);
    for name in &nodes.names {
        common::delete_node_objects(&client, name).await;
    }
    let _ = baselines.delete(&b, &DeleteParams::background()).await;
}
