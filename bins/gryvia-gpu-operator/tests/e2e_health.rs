//! End-to-end: the gpu-operator binary against a real control plane (testenv/), with node
//! agents replaying traces for KWOK GPU nodes the tests create.
//!
//! The agents run in the test process (the same `gryvia_client::gpu_agent::Agent` the
//! `gryvia-node-agent` binary runs, with the dry-run executor recording commands to a file);
//! the operator runs as its own process. Tests here run one at a time (a static lock).

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use gryvia_client::gpu_agent::{Agent, AgentConfig, DryRunExecutor, TraceSource};
use gryvia_testsupport::{
    KwokNodes, ServiceAccountAccess, TestNamespace, bind_pod, create_pdb, pod_gone, wait_for,
    wait_object,
};
use gryvia_types::{GryviaHealthCheck, NodeHealthResult, StepPhase, Verdict, labels};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static PORT: AtomicU16 = AtomicU16::new(18280);

fn log_dir() -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/e2e-logs");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The operator process, killed when dropped.
struct Operator(Child);

impl Operator {
    /// Starts the operator authenticated as `kubeconfig` (the service account of
    /// `deploy/gpu-health/rbac.yaml`).
    fn start(kubeconfig: &std::path::Path, lease_namespace: &str, name: &str) -> Operator {
        let port = PORT.fetch_add(1, Ordering::SeqCst);
        let log =
            std::fs::File::create(log_dir().join(format!("gpu-operator-{name}.log"))).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gryvia-gpu-operator"))
            .args(["--gpu-health", "--gpu-remediation"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--lease-namespace", lease_namespace, "--identity", name])
            .args(["--lease-duration", "4", "--lease-grace", "1"])
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Operator(child)
    }
}

impl Operator {
    /// SIGKILL: no chance to clean up, like a crashed pod.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Node agents in this process, stopped when dropped.
struct Agents(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Agents {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

fn write_trace(test: &str, node: &str, yaml: &str) -> PathBuf {
    let path = log_dir().join(format!("trace-{test}-{node}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Starts an agent per `(node, trace)`, reporting every second, with a dry-run executor that
/// appends to `log` and takes a second per step.
fn start_agents(
    client: &kube::Client,
    traces: &[(String, PathBuf)],
    log: &std::path::Path,
) -> Agents {
    start_agents_every(client, traces, log, Duration::from_secs(1))
}

/// As [`start_agents`], each agent reporting every `every`.
fn start_agents_every(
    client: &kube::Client,
    traces: &[(String, PathBuf)],
    log: &std::path::Path,
    every: Duration,
) -> Agents {
    let mut handles = Vec::new();
    for (node, trace) in traces {
        let source = TraceSource::open(trace, node).unwrap();
        let executor = Arc::new(DryRunExecutor {
            log: Some(log.to_owned()),
            duration: Duration::from_secs(1),
        });
        let agent = Agent::new(
            client.clone(),
            AgentConfig::new(node, every),
            Box::new(source),
            executor,
        );
        handles.push(tokio::spawn(async move {
            agent.run(std::future::pending()).await.unwrap();
        }));
    }
    Agents(handles)
}

const HEALTHY: &str = "gpuCount: 4\nframes:\n  - gpus: []\n";
const ECC_THEN_RECOVER_AFTER_RESET: &str = r"
gpuCount: 4
frames:
  - gpus:
      - {index: 2, eccDoubleBit: 4, xidEvents: [{code: 48}]}
afterRemediation:
  gpu-reset:
    - gpus: []
";
const ECC_FOREVER: &str = r"
gpuCount: 4
frames:
  - gpus:
      - {index: 1, eccDoubleBit: 2}
";

/// A test's cluster access: an admin client for the test's own objects, and the gpu-operator
/// and node agents running under the service accounts and ClusterRoles of
/// `deploy/gpu-health/rbac.yaml` (so a missing RBAC rule fails the test).
struct Setup {
    client: kube::Client,
    agent_client: kube::Client,
    // Fields drop in declaration order: the operator goes before its access and the lock.
    operator: Operator,
    operator_access: ServiceAccountAccess,
    _agent_access: ServiceAccountAccess,
    ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    async fn new(name: &str) -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let ns = TestNamespace::create(&client, "health").await.unwrap();
        let rbac = "deploy/gpu-health/rbac.yaml";
        let operator_access = ServiceAccountAccess::create(
            &client,
            rbac,
            "gryvia-gpu-operator",
            &ns.name,
            "gpu-operator",
        )
        .await
        .unwrap();
        let agent_access = ServiceAccountAccess::create(
            &client,
            rbac,
            "gryvia-node-agent",
            &ns.name,
            "node-agent",
        )
        .await
        .unwrap();
        let agent_client = agent_access.client().await.unwrap();
        let operator = Operator::start(&operator_access.kubeconfig, &ns.name, name);
        Some(Setup {
            client,
            agent_client,
            operator,
            operator_access,
            _agent_access: agent_access,
            ns,
            _serial: serial,
        })
    }
}

async fn create_check(
    client: &kube::Client,
    name: &str,
    nodes: &KwokNodes,
    spec: serde_json::Value,
) -> Api<GryviaHealthCheck> {
    let api: Api<GryviaHealthCheck> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
    let mut spec = spec;
    spec["target"] = json!({"type": "selector", "nodeSelector": {gryvia_testsupport::NODE_GROUP_LABEL: nodes.group}});
    let hc: GryviaHealthCheck = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaHealthCheck",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &hc).await.unwrap();
    api
}

async fn result(api: &Api<GryviaHealthCheck>, check: &str, node: &str) -> Option<NodeHealthResult> {
    api.get(check)
        .await
        .ok()?
        .status?
        .nodes
        .into_iter()
        .find(|r| r.node == node)
}

fn quarantine_of(n: &Node) -> (bool, Option<String>) {
    let spec = n.spec.clone().unwrap_or_default();
    (
        spec.unschedulable.unwrap_or(false),
        spec.taints
            .unwrap_or_default()
            .into_iter()
            .find(|t| t.key == labels::GPU_UNHEALTHY_TAINT)
            .and_then(|t| t.value),
    )
}

async fn node_state(client: &kube::Client, node: &str) -> (bool, Option<String>) {
    quarantine_of(&Api::<Node>::all(client.clone()).get(node).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn ecc_errors_quarantine_and_drain_the_node_a_pdb_blocks_and_a_reset_brings_it_back() {
    let Some(s) = Setup::new("recover").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "ghc-rec", 2, 4).await.unwrap();
    let (bad, good) = (nodes.names[0].clone(), nodes.names[1].clone());
    let ns = s.ns.name.clone();
    bind_pod(&s.client, &ns, "train", &bad, "train")
        .await
        .unwrap();
    bind_pod(&s.client, &ns, "serve", &bad, "serve")
        .await
        .unwrap();
    bind_pod(&s.client, &ns, "bystander", &good, "bystander")
        .await
        .unwrap();
    create_pdb(&s.client, &ns, "serve-pdb", "serve")
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &ns);
    let log = log_dir().join("dry-run-recover.log");
    let _ = std::fs::remove_file(&log);
    let _agents = start_agents(
        &s.agent_client,
        &[
            (
                bad.clone(),
                write_trace("recover", &bad, ECC_THEN_RECOVER_AFTER_RESET),
            ),
            (good.clone(), write_trace("recover", &good, HEALTHY)),
        ],
        &log,
    );
    let check = format!("e2e-{}", nodes.group);
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "*/2 * * * * *",
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}},
                       {"name": "xid", "type": "gpu-xid"}],
            "onFailure": {"cordon": true, "drain": true, "alert": true, "autoRemediate": true, "consecutiveFailures": 2},
            "remediation": {"steps": ["gpu-reset"], "stepTimeoutSeconds": 30},
            "maxQuarantinedPercent": 50
        }),
    )
    .await;

    // Quarantined: cordoned and tainted with the check's name; the healthy node untouched.
    // The operator taints the node before it writes the run's status, so the wait is for both:
    // a status read between the two still holds the run before.
    let (c, b, a, name) = (s.client.clone(), bad.clone(), api.clone(), check.clone());
    let r = wait_for(
        "the bad node to be quarantined",
        Duration::from_secs(60),
        || {
            let (c, b, a, name) = (c.clone(), b.clone(), a.clone(), name.clone());
            async move {
                let r = result(&a, &name, &b).await.filter(|r| r.quarantined)?;
                node_state(&c, &b).await.1.is_some().then_some(r)
            }
        },
    )
    .await
    .unwrap();
    let (cordoned, by) = node_state(&s.client, &bad).await;
    assert!(cordoned);
    assert_eq!(by.as_deref(), Some(check.as_str()));
    assert_eq!(node_state(&s.client, &good).await, (false, None));
    assert_eq!(r.verdict, Verdict::Failed);
    assert!(
        r.consecutive_failures >= 2,
        "acted only after two failing runs: {r:?}"
    );
    assert!(
        r.reasons
            .iter()
            .any(|l| l.contains("gpu 2: ecc: uncorrected ECC errors 4 above max 0")),
        "{:?}",
        r.reasons
    );
    assert!(
        r.reasons.iter().any(|l| l.contains("XID 48")),
        "{:?}",
        r.reasons
    );

    // Drained through the Eviction API: train goes, serve stays (its PDB allows no disruption)
    // and the block is reported in the status and as an Event.
    let (c, n) = (s.client.clone(), ns.clone());
    wait_for("train to be evicted", Duration::from_secs(30), || {
        let (c, n) = (c.clone(), n.clone());
        async move { pod_gone(&c, &n, "train").await.unwrap().then_some(()) }
    })
    .await
    .unwrap();
    let (a, ch, b) = (api.clone(), check.clone(), bad.clone());
    let blocked = wait_for(
        "the blocked eviction to be reported",
        Duration::from_secs(30),
        || {
            let (a, ch, b) = (a.clone(), ch.clone(), b.clone());
            async move {
                let d = result(&a, &ch, &b).await?.drain?;
                (!d.blocked.is_empty()).then_some(d.blocked)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(blocked, vec![format!("{ns}/serve (pdb serve-pdb)")]);
    assert!(
        !pod_gone(&s.client, &ns, "serve").await.unwrap(),
        "a PDB-protected pod is never deleted"
    );
    assert!(!pod_gone(&s.client, &ns, "bystander").await.unwrap());
    let events = Api::<Event>::all(s.client.clone())
        .list(&ListParams::default().fields(&format!("regarding.name={check}")))
        .await
        .unwrap();
    let reasons: Vec<String> = events
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    for reason in ["GpuUnhealthy", "Quarantine", "EvictionBlocked"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event in {reasons:?}"
        );
    }
    // No remediation while a pod is still on the node.
    assert!(
        result(&api, &check, &bad)
            .await
            .unwrap()
            .remediation
            .is_none()
    );

    // The budget goes: serve is evicted, the drain completes, the GPU reset runs (dry run),
    // the trace recovers, and a passing check releases the node.
    pdbs.delete("serve-pdb", &DeleteParams::default())
        .await
        .unwrap();
    let (c, b) = (s.client.clone(), bad.clone());
    wait_for("the node to be released", Duration::from_secs(90), || {
        let (c, b) = (c.clone(), b.clone());
        async move { (node_state(&c, &b).await == (false, None)).then_some(()) }
    })
    .await
    .unwrap();
    assert!(pod_gone(&s.client, &ns, "serve").await.unwrap());
    // The executor changes the node before it writes the status: wait for the record too.
    let (a, ch) = (api.clone(), check.clone());
    let status = wait_for("the Recovered record", Duration::from_secs(20), || {
        let (a, ch) = (a.clone(), ch.clone());
        async move {
            let st = a.get(&ch).await.ok()?.status?;
            st.actions
                .iter()
                .any(|x| x.action == "Recovered")
                .then_some(st)
        }
    })
    .await
    .unwrap();
    let actions: Vec<&str> = status
        .actions
        .iter()
        .filter(|a| a.node == bad)
        .map(|a| a.action.as_str())
        .collect();
    let expected = [
        "Quarantine",
        "Evict",
        "EvictionBlocked",
        "Evict",
        "Drained",
        "GpuReset",
        "GpuResetSucceeded",
        "Recovered",
    ];
    assert_eq!(actions, expected, "{:#?}", status.actions);
    let log = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].ends_with(&format!("{bad} gpu-reset nvidia-smi --gpu-reset -i 2")),
        "{log}"
    );
    assert!(!status.nodes.iter().any(|r| r.quarantined));
}

/// One report for `node` from the first frame of `trace`, made by the node agent itself
/// (`once`), under the agent's access.
async fn report(client: &kube::Client, node: &str, trace: &str) {
    let path = write_trace("event", node, trace);
    let source = TraceSource::open(&path, node).unwrap();
    let agent = Agent::new(
        client.clone(),
        AgentConfig {
            once: true,
            ..AgentConfig::new(node, Duration::from_secs(1))
        },
        Box::new(source),
        Arc::new(DryRunExecutor {
            log: None,
            duration: Duration::ZERO,
        }),
    );
    agent.run(std::future::pending()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_reading_quarantines_at_once_between_runs_and_the_status_lists_only_unhealthy_nodes()
 {
    let Some(s) = Setup::new("event").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "ghc-evt", 3, 4).await.unwrap();
    let (fatal, hot) = (nodes.names[0].clone(), nodes.names[1].clone());
    for n in &nodes.names {
        report(&s.agent_client, n, HEALTHY).await;
    }
    let check = format!("e2e-{}", nodes.group);
    // Once a year: after the first run (the spec is new) no scheduled run comes in this test.
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "0 0 1 1 *",
            "checks": [
                {"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}},
                {"name": "xid", "type": "gpu-xid", "threshold": {"max": 0}},
                {"name": "hot", "type": "gpu-temperature", "threshold": {"max": 90}}
            ],
            "onFailure": {"cordon": true, "consecutiveFailures": 1},
            "maxQuarantinedPercent": 100
        }),
    )
    .await;
    let first = wait_object(
        &api,
        &check,
        "its first run",
        Duration::from_secs(30),
        |hc| hc.status.as_ref().is_some_and(|st| st.summary.healthy == 3),
    )
    .await
    .status
    .unwrap();
    assert!(
        first.nodes.is_empty(),
        "healthy nodes are only counted: {:?}",
        first.nodes
    );
    // Too hot: a failure, but not a fatal reading; it waits for the next run.
    report(
        &s.agent_client,
        &hot,
        "gpuCount: 4\nframes:\n  - gpus: [{index: 1, temperatureC: 95}]\n",
    )
    .await;
    // XID 79 (fallen off the bus): evaluated at once, between runs.
    report(
        &s.agent_client,
        &fatal,
        "gpuCount: 4\nframes:\n  - gpus: [{index: 0, xidEvents: [{code: 79}]}]\n",
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while node_state(&s.client, &fatal).await != (true, Some(check.clone())) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not quarantined within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = wait_object(
        &api,
        &check,
        "the quarantine recorded",
        Duration::from_secs(20),
        |hc| {
            hc.status
                .as_ref()
                .is_some_and(|st| st.summary.quarantined == 1)
        },
    )
    .await
    .status
    .unwrap();
    assert_eq!(st.last_run, first.last_run, "no scheduled run came");
    assert_eq!(
        st.nodes.iter().map(|r| r.node.as_str()).collect::<Vec<_>>(),
        vec![fatal.as_str()],
        "only the evaluated failing node is listed"
    );
    let r = &st.nodes[0];
    assert!(r.quarantined && r.consecutive_failures == 1 && r.last_observation.is_some());
    assert!(
        r.reasons.iter().any(|x| x.contains("XID 79")),
        "{:?}",
        r.reasons
    );
    assert_eq!(
        node_state(&s.client, &hot).await,
        (false, None),
        "non-fatal: at the next run"
    );
    assert_eq!((st.summary.failed, st.summary.healthy), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_observations_are_unknown_and_never_trigger_remediation() {
    let Some(s) = Setup::new("stale").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "ghc-stale", 1, 4)
        .await
        .unwrap();
    let node = nodes.names[0].clone();
    // A frozen reading: failing values, observed ten minutes ago.
    let trace = "gpuCount: 4\nframes:\n  - observedAgeSeconds: 600\n    gpus: [{index: 0, eccDoubleBit: 9}]\n";
    let log = log_dir().join("dry-run-stale.log");
    let _ = std::fs::remove_file(&log);
    let _agents = start_agents(
        &s.agent_client,
        &[(node.clone(), write_trace("stale", &node, trace))],
        &log,
    );
    let check = format!("e2e-{}", nodes.group);
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "* * * * * *",
            "staleAfterSeconds": 300,
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}],
            "onFailure": {"cordon": true, "drain": true, "autoRemediate": true, "consecutiveFailures": 1},
            "remediation": {},
            "maxQuarantinedPercent": 100
        }),
    )
    .await;
    // Several runs pass with the node Unknown.
    stays_unknown_and_untouched(&s, &api, &check, &node, &log).await;
    let r = result(&api, &check, &node).await.unwrap();
    assert_eq!(r.verdict, Verdict::Unknown);
    assert!(
        r.reasons[0].contains("staleAfterSeconds 300"),
        "{:?}",
        r.reasons
    );
    assert_eq!(r.consecutive_failures, 0);
    assert!(!r.quarantined && r.remediation.is_none());
}

/// Five runs of `check` in which `node`'s stale reading makes it Unknown, never a failure
/// counted, never quarantined or remediated; then the node is uncordoned and untainted, no
/// step was requested of its agent, and no remediation command ran (`log` absent).
async fn stays_unknown_and_untouched(
    s: &Setup,
    api: &Api<GryviaHealthCheck>,
    check: &str,
    node: &str,
    log: &std::path::Path,
) {
    let mut runs = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while runs.len() < 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than five runs in 40s"
        );
        if let Some(st) = api.get(check).await.unwrap().status
            && let Some(r) = st.nodes.iter().find(|r| r.node == node)
        {
            assert_eq!(r.verdict, Verdict::Unknown, "{r:?}");
            assert_eq!(r.consecutive_failures, 0);
            assert!(!r.quarantined && r.remediation.is_none(), "{r:?}");
            if r.reasons.iter().any(|x| x.contains("observation is")) {
                runs.extend(st.last_run.map(|t| t.0));
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(node_state(&s.client, node).await, (false, None));
    let gpu_node = Api::<gryvia_types::GryviaGpuNode>::all(s.client.clone())
        .get(node)
        .await
        .unwrap();
    assert!(
        gpu_node.spec.remediation_request.is_none(),
        "no step requested"
    );
    assert!(!log.exists(), "no remediation command ran");
}

/// A fault of issue #25: the node agent stops (killed: its task aborted mid-report). Its last
/// reading ages past `staleAfterSeconds`; the node is Unknown and nothing is done to it, run
/// after run, with every remediation switched on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_agent_leaves_its_node_unknown_and_never_remediated() {
    let Some(s) = Setup::new("agent-stop").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "ghc-stop", 1, 4)
        .await
        .unwrap();
    let node = nodes.names[0].clone();
    let log = log_dir().join("dry-run-agent-stop.log");
    let _ = std::fs::remove_file(&log);
    let agents = start_agents(
        &s.agent_client,
        &[(node.clone(), write_trace("agent-stop", &node, HEALTHY))],
        &log,
    );
    let check = format!("e2e-{}", nodes.group);
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "* * * * * *",
            "staleAfterSeconds": 10,
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}],
            "onFailure": {"cordon": true, "drain": true, "autoRemediate": true, "consecutiveFailures": 1},
            "remediation": {},
            "maxQuarantinedPercent": 100
        }),
    )
    .await;
    wait_for(
        "the node healthy while its agent reports",
        Duration::from_secs(60),
        // (The status lists unhealthy and unknown nodes; healthy ones are counted.)
        || async {
            api.get(&check)
                .await
                .ok()?
                .status
                .filter(|st| st.summary.healthy == 1 && st.nodes.is_empty())
        },
    )
    .await
    .unwrap();
    drop(agents);
    let stopped = tokio::time::Instant::now();
    let r = wait_for(
        "the node Unknown once its reading is stale",
        Duration::from_secs(60),
        || async {
            result(&api, &check, &node)
                .await
                .filter(|r| r.verdict == Verdict::Unknown)
        },
    )
    .await
    .unwrap();
    assert!(
        stopped.elapsed() >= Duration::from_secs(5),
        "not before the reading aged"
    );
    assert!(
        r.reasons[0].contains("staleAfterSeconds 10"),
        "{:?}",
        r.reasons
    );
    // Several more runs: still Unknown, never a failure counted, the node untouched.
    stays_unknown_and_untouched(&s, &api, &check, &node, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn the_ladder_goes_reset_reload_reboot_in_order_one_node_at_a_time() {
    let Some(s) = Setup::new("ladder").await else {
        return;
    };
    let nodes = KwokNodes::create(&s.client, "ghc-lad", 3, 4).await.unwrap();
    let log = log_dir().join("dry-run-ladder.log");
    let _ = std::fs::remove_file(&log);
    let traces: Vec<(String, PathBuf)> = nodes
        .names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            (
                n.clone(),
                write_trace("ladder", n, if i < 2 { ECC_FOREVER } else { HEALTHY }),
            )
        })
        .collect();
    let _agents = start_agents(&s.agent_client, &traces, &log);
    let check = format!("e2e-{}", nodes.group);
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "*/2 * * * * *",
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}],
            "onFailure": {"cordon": true, "autoRemediate": true, "consecutiveFailures": 1},
            "remediation": {"stepTimeoutSeconds": 20, "maxConcurrentNodes": 1, "rebootMethod": "kured"},
            "maxQuarantinedPercent": 100
        }),
    )
    .await;
    // The operator is killed once the first node's reset is under way; a new one carries on
    // from the taints and the status (no step is repeated or skipped: checked below).
    let (a, ch) = (api.clone(), check.clone());
    wait_for("the first GPU reset", Duration::from_secs(60), || {
        let (a, ch) = (a.clone(), ch.clone());
        async move {
            let st = a.get(&ch).await.ok()?.status?;
            st.actions
                .iter()
                .any(|x| x.action == "GpuReset")
                .then_some(())
        }
    })
    .await
    .unwrap();
    let mut s = s;
    s.operator.kill();
    s.operator = Operator::start(
        &s.operator_access.kubeconfig,
        &s.ns.name,
        "ladder-restarted",
    );
    let (a, ch) = (api.clone(), check.clone());
    let bad = [nodes.names[0].clone(), nodes.names[1].clone()];
    let b = bad.clone();
    wait_for(
        "both failing nodes to exhaust the ladder",
        Duration::from_secs(150),
        || {
            let (a, ch, b) = (a.clone(), ch.clone(), b.clone());
            async move {
                let st = a.get(&ch).await.ok()?.status?;
                b.iter()
                    .all(|n| {
                        st.nodes.iter().any(|r| {
                            &r.node == n
                                && r.remediation
                                    .as_ref()
                                    .is_some_and(|m| m.phase == StepPhase::Failed)
                        })
                    })
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
    // Both stay quarantined for a human; the healthy node was never touched.
    for n in &bad {
        assert_eq!(node_state(&s.client, n).await, (true, Some(check.clone())));
    }
    assert_eq!(node_state(&s.client, &nodes.names[2]).await, (false, None));

    // The recorded commands: per node, reset, reload, reboot in that order; the second node's
    // first step starts after the first node's last step finished.
    let text = std::fs::read_to_string(&log).unwrap();
    let mut steps: Vec<(jiff::Timestamp, jiff::Timestamp, String, String)> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(5, ' ').collect();
        let step = (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].to_owned(),
            f[3].to_owned(),
        );
        if !steps.contains(&step) {
            steps.push(step);
        }
    }
    assert_eq!(steps.len(), 6, "{text}");
    let first = steps[0].2.clone();
    let order: Vec<(String, String)> = steps.iter().map(|s| (s.2.clone(), s.3.clone())).collect();
    let second = bad.iter().find(|n| **n != first).unwrap().clone();
    let expect =
        |n: &str| ["gpu-reset", "driver-reload", "reboot"].map(|a| (n.to_owned(), a.to_owned()));
    let mut expected: Vec<(String, String)> = expect(&first).to_vec();
    expected.extend(expect(&second));
    assert_eq!(order, expected, "{text}");
    assert!(steps[3].0 >= steps[2].1, "one node at a time: {text}");
    assert!(text.contains("touch /var/run/reboot-required"), "{text}");
    assert!(
        text.contains("modprobe -r nvidia_uvm nvidia_drm nvidia_modeset nvidia"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{first} gpu-reset nvidia-smi --gpu-reset -i 1")),
        "{text}"
    );
    let st = api.get(&check).await.unwrap().status.unwrap();
    let exhausted = st
        .actions
        .iter()
        .filter(|a| a.action == "RemediationExhausted")
        .count();
    assert_eq!(exhausted, 2, "{:#?}", st.actions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_manifests_are_accepted_by_the_api_server() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let kinds = gryvia_testsupport::dry_run_manifests(
        &client,
        &[
            "deploy/gpu-health/rbac.yaml",
            "deploy/gpu-health/gpu-operator.yaml",
            "deploy/gpu-health/node-agent.yaml",
        ],
    )
    .await
    .unwrap();
    assert_eq!(kinds.iter().filter(|k| *k == "ClusterRole").count(), 2);
    assert!(kinds.contains(&"Deployment".to_owned()) && kinds.contains(&"DaemonSet".to_owned()));
}

/// How many evictions of each pod of namespace `ns` the API server granted (answered 201), as
/// testenv's audit log records them.
fn evictions_granted(ns: &str) -> std::collections::BTreeMap<String, usize> {
    gryvia_testsupport::audit_count("create", "pods/eviction", Some(ns), 201).unwrap()
}

/// A fault of issue #25 at fleet scale: 100 GPU nodes fail at once, a pod on each; the
/// gpu-operator (two replicas under leader election) quarantines and drains them, and its
/// leader is SIGKILLed mid-storm. The standby finishes: every node cordoned and tainted, every
/// pod evicted, and each eviction granted exactly once (counted in the API server's audit log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_storm_of_100_failing_nodes_survives_a_leader_kill_and_evicts_each_pod_once() {
    const NODES: usize = 100;
    let Some(mut s) = Setup::new("hstorm").await else {
        return;
    };
    // A standby beside the replica Setup started (identity "hstorm"), sharing its Lease.
    let mut standby = Operator::start(&s.operator_access.kubeconfig, &s.ns.name, "hstorm-standby");
    let nodes = KwokNodes::create(&s.client, "hstorm", NODES, 4)
        .await
        .unwrap();
    let pods: Vec<String> = (0..NODES).map(|i| format!("w-{i:03}")).collect();
    for (pod, node) in pods.iter().zip(&nodes.names) {
        bind_pod(&s.client, &s.ns.name, pod, node, "hstorm")
            .await
            .unwrap();
    }
    let log = log_dir().join("dry-run-hstorm.log");
    let _ = std::fs::remove_file(&log);
    let traces: Vec<(String, PathBuf)> = nodes
        .names
        .iter()
        .map(|n| (n.clone(), write_trace("hstorm", n, ECC_FOREVER)))
        .collect();
    let _agents = start_agents_every(&s.agent_client, &traces, &log, Duration::from_secs(5));
    let check = format!("e2e-{}", nodes.group);
    let api = create_check(
        &s.client,
        &check,
        &nodes,
        json!({
            "schedule": "*/2 * * * * *",
            "checks": [{"name": "ecc", "type": "gpu-ecc-errors", "threshold": {"max": 0}}],
            "onFailure": {"cordon": true, "drain": true, "consecutiveFailures": 1},
            "remediation": {},
            "maxQuarantinedPercent": 100
        }),
    )
    .await;
    let quarantined = || {
        let (client, check, names) = (s.client.clone(), check.clone(), nodes.names.clone());
        async move {
            let all = Api::<Node>::all(client)
                .list(&ListParams::default())
                .await
                .ok()?;
            Some(
                all.items
                    .iter()
                    .filter(|n| names.iter().any(|x| Some(x) == n.metadata.name.as_ref()))
                    .filter(|n| quarantine_of(n) == (true, Some(check.clone())))
                    .count(),
            )
        }
    };
    // Mid-storm: the leader is SIGKILLed as soon as it quarantines a node.
    wait_for("a node quarantined", Duration::from_secs(120), || async {
        (quarantined().await? >= 1).then_some(())
    })
    .await
    .unwrap();
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(s.client.clone(), &s.ns.name);
    let holder = leases
        .get("gryvia-gpu-operator")
        .await
        .unwrap()
        .spec
        .unwrap()
        .holder_identity
        .unwrap();
    if holder == "hstorm" {
        s.operator.kill();
    } else {
        standby.kill();
    }
    let at_kill = quarantined().await;
    let evicted_at_kill = evictions_granted(&s.ns.name).len();
    // The standby finishes: every node quarantined, every pod evicted.
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(s.client.clone(), &s.ns.name);
    let done = wait_for(
        "every node quarantined and every pod evicted",
        Duration::from_secs(300),
        || async {
            let left = pod_api
                .list(&ListParams::default().labels("app=hstorm"))
                .await
                .ok()?
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            (quarantined().await? == NODES && left == 0).then_some(())
        },
    )
    .await;
    assert!(
        done.is_ok(),
        "{done:?}: {:?} quarantined",
        quarantined().await
    );
    let st = api.get(&check).await.unwrap().status.unwrap();
    assert_eq!(
        st.nodes.iter().filter(|r| r.quarantined).count(),
        NODES,
        "the check records every node quarantined"
    );
    // Each pod evicted exactly once.
    let granted = evictions_granted(&s.ns.name);
    let twice: Vec<(&String, &usize)> = granted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "evicted more than once: {twice:?}");
    let evicted: Vec<&String> = granted.keys().collect();
    assert_eq!(
        evicted,
        pods.iter().collect::<Vec<_>>(),
        "every pod evicted"
    );
    println!(
        "health storm: {NODES} failing nodes, leader {holder} SIGKILLed with {} quarantined \
         and {evicted_at_kill} pods evicted: all {NODES} quarantined and drained by the \
         standby, {} evictions granted, one per pod",
        at_kill.unwrap_or(0),
        granted.values().sum::<usize>()
    );
}
