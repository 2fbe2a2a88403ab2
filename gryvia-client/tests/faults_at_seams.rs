//! Fault injection at the executor's seam to the API server (issue #25): what a real API
//! server rarely does on cue. The executor runs unchanged over a kube `Client` whose transport
//! is a mockall mock of the API server (`MockApiServer`): every request the Plan makes is an
//! expectation, in order, answered with success, an error status, or never. Each test checks
//! that the executor stops at the fault without doing what comes after it, and that the retry
//! (the next reconcile applying the same Plan) does everything once: nothing lost, nothing
//! done twice. The node agent is checked the same way, its host commands behind a mockall
//! mock of `RemediationExecutor`, and leader election over a small Lease-holding server that
//! refuses its first reads with 403. E2E tests keep the real API server; these are unit tests.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers panic on broken fixtures"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gryvia_client::Error;
use gryvia_client::apply::{CALL_TIMEOUT, Executor};
use gryvia_reconcile::{Child, Eviction, Notification, Plan};
use gryvia_types::GryviaAIJob;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use mockall::{Sequence, automock};
use serde_json::{Value, json};

/// What the mock API server does with one request.
#[derive(Clone, Debug)]
pub enum Answer {
    /// 200 with the request's own body (what a server-side apply returns), a resourceVersion
    /// added.
    Echo,
    /// This status code and body.
    Json(u16, Value),
    /// Never answers (the executor's call timeout must end the wait).
    Hang,
}

/// The API server as the executor's transport sees it.
#[automock]
pub trait ApiServer {
    /// The answer to `method path` (the query string left out).
    fn answer(&self, method: &str, path: &str) -> Answer;
}

type Server = Arc<Mutex<MockApiServer>>;

/// A client whose every request goes to `server`; requests are logged in order.
fn client(server: Server, log: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (server, log) = (server.clone(), log.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_owned();
            let body = req.into_body().collect().await?.to_bytes();
            log.lock().unwrap().push(format!(
                "{method} {path} {}",
                String::from_utf8_lossy(&body)
            ));
            let answer = server.lock().unwrap().answer(&method, &path);
            let (code, json) = match answer {
                Answer::Echo => {
                    let mut v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    v["metadata"]["resourceVersion"] = json!("7");
                    (200, v)
                }
                Answer::Json(code, v) => (code, v),
                Answer::Hang => std::future::pending().await,
            };
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(respond(code, &json))
        }
    });
    kube::Client::new(svc, "default")
}

/// A JSON answer with this status code.
fn respond(code: u16, json: &Value) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(json.to_string())))
        .unwrap()
}

fn status(code: u16, reason: &str) -> Answer {
    Answer::Json(code, status_json(code, reason))
}

fn owner() -> Value {
    json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
           "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-1", "resourceVersion": "5"},
           "spec": {"image": "train:1"}})
}

fn config_map(name: &str) -> Child {
    Child::from_json(json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "team-a"},
                            "data": {"k": name}}))
    .unwrap()
}

const CORE: &str = "/api/v1";
const STATUS: &str = "/apis/gryvia.io/v1alpha1/namespaces/team-a/gryviaaijobs/train/status";

fn discovery() -> Answer {
    Answer::Json(
        200,
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
            {"name": "configmaps", "singularName": "configmap", "namespaced": true, "kind": "ConfigMap",
             "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}]}),
    )
}

fn cm_path(name: &str) -> String {
    format!("/api/v1/namespaces/team-a/configmaps/{name}")
}

/// Expects exactly one `method path`, next in `seq`, answered with `answer`.
fn once(m: &mut MockApiServer, seq: &mut Sequence, method: &str, path: &str, answer: Answer) {
    let (method, path) = (method.to_owned(), path.to_owned());
    m.expect_answer()
        .withf(move |me, p| me == method && p == path)
        .times(1)
        .in_sequence(seq)
        .returning(move |_, _| answer.clone());
}

struct Rig {
    server: Server,
    log: Arc<Mutex<Vec<String>>>,
    executor: Executor,
}

impl Rig {
    fn new() -> Self {
        let server: Server = Arc::new(Mutex::new(MockApiServer::new()));
        let log = Arc::default();
        let executor = Executor::new(client(server.clone(), Arc::clone(&log)), "gryvia-test");
        Rig {
            server,
            log,
            executor,
        }
    }

    /// Sets the next phase's expectations (after checking the last phase's were all met).
    fn expect(&self, f: impl FnOnce(&mut MockApiServer, &mut Sequence)) {
        let mut m = self.server.lock().unwrap();
        m.checkpoint();
        f(&mut m, &mut Sequence::new());
    }

    fn done(&self) -> Vec<String> {
        self.server.lock().unwrap().checkpoint();
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

fn job() -> GryviaAIJob {
    serde_json::from_value(owner()).unwrap()
}

fn plan_of_three() -> Plan<Value> {
    let mut plan = Plan::new();
    plan.apply = vec![config_map("c1"), config_map("c2"), config_map("c3")];
    plan.status = Some(json!({"phase": "Running"}));
    plan
}

#[tokio::test]
async fn a_500_in_the_middle_of_a_plan_stops_it_and_the_retry_does_the_rest_once() {
    let rig = Rig::new();
    rig.expect(|m, s| {
        once(m, s, "GET", CORE, discovery());
        once(m, s, "PATCH", &cm_path("c1"), Answer::Echo);
        once(m, s, "PATCH", &cm_path("c2"), status(500, "InternalError"));
    });
    let err = rig
        .executor
        .apply(&job(), &plan_of_three())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("apply ConfigMap/team-a/c2") && err.to_string().contains("500"),
        "{err}"
    );
    // Nothing after the fault: not c3, not the status.
    assert_eq!(rig.done().len(), 3);

    // The next reconcile applies the same Plan: every object and the status, each once (the
    // discovery is remembered; c1's apply is sent again, which changes nothing on a server).
    rig.expect(|m, s| {
        for c in ["c1", "c2", "c3"] {
            once(m, s, "PATCH", &cm_path(c), Answer::Echo);
        }
        once(m, s, "PATCH", STATUS, Answer::Json(200, owner()));
    });
    rig.executor.apply(&job(), &plan_of_three()).await.unwrap();
    assert_eq!(rig.done().len(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_call_that_never_answers_times_out_and_nothing_after_it_is_done() {
    let rig = Rig::new();
    rig.expect(|m, s| {
        once(m, s, "GET", CORE, discovery());
        once(m, s, "PATCH", &cm_path("c1"), Answer::Echo);
        once(m, s, "PATCH", &cm_path("c2"), Answer::Hang);
    });
    let started = tokio::time::Instant::now();
    let err = rig
        .executor
        .apply(&job(), &plan_of_three())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { what, after } if what.contains("c2") && *after == CALL_TIMEOUT),
        "{err}"
    );
    // The wait ended at the call timeout (on the test's paused clock).
    assert!(started.elapsed() >= CALL_TIMEOUT);
    assert!(started.elapsed() < CALL_TIMEOUT + Duration::from_secs(1));
    assert_eq!(rig.done().len(), 3);
}

/// A receiver on a local port that counts the requests it gets and answers 200.
async fn counting_receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: http::HeaderMap| {
            let seen = seen.clone();
            async move {
                let id = headers
                    .get("x-gryvia-delivery")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                seen.lock().unwrap().push(id);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

#[tokio::test]
async fn a_409_on_the_status_write_holds_back_the_notifications_until_the_status_is_written() {
    let (url, got) = counting_receiver().await;
    let mut plan: Plan<Value> = Plan::new();
    plan.status = Some(json!({"deliveries": [{"id": "d-1", "phase": "Pending"}]}));
    plan.notifications = vec![Notification {
        id: "d-1".to_owned(),
        url: url.clone(),
        secret: None,
        body: json!({"event": "Started"}),
        timeout_ms: Some(5_000),
    }];
    let rig = Rig::new();
    rig.expect(|m, s| once(m, s, "PATCH", STATUS, status(409, "Conflict")));
    let err = rig.executor.apply(&job(), &plan).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("apply status of GryviaAIJob train"),
        "{err}"
    );
    rig.done();
    // The delivery log was not written, so nothing was sent that it would not record.
    assert!(got.lock().unwrap().is_empty());

    rig.expect(|m, s| once(m, s, "PATCH", STATUS, Answer::Json(200, owner())));
    rig.executor.apply(&job(), &plan).await.unwrap();
    rig.done();
    assert_eq!(
        *got.lock().unwrap(),
        vec!["d-1".to_owned()],
        "delivered once"
    );
}

#[tokio::test]
async fn a_429_on_the_third_of_five_evictions_blocks_that_pod_only() {
    let mut plan: Plan<Value> = Plan::new();
    plan.evictions = (1..=5)
        .map(|i| Eviction {
            namespace: "team-a".to_owned(),
            pod: format!("p{i}"),
            reason: "drain".to_owned(),
        })
        .collect();
    let evict = |i: u32| format!("/api/v1/namespaces/team-a/pods/p{i}/eviction");
    let accepted = || {
        Answer::Json(
            201,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
        )
    };
    let rig = Rig::new();
    rig.expect(|m, s| {
        for i in 1..=5 {
            let a = if i == 3 {
                status(429, "TooManyRequests")
            } else {
                accepted()
            };
            once(m, s, "POST", &evict(i), a);
        }
    });
    let out = rig.executor.evict(&plan.evictions).await.unwrap();
    assert_eq!(
        out.evicted,
        ["team-a/p1", "team-a/p2", "team-a/p4", "team-a/p5"]
    );
    assert_eq!(out.blocked_evictions, ["team-a/p3"]);
    assert_eq!(rig.done().len(), 5, "each pod asked once");

    // The next pass asks for p3 alone (the drain's Plan names the pods still there); a pod
    // already gone answers 404 and is not an error.
    rig.expect(|m, s| {
        once(m, s, "POST", &evict(3), accepted());
        once(m, s, "POST", &evict(4), status(404, "NotFound"));
    });
    let out = rig.executor.evict(&plan.evictions[2..4]).await.unwrap();
    assert_eq!(out.evicted, ["team-a/p3"]);
    assert!(out.blocked_evictions.is_empty());
    assert_eq!(rig.done().len(), 2);
}

#[tokio::test]
async fn a_receiver_that_hangs_costs_one_timeout_and_the_delivery_is_reported_failed() {
    // A receiver that accepts the connection and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            open.push(socket);
        }
    });
    let rig = Rig::new();
    let n = Notification {
        id: "d-hang".to_owned(),
        url,
        secret: None,
        body: json!({"event": "Failed"}),
        timeout_ms: Some(500),
    };
    let started = std::time::Instant::now();
    let out = rig.executor.deliver(&[n.clone(), n]).await;
    assert_eq!(out.len(), 2);
    for d in &out {
        let why = d.failure().expect("a hung receiver is a failed delivery");
        assert!(why.contains("no answer within 500ms"), "{why}");
    }
    // Two deliveries, each given up at its own timeout: not stuck behind the receiver.
    assert!(started.elapsed() < Duration::from_secs(5));
    held.abort();
}

// ---------------------------------------------------------------------------------------------
// The node agent: its API calls and its host commands
// ---------------------------------------------------------------------------------------------

use gryvia_client::gpu_agent::{Agent, AgentConfig, GpuSource, RemediationExecutor, Sample};
use gryvia_types::RemediationRequest;

mockall::mock! {
    /// The host the agent runs remediation commands on.
    pub Host {}
    #[async_trait::async_trait]
    impl RemediationExecutor for Host {
        fn commands(&self, request: &RemediationRequest) -> Vec<Vec<String>>;
        async fn execute(&self, node: &str, request: &RemediationRequest) -> Result<String, String>;
    }
}

/// One GPU, always the same reading.
struct Steady;

impl GpuSource for Steady {
    fn describe(&self) -> String {
        "test".to_owned()
    }
    fn sample(&mut self, now: jiff::Timestamp) -> gryvia_client::Result<Sample> {
        let gpu = json!({"index": 0, "uuid": "GPU-0", "product": "NVIDIA H100 80GB HBM3",
                         "temperatureC": 40, "utilizationPercent": 0, "memoryUsedMiB": 0,
                         "memoryTotalMiB": 81559, "eccSingleBit": 0, "eccDoubleBit": 0,
                         "observedAt": now.to_string()});
        Ok(Sample {
            gpus: vec![serde_json::from_value(gpu).unwrap()],
            driver_version: None,
            cuda_version: None,
        })
    }
}

const NODE: &str = "/apis/gryvia.io/v1alpha1/gryviagpunodes/node-a";
const NODE_STATUS: &str = "/apis/gryvia.io/v1alpha1/gryviagpunodes/node-a/status";
const STORAGES: &str = "/apis/gryvia.io/v1alpha1/gryviastorages";

/// The node's GryviaGpuNode, asking for GPU reset `step-1`.
fn gpu_node() -> Answer {
    Answer::Json(
        200,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuNode",
               "metadata": {"name": "node-a", "resourceVersion": "3"},
               "spec": {"nodeName": "node-a", "remediationRequest": {
                   "id": "step-1", "action": "gpu-reset", "gpuIndices": [0],
                   "requestedAt": "2026-12-05T00:00:00Z", "timeoutSeconds": 60}}}),
    )
}

fn no_storages() -> Answer {
    Answer::Json(
        200,
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaStorageList",
               "metadata": {"resourceVersion": "1"}, "items": []}),
    )
}

fn agent(rig: &Rig, host: Arc<dyn RemediationExecutor>) -> Agent {
    Agent::new(
        rig.executor.client().clone(),
        AgentConfig::new("node-a", Duration::from_secs(10)),
        Box::new(Steady),
        host,
    )
}

/// Expects a round whose request was answered already: the node read, the storages listed,
/// the status reported (the report answered with `report`).
fn answered_round(rig: &Rig, report: Answer) {
    rig.expect(|m, s| {
        once(m, s, "GET", NODE, gpu_node());
        once(m, s, "GET", STORAGES, no_storages());
        once(m, s, "PATCH", NODE_STATUS, report);
    });
}

/// Expects a round that runs the step: the node read, Running reported, the storages listed,
/// the result reported.
fn step_round(rig: &Rig) {
    rig.expect(|m, s| {
        once(m, s, "GET", NODE, gpu_node());
        once(m, s, "PATCH", NODE_STATUS, gpu_node());
        once(m, s, "GET", STORAGES, no_storages());
        once(m, s, "PATCH", NODE_STATUS, gpu_node());
    });
}

/// The `phase` of the remediation result in the last status the agent wrote.
fn last_phase(log: &[String]) -> String {
    let last = log
        .iter()
        .rev()
        .find(|l| l.starts_with(&format!("PATCH {NODE_STATUS} ")))
        .expect("a status write");
    let body: Value = serde_json::from_str(last.splitn(3, ' ').nth(2).unwrap()).unwrap();
    body["status"]["remediationResult"]["phase"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn a_500_on_the_agents_running_report_keeps_the_step_for_the_next_round_and_runs_it_once() {
    let rig = Rig::new();
    let mut host = MockHost::new();
    host.expect_execute()
        .withf(|node, r| node == "node-a" && r.id == "step-1")
        .times(1)
        .returning(|_, _| Ok("GPU 0 reset".to_owned()));
    let host = Arc::new(host);
    let mut agent = agent(&rig, host.clone());

    // Round 1: Running cannot be reported, so the step does not start.
    rig.expect(|m, s| {
        once(m, s, "GET", NODE, gpu_node());
        once(m, s, "PATCH", NODE_STATUS, status(500, "InternalError"));
    });
    let err = agent.tick().await.unwrap_err();
    assert!(
        err.to_string()
            .contains("write status of GryviaGpuNode node-a"),
        "{err}"
    );
    rig.done();

    // Round 2: Running reported, the step runs, Succeeded reported.
    step_round(&rig);
    agent.tick().await.unwrap();
    assert_eq!(last_phase(&rig.done()), "Succeeded");

    // Round 3: the request is still in the spec, but answered: not run again.
    answered_round(&rig, status(500, "InternalError"));
    assert!(agent.tick().await.is_err());
    rig.done();
    answered_round(&rig, gpu_node());
    agent.tick().await.unwrap();
    // The failed report of round 3 lost nothing: the result is reported again.
    assert_eq!(last_phase(&rig.done()), "Succeeded");
}

/// A host whose commands never return.
struct HungHost;

#[async_trait::async_trait]
impl RemediationExecutor for HungHost {
    fn commands(&self, _: &RemediationRequest) -> Vec<Vec<String>> {
        vec![vec!["nvidia-smi".to_owned(), "--gpu-reset".to_owned()]]
    }
    async fn execute(&self, _: &str, _: &RemediationRequest) -> Result<String, String> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_host_command_that_hangs_fails_the_step_at_its_timeout_and_is_not_run_again() {
    let rig = Rig::new();
    let mut agent = agent(&rig, Arc::new(HungHost));
    step_round(&rig);
    let started = tokio::time::Instant::now();
    agent.tick().await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "the step's own timeout"
    );
    let log = rig.done();
    assert_eq!(last_phase(&log), "Failed");
    assert!(log.last().unwrap().contains("timed out after 60s"));
    answered_round(&rig, gpu_node());
    agent.tick().await.unwrap();
    assert_eq!(last_phase(&rig.done()), "Failed");
}

/// An API server that holds one Lease and refuses the first `forbidden` reads of it with 403,
/// as the API server does until a new RoleBinding reaches its authorizer.
fn lease_server(forbidden: usize, log: Arc<Mutex<Vec<String>>>) -> kube::Client {
    let state: Arc<Mutex<(usize, Option<Value>)>> = Arc::new(Mutex::new((forbidden, None)));
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (state, log) = (state.clone(), log.clone());
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_owned();
            let body = req.into_body().collect().await?.to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut guard = state.lock().unwrap();
            let (refusals, lease) = &mut *guard;
            let (code, json) = match method.as_str() {
                "GET" if *refusals > 0 => {
                    *refusals -= 1;
                    (403, status_json(403, "Forbidden"))
                }
                "GET" => lease
                    .clone()
                    .map_or_else(|| (404, status_json(404, "NotFound")), |l| (200, l)),
                "POST" => {
                    let mut l = body;
                    l["metadata"]["resourceVersion"] = json!("1");
                    *lease = Some(l.clone());
                    (201, l)
                }
                "PATCH" => {
                    let l = lease.as_mut().unwrap();
                    for (k, v) in body["spec"].as_object().unwrap() {
                        if v.is_null() {
                            l["spec"].as_object_mut().map(|s| s.remove(k));
                        } else {
                            l["spec"][k] = v.clone();
                        }
                    }
                    (200, l.clone())
                }
                _ => (405, status_json(405, "MethodNotAllowed")),
            };
            log.lock().unwrap().push(format!("{method} {path} {code}"));
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(respond(code, &json))
        }
    });
    kube::Client::new(svc, "default")
}

fn status_json(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": reason, "message": format!("injected {code} {reason}")})
}

#[tokio::test]
async fn a_403_on_the_lease_is_waited_out_and_the_replica_leads_once_it_may_read_it() {
    use gryvia_client::metrics::{Health, Metrics};
    use gryvia_client::runtime::{LeaseSettings, run_leader_elected};
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let client = lease_server(2, Arc::clone(&log));
    let health = Health::default();
    let (started, mut leading) = tokio::sync::mpsc::channel::<()>(1);
    let lease = LeaseSettings {
        name: "gryvia-test".to_owned(),
        namespace: "default".to_owned(),
        identity: "replica-a".to_owned(),
        duration_seconds: 15,
        grace_seconds: 5,
    };
    let run = tokio::spawn(run_leader_elected(
        client,
        Some(lease),
        "test",
        Metrics::new(),
        health.clone(),
        Box::new(move || {
            let started = started.clone();
            Box::pin(async move {
                let _ = started.send(()).await;
                std::future::pending::<()>().await;
            })
        }),
    ));
    tokio::time::timeout(Duration::from_secs(30), leading.recv())
        .await
        .expect("the controllers start once the Lease may be read")
        .unwrap();
    assert!(!run.is_finished(), "the process did not end on the 403s");
    assert!(health.is_ready());
    let log = log.lock().unwrap().clone();
    let lease_path = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    assert_eq!(
        log[..4],
        [
            format!("GET {lease_path}/gryvia-test 403"),
            format!("GET {lease_path}/gryvia-test 403"),
            format!("GET {lease_path}/gryvia-test 404"),
            format!("POST {lease_path} 201"),
        ],
        "{log:#?}"
    );
    run.abort();
}
