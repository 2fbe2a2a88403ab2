//! End-to-end against a real control plane: the network-operator (the binary, under its RBAC
//! in `deploy/network-operator/rbac.yaml`) turns GryviaFlowPolicies and GryviaAutoPolicies into
//! what enforces them.
//!
//! - `allow` becomes a NetworkPolicy the API server accepts (deleted when the action changes);
//!   `audit` counts the flows of the collectors' windows that its rules would not allow.
//! - An enforcing GryviaAutoPolicy suggests one allow policy per workload from the flows it
//!   learned, replays every learned flow against them, and applies them as GryviaFlowPolicies,
//!   which become NetworkPolicies. The learning period (at least 5 minutes) is not waited out:
//!   the test dates `status.learningSince` back, as if the operator had started learning then.
//! - As root on the real kernel: `deny` is resolved to the pods' addresses, the collector binary
//!   (under `deploy/collector/rbac.yaml`) loads them into its eBPF deny map, datagrams from the
//!   selected pod's address to the denied peer and port are dropped and counted, another port is
//!   untouched, and the drops reach the policy's status through the node's GryviaFabricSignal.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

mod common;

use std::process::Command;
use std::time::Duration;

use gryvia_testsupport::{KwokNodes, Process, ServiceAccountAccess, TestNamespace, wait_for};
use gryvia_types::{
    GryviaAutoPolicy, GryviaFabricSignal, GryviaFlowPolicy, GryviaFlowPolicyStatus, conditions,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// One test at a time: each runs an operator, and two would both reconcile the other's
/// objects (the auto policy's dated `learningSince` could be overwritten by the other operator's
/// first look at it).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A test namespace `prefix-…` with the operator's and the collector's access in it, one KWOK
/// node, and two pods on it (`trainer-0`, `app: trainer`; `store-0`, `app: store`): the
/// namespace, the accesses, the node and the two pods' addresses.
async fn setup(
    client: &kube::Client,
    prefix: &str,
) -> (
    TestNamespace,
    (ServiceAccountAccess, ServiceAccountAccess),
    KwokNodes,
    String,
    String,
) {
    gryvia_client::crds::install(client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(client, prefix).await.unwrap();
    let access = common::accesses(client, &ns.name, prefix).await;
    let nodes = KwokNodes::create(client, prefix, 1, 1).await.unwrap();
    let node = nodes.names[0].clone();
    let n = ns.name.clone();
    let trainer = common::pod_ip(client, &n, "trainer-0", &node, json!({"app": "trainer"})).await;
    let store = common::pod_ip(client, &n, "store-0", &node, json!({"app": "store"})).await;
    (ns, access, nodes, trainer, store)
}

/// A GryviaFlowPolicy `name` in `ns` for the trainer's pods, with `action` and one egress rule
/// to the store's pods on `ports` (every port when empty).
async fn trainer_policy(
    client: &kube::Client,
    ns: &str,
    name: &str,
    action: &str,
    ports: serde_json::Value,
) {
    let api: Api<GryviaFlowPolicy> = Api::namespaced(client.clone(), ns);
    let body = json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaFlowPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {"app": "trainer"}, "action": action,
                 "egress": [{"podSelector": {"app": "store"}, "ports": ports}]}
    });
    api.create(
        &PostParams::default(),
        &serde_json::from_value(body).unwrap(),
    )
    .await
    .unwrap();
}

async fn policy_status(
    api: &Api<GryviaFlowPolicy>,
    name: &str,
    what: &str,
    check: impl Fn(&GryviaFlowPolicyStatus) -> bool,
) -> GryviaFlowPolicyStatus {
    wait_for(what, Duration::from_secs(60), || async {
        let s = api.get(name).await.ok()?.status?;
        check(&s).then_some(s)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn allow_applies_a_network_policy_audit_counts_and_an_auto_policy_enforces_what_it_learned() {
    let _serial = SERIAL.lock().await;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let (ns, (operator_access, _), nodes, trainer, store) = setup(&client, "flowpol").await;
    let n = ns.name.as_str();
    let node = nodes.names[0].clone();
    // One window: trainer -> store:9000, trainer -> 203.0.113.9:443 (seen from both ends).
    let now = jiff::Timestamp::now();
    let window = json!([
        common::flow((&trainer, 41000), (&store, 9000), 100, 10, "trainer-0"),
        common::flow((&store, 9000), (&trainer, 41000), 10, 100, "store-0"),
        common::flow((&trainer, 41001), ("203.0.113.9", 443), 50, 5, "trainer-0"),
    ]);
    common::write_window(&client, &node, now, window.clone()).await;

    // An auto policy that learned since six minutes ago (see the module).
    let autos: Api<GryviaAutoPolicy> = Api::namespaced(client.clone(), n);
    common::auto_policy(
        &client,
        n,
        "enforce",
        now - jiff::SignedDuration::from_mins(6),
    )
    .await;

    trainer_policy(
        &client,
        n,
        "trainer-out",
        "allow",
        json!([{"port": 9000, "protocol": "TCP"}]),
    )
    .await;
    trainer_policy(&client, n, "trainer-audit", "audit", json!([])).await;
    let _operator = common::operator(&operator_access, n, "network-operator-flow-policy");
    let policies: Api<GryviaFlowPolicy> = Api::namespaced(client.clone(), n);
    let netpols: Api<NetworkPolicy> = Api::namespaced(client.clone(), n);

    // allow: the NetworkPolicy of the same name, as the API server stored it.
    policy_status(&policies, "trainer-out", "allow applied", |s| {
        s.network_policy.is_some()
    })
    .await;
    let np = netpols.get("trainer-out").await.unwrap();
    let spec = np.spec.unwrap();
    assert_eq!(
        spec.policy_types.unwrap(),
        ["Ingress".to_owned(), "Egress".to_owned()]
    );
    let egress = spec.egress.unwrap();
    assert_eq!(egress.len(), 1);
    let port = &egress[0].ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert!(np.metadata.owner_references.unwrap()[0].controller == Some(true));

    // audit: the window written before it began is not counted; in the node's next window,
    // the flow to the outside address is outside its rules (counted once, from the trainer's
    // record), the one to the store is not.
    let begun = policy_status(&policies, "trainer-audit", "audit begun", |s| {
        s.since.is_some()
    })
    .await;
    assert_eq!(begun.violations, 0);
    let next =
        jiff::Timestamp::now().max(begun.since.unwrap().0) + jiff::SignedDuration::from_secs(1);
    common::write_window(&client, &node, next, window.clone()).await;
    let st = policy_status(&policies, "trainer-audit", "audit counted", |s| {
        s.violations > 0
    })
    .await;
    assert_eq!(st.violations, 1);
    assert_eq!(
        st.recent_violations,
        [format!("{n}/trainer-0 -> 203.0.113.9:443/TCP")]
    );
    assert!(netpols.get_opt("trainer-audit").await.unwrap().is_none());

    // allow turned into audit: its NetworkPolicy goes.
    policies
        .patch(
            "trainer-out",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"action": "audit"}})),
        )
        .await
        .unwrap();
    policy_status(&policies, "trainer-out", "allow no more", |s| {
        s.network_policy.is_none()
    })
    .await;
    wait_for(
        "the NetworkPolicy deleted",
        Duration::from_secs(60),
        || async {
            netpols
                .get_opt("trainer-out")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await
    .unwrap();

    // The auto policy: a suggestion per workload, every learned flow replayed as allowed,
    // each applied as a GryviaFlowPolicy and so as a NetworkPolicy.
    let st = wait_for("the auto policy ready", Duration::from_secs(60), || async {
        let s = autos.get("learn").await.ok()?.status?;
        (s.phase.as_deref() == Some("Ready")).then_some(s)
    })
    .await
    .unwrap();
    let ready = conditions::find(&st.conditions, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Learned")
    );
    assert!(
        ready
            .message
            .contains("all 2 learned flows replay as allowed"),
        "{}",
        ready.message
    );
    let names: Vec<&str> = st.suggestions.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["learn-store-0", "learn-trainer-0"]);
    for name in &names {
        policy_status(&policies, name, "the learned policy applied", |s| {
            s.network_policy.is_some()
        })
        .await;
        netpols.get(name).await.unwrap();
    }
    let learned = policies.get("learn-trainer-0").await.unwrap();
    let cidrs: Vec<&str> = learned
        .spec
        .egress
        .iter()
        .flat_map(|r| r.cidrs.iter().map(String::as_str))
        .collect();
    assert_eq!(cidrs, ["203.0.113.9/32"]);

    // Back to suggest: the applied policies go, the suggestions stay.
    autos
        .patch(
            "learn",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "suggest"}})),
        )
        .await
        .unwrap();
    wait_for(
        "the applied policies deleted",
        Duration::from_secs(60),
        || async {
            policies
                .get_opt("learn-trainer-0")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await
    .unwrap();
    common::delete_node_objects(&client, &node).await;
}

/// A network namespace with both pods' addresses on its loopback, deleted on drop.
struct PodsNetns(String);

impl Drop for PodsNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Datagrams from `from` to `to` inside the namespace: how many the kernel refused.
fn udp(netns: &str, from: &str, to: &str, count: u32) -> u64 {
    let bin = common::sibling("gryvia-traffic");
    let out = Command::new("ip")
        .args(["netns", "exec", netns])
        .arg(bin)
        .args([
            "udp",
            "--from",
            from,
            "--to",
            to,
            "--count",
            &count.to_string(),
            "--size",
            "64",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["refused"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_is_enforced_by_the_collectors_ebpf_program_and_its_drops_are_counted() {
    if !common::root("the deny e2e test") {
        return;
    }
    let _serial = SERIAL.lock().await;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let (ns, (operator_access, collector_access), nodes, trainer, store) =
        setup(&client, "flowdeny").await;
    let n = ns.name.as_str();
    let node = nodes.names[0].clone();
    trainer_policy(
        &client,
        n,
        "no-store-9",
        "deny",
        json!([{"port": 9, "protocol": "UDP"}]),
    )
    .await;
    let _operator = common::operator(&operator_access, n, "network-operator-flow-deny");
    let policies: Api<GryviaFlowPolicy> = Api::namespaced(client.clone(), n);
    let st = policy_status(&policies, "no-store-9", "deny resolved", |s| {
        s.deny.is_some()
    })
    .await;
    let deny = st.deny.unwrap();
    assert_eq!(deny.pods, std::slice::from_ref(&trainer));
    assert_eq!(deny.egress[0].cidrs, [format!("{store}/32")]);

    let port = 19_800 + u16::try_from(std::process::id() % 90).unwrap();
    let addr = format!("127.0.0.1:{port}");
    let collector_bin = common::sibling("gryvia-collector");
    let collector = Process::start(
        collector_bin.to_str().unwrap(),
        &[
            "--node",
            &node,
            "--interval",
            "1",
            "--programs",
            "cgroup-traffic",
            "--metrics-addr",
            &addr,
        ],
        Some(&collector_access.kubeconfig),
        "gryvia-collector-deny",
    )
    .unwrap();
    // The collector reports the policy (0 drops) once its entries are loaded.
    let key = format!("{n}/no-store-9");
    let signals: Api<GryviaFabricSignal> = Api::all(client.clone());
    wait_for(
        "the deny entries loaded",
        Duration::from_secs(60),
        || async {
            let s = signals.get(&node).await.ok()?.status?;
            s.policy_drops.contains_key(&key).then_some(())
        },
    )
    .await
    .unwrap();

    // The two pods' addresses in a namespace of their own; real datagrams between them.
    let netns = PodsNetns(format!("gryvia-deny{}", std::process::id() % 100_000));
    common::sh(&format!(
        "ip netns add {ns} && ip netns exec {ns} ip link set lo up && \
         ip netns exec {ns} ip addr add {trainer}/32 dev lo && \
         ip netns exec {ns} ip addr add {store}/32 dev lo",
        ns = netns.0
    ));
    let count = 40;
    assert_eq!(
        udp(&netns.0, &trainer, &format!("{store}:9"), count),
        u64::from(count)
    );
    assert_eq!(
        udp(&netns.0, &trainer, &format!("{store}:10"), count),
        0,
        "another port"
    );
    assert_eq!(
        udp(&netns.0, &store, &format!("{trainer}:9"), count),
        0,
        "the other pod"
    );

    let st = policy_status(&policies, "no-store-9", "the drops counted", |s| {
        s.drops > 0
    })
    .await;
    assert_eq!(st.drops, i64::from(count));
    assert_eq!(st.drops_by_node.get(&node), Some(&i64::from(count)));
    drop(collector);
    common::delete_node_objects(&client, &node).await;
}
