//! End-to-end faults under a storm (issue #25): the ai-operator (two replicas: job hooks, the
//! native queue scheduler) and the quota-operator (two replicas: tenants, metering) run a storm
//! of 300 GPU jobs in a queue, watched by a job hook, and 200 new tenants; ten priority tiers
//! change their values (each PriorityClass is replaced). Mid-storm both leaders are SIGKILLed,
//! then the kube-apiserver is killed and started again after an outage, then etcd (and KWOK,
//! the simulated kubelets, after it). Afterwards nothing is stuck, lost or done twice: every job
//! reaches its final phase with one admission, one batch Job and one usage record; every tenant
//! is Ready; every job's end reached the hook's receiver under one id; every PriorityClass was
//! replaced exactly once.
//!
//! The only test of its file: it takes the control plane down, and cargo runs test files one
//! after another, so no other test runs beside it.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gryvia_testsupport::{
    ClusterObject, KwokNodes, Process, ServiceAccountAccess, TestNamespace, unique, wait_for,
};
use gryvia_types::{
    GryviaAIJob, GryviaJobHook, GryviaPriority, GryviaTenant, GryviaUsageRecord, JobPhase,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// Jobs that succeed and jobs that fail (no retry), each pod running `POD_SECONDS`, on `NODES`
/// nodes of 8 GPUs; new tenants.
const SUCCEEDING: usize = 240;
const FAILING: usize = 60;
const POD_SECONDS: u64 = 20;
const NODES: usize = 40;
const TENANTS: usize = 200;
/// Priority tiers whose values change mid-storm (each PriorityClass is replaced).
const TIERS: usize = 10;

/// What a hook receiver was sent: per delivery id, how many POSTs and the (job, event) of the body.
#[derive(Default)]
struct Got {
    posts: BTreeMap<String, usize>,
    events: BTreeMap<String, (String, String)>,
}

/// A job hook's receiver on 127.0.0.1 that answers 200 to every POST and records it.
async fn receiver() -> (String, Arc<Mutex<Got>>, tokio::task::JoinHandle<()>) {
    use axum::http::HeaderMap;
    let got: Arc<Mutex<Got>> = Arc::default();
    let record = got.clone();
    let app = axum::Router::new().fallback(axum::routing::post(
        move |headers: HeaderMap, body: axum::body::Bytes| {
            let record = record.clone();
            async move {
                let id = headers
                    .get("x-gryvia-delivery")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body: Value = serde_json::from_slice(&body).unwrap_or_default();
                let name = body["object"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let event = body["event"].as_str().unwrap_or_default().to_owned();
                let mut got = record.lock().unwrap();
                *got.posts.entry(id.clone()).or_default() += 1;
                got.events.insert(id, (name, event));
                axum::http::StatusCode::OK
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, got, task)
}

/// Kills `component` of the test environment and starts it again after `down` seconds.
async fn restart(component: &str, down: u64) {
    gryvia_testsupport::testenv_restart(component, down)
        .await
        .unwrap();
}

/// What a watch of `api` saw from now on: per object name, every distinct `key` of it (the UIDs a
/// name had, the admissions a job was given).
type Seen = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

fn record_per_name<K>(
    api: Api<K>,
    key: impl Fn(&K) -> Option<String> + Send + 'static,
) -> (Seen, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    let seen: Seen = Arc::default();
    let record = seen.clone();
    // The watch outlives the API server's restart: it backs off, lists again and goes on.
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let Ok(object) = item else { continue };
            if let Some(k) = key(&object) {
                record
                    .lock()
                    .unwrap()
                    .entry(object.name_any())
                    .or_default()
                    .insert(k);
            }
        }
    });
    (seen, task)
}

/// Two replicas of `binary` sharing one Lease in `lease_ns` (identities replica-0 and replica-1).
fn replicas(
    binary: &std::path::Path,
    lease_ns: &str,
    extra: &[&str],
    access: &ServiceAccountAccess,
    log: &str,
) -> Vec<Process> {
    (0..2)
        .map(|i| {
            let identity = format!("replica-{i}");
            let mut args = extra.to_vec();
            args.extend(["--identity", &identity]);
            Process::operator(
                binary.to_str().unwrap(),
                lease_ns,
                &args,
                Some(&access.kubeconfig),
                &format!("{log}-{i}"),
            )
            .unwrap()
            .0
        })
        .collect()
}

/// SIGKILLs the replica that holds Lease `lease` in `lease_ns`; returns its identity.
async fn kill_leader(
    client: &kube::Client,
    lease_ns: &str,
    lease: &str,
    replicas: &mut [Process],
) -> String {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), lease_ns);
    let holder = wait_for(
        &format!("a holder of {lease}"),
        Duration::from_secs(60),
        || async { leases.get(lease).await.ok()?.spec?.holder_identity },
    )
    .await
    .unwrap();
    let i: usize = holder.trim_start_matches("replica-").parse().unwrap();
    replicas[i].kill();
    holder
}

/// The storm's jobs: `storm-000` .. in `ns`, of one GPU of `product`, the last `FAILING` of them
/// failing; what each should end as.
fn storm_jobs(ns: &str, product: &str) -> Vec<(GryviaAIJob, JobPhase)> {
    (0..SUCCEEDING + FAILING)
        .map(|i| {
            let fails = i >= SUCCEEDING;
            let mut annotations = json!({"gryvia.io/testenv-duration": format!("{POD_SECONDS}s")});
            if fails {
                annotations["gryvia.io/testenv-fail"] = json!("true");
            }
            let mut body = common::gpu_job(
                &format!("storm-{i:03}"),
                1,
                1,
                product,
                &json!({"retryLimit": 0, "podAnnotations": annotations}),
            );
            body["metadata"]["namespace"] = json!(ns);
            let phase = if fails {
                JobPhase::Failed
            } else {
                JobPhase::Succeeded
            };
            (serde_json::from_value(body).unwrap(), phase)
        })
        .collect()
}

/// Creates `objects` through `api`, eight at a time.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::StreamExt;
    futures::stream::iter(objects)
        .map(|o| async move { api.create(&PostParams::default(), &o).await.unwrap() })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn leaders_apiserver_and_etcd_killed_mid_storm_leave_nothing_stuck_lost_or_doubled() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let product = unique("GPU-STORM");
    let _nodes = KwokNodes::create_with_product(&client, "storm", NODES, 8, &product)
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "stormop").await.unwrap();
    let ns = TestNamespace::create(&client, "storm").await.unwrap();
    let _queue = ClusterObject::create::<gryvia_types::GryviaQueue>(
        &client,
        json!({"metadata": {"name": unique("storm")},
               "spec": {"namespaces": [ns.name],
                        "resources": [{"gpuType": product, "nominal": NODES * 8}]}}),
    )
    .await
    .unwrap();
    let ai_access = common::operator_access(&client, &lease_ns.name).await;
    let quota_access = ServiceAccountAccess::create(
        &client,
        "deploy/quota-operator/rbac.yaml",
        "gryvia-quota-operator",
        &lease_ns.name,
        "quota-operator",
    )
    .await
    .unwrap();
    let mut ai = replicas(
        std::path::Path::new(env!("CARGO_BIN_EXE_gryvia-ai-operator")),
        &lease_ns.name,
        &["--enable-job-hooks", "--native-queue-scheduler"],
        &ai_access,
        "ai-operator-storm",
    );
    let mut quota = replicas(
        &common::sibling_binary("gryvia-quota-operator", "gryvia-quota-operator"),
        &lease_ns.name,
        &["--metering"],
        &quota_access,
        "quota-operator-storm",
    );
    let (url, got, _receiver) = receiver().await;
    let key = "storm-hook-signing-key-5d1e";
    gryvia_testsupport::record_secret("storm hook signing key", key);
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        json!({"metadata": {"name": "storm-key"}, "stringData": {"secret": key}}),
    )
    .unwrap();
    Api::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let hooks: Api<GryviaJobHook> = Api::namespaced(client.clone(), &ns.name);
    let hook: GryviaJobHook = serde_json::from_value(json!({
        "metadata": {"name": "storm"},
        "spec": {"events": ["Succeeded", "Failed"], "url": format!("{url}/storm"),
                 "allowInsecure": true, "secretRef": {"name": "storm-key"},
                 "timeoutSeconds": 5, "maxAttempts": 20}
    }))
    .unwrap();
    hooks.create(&PostParams::default(), &hook).await.unwrap();
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let (batch_uids, _w1) =
        record_per_name(Api::<Job>::namespaced(client.clone(), &ns.name), |j| {
            j.uid()
        });
    let (admissions, _w2) = record_per_name(jobs.clone(), |j: &GryviaAIJob| {
        let a = j.status.as_ref()?.admission.as_ref()?;
        Some(serde_json::to_string(a).unwrap())
    });

    // Priority tiers; their values change mid-storm, and a PriorityClass's value is immutable:
    // each is replaced (deleted and made again).
    let ptag = unique("storm-tier");
    let tier_names: Vec<String> = (0..TIERS).map(|i| format!("{ptag}-{i}")).collect();
    let mut _tiers = Vec::new();
    for (i, name) in tier_names.iter().enumerate() {
        _tiers.push(
            ClusterObject::create::<GryviaPriority>(
                &client,
                json!({"metadata": {"name": name}, "spec": {"value": 1000 + i}}),
            )
            .await
            .unwrap(),
        );
    }
    let classes: Api<PriorityClass> = Api::all(client.clone());
    let class_values = || {
        let (classes, names) = (classes.clone(), tier_names.clone());
        async move {
            let mut values = Vec::new();
            for n in &names {
                values.push(classes.get_opt(n).await.ok()?.map(|c| c.value));
            }
            Some(values)
        }
    };
    let values_from = |base: i32| -> Vec<Option<i32>> {
        (0..TIERS)
            .map(|i| Some(base + i32::try_from(i).unwrap()))
            .collect()
    };
    wait_for(
        "the tiers' PriorityClasses",
        Duration::from_secs(60),
        || async { (class_values().await? == values_from(1000)).then_some(()) },
    )
    .await
    .unwrap();

    // The storm: 300 jobs and 200 tenants at once.
    let storm = storm_jobs(&ns.name, &product);
    let expected: BTreeMap<String, JobPhase> =
        storm.iter().map(|(j, p)| (j.name_any(), *p)).collect();
    let tag = unique("storm");
    let tenant_names: Vec<String> = (0..TENANTS).map(|i| format!("{tag}-{i:03}")).collect();
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    let tenant_objects: Vec<GryviaTenant> = tenant_names
        .iter()
        .map(|n| {
            serde_json::from_value(json!({
                "metadata": {"name": n, "labels": {"gryvia.io/e2e-storm": tag}},
                "spec": {"displayName": n, "quotas": {"concurrentGPUs": 1}}}))
            .unwrap()
        })
        .collect();
    tokio::join!(
        create_all(&jobs, storm.into_iter().map(|(j, _)| j).collect()),
        create_all(&tenants, tenant_objects)
    );
    let phase_counts = || {
        let jobs = jobs.clone();
        async move {
            let list = jobs.list(&ListParams::default()).await.ok()?;
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for j in &list.items {
                let phase = j.status.as_ref().and_then(|s| s.phase);
                *counts.entry(format!("{phase:?}")).or_default() += 1;
            }
            Some(counts)
        }
    };
    // Mid-storm: jobs running, the first ones finishing.
    wait_for("40 jobs running", Duration::from_secs(180), || async {
        let counts = phase_counts().await?;
        (counts.get("Some(Running)").copied().unwrap_or(0) >= 40).then_some(())
    })
    .await
    .unwrap();
    // The tiers' new values, just before the ai-operator's leader goes.
    let tiers: Api<GryviaPriority> = Api::all(client.clone());
    for (i, name) in tier_names.iter().enumerate() {
        tiers
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"value": 2000 + i}})),
            )
            .await
            .unwrap();
    }
    // 1. Both leaders, SIGKILLed: the standbys take over.
    let ai_leader = kill_leader(&client, &lease_ns.name, "gryvia-ai-operator", &mut ai).await;
    let quota_leader =
        kill_leader(&client, &lease_ns.name, "gryvia-quota-operator", &mut quota).await;
    eprintln!(
        "storm: leaders {ai_leader} (ai) and {quota_leader} (quota) killed; {:?}",
        phase_counts().await
    );
    // 2. The API server, down 5 s.
    restart("kube-apiserver", 5).await;
    eprintln!("storm: kube-apiserver back; {:?}", phase_counts().await);
    // 3. etcd, down 5 s (the API server stays up and answers errors meanwhile).
    restart("etcd", 5).await;
    eprintln!("storm: etcd back; {:?}", phase_counts().await);
    // The simulated kubelets (KWOK) restart as well, as kubelets resync after an outage: KWOK
    // v0.8.0 never retries a pod's transition that failed while etcd was down, and such a pod
    // would stay bound and Pending (seen here). It takes the nodes over when their leases
    // (40 s) run out.
    restart("kwok", 0).await;

    // Nothing stuck: every job reaches its final phase, every tenant is Ready.
    let finished = wait_for(
        "every job in its final phase",
        Duration::from_secs(600),
        || async {
            let list = jobs.list(&ListParams::default()).await.ok()?;
            let phases: BTreeMap<String, JobPhase> = list
                .items
                .iter()
                .filter_map(|j| Some((j.name_any(), j.status.as_ref()?.phase?)))
                .collect();
            (phases == expected).then_some(list.items)
        },
    )
    .await;
    let Ok(finished) = finished else {
        panic!("not every job final: {:?}", phase_counts().await)
    };
    let by_label = ListParams::default().labels(&format!("gryvia.io/e2e-storm={tag}"));
    let ready = wait_for("every tenant Ready", Duration::from_secs(300), || async {
        let list = tenants.list(&by_label).await.ok()?;
        let ready = list
            .items
            .iter()
            .filter(|t| {
                t.status.as_ref().is_some_and(|s| {
                    gryvia_types::conditions::is_true(&s.conditions, "Ready")
                        && s.namespace.as_deref() == Some(&format!("tenant-{}", t.name_any()))
                })
            })
            .count();
        (ready == TENANTS).then_some(ready)
    })
    .await;
    assert!(ready.is_ok(), "tenants: {ready:?}");
    // Every job's end delivered, none given up.
    let delivered = wait_for(
        "every job's end delivered",
        Duration::from_secs(360),
        || async {
            let st = hooks.get("storm").await.ok()?.status?;
            // The status keeps the newest 100 finished deliveries; `delivered` counts all.
            let done = st.delivered == i64::try_from(expected.len()).unwrap()
                && st
                    .deliveries
                    .iter()
                    .all(|d| d.state == gryvia_types::DeliveryState::Delivered);
            done.then_some(st)
        },
    )
    .await;
    let st = match delivered {
        Ok(st) => st,
        Err(e) => panic!(
            "{e:#}; hook status: {:?}",
            hooks.get("storm").await.map(|h| h.status)
        ),
    };
    assert_eq!(st.failed, 0);
    // One usage record per job that started, closed at its end.
    let started: BTreeSet<String> = finished
        .iter()
        .filter(|j| j.status.as_ref().is_some_and(|s| s.start_time.is_some()))
        .map(ResourceExt::name_any)
        .collect();
    let records_api: Api<GryviaUsageRecord> = Api::all(client.clone());
    let records = wait_for(
        "a closed usage record per started job",
        Duration::from_secs(120),
        || async {
            let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
            for r in records_api.list(&ListParams::default()).await.ok()?.items {
                if r.spec.namespace == ns.name && r.spec.end_time.is_some() {
                    *per_job.entry(r.spec.workload.name.clone()).or_default() += 1;
                }
            }
            (per_job.keys().cloned().collect::<BTreeSet<_>>() == started).then_some(per_job)
        },
    )
    .await
    .unwrap();

    // Every PriorityClass replaced once and no more: its value is immutable, so the new value
    // in force means it was deleted and made again; the API server's audit log shows no more
    // churn than that: at most two applies answered 201 (the first and the replacement) and
    // at most one delete answered 200. At most, not exactly: a write the API server answered
    // with a timeout while etcd was down may have landed all the same (seen: the replacement's
    // apply answered 504 and its retry 200, the object made all the same).
    let replaced = wait_for(
        "every PriorityClass replaced with its new value",
        Duration::from_secs(120),
        || async { (class_values().await? == values_from(2000)).then_some(()) },
    )
    .await;
    assert!(replaced.is_ok(), "values now: {:?}", class_values().await);
    let made = gryvia_testsupport::audit_count("patch", "priorityclasses", None, 201).unwrap();
    let deleted = gryvia_testsupport::audit_count("delete", "priorityclasses", None, 200).unwrap();
    for n in &tier_names {
        let (made, deleted) = (made.get(n).copied(), deleted.get(n).copied());
        assert!(
            made.is_some_and(|m| (1..=2).contains(&m)) && deleted.unwrap_or(0) <= 1,
            "PriorityClass {n}: made {made:?} times (at most twice: the first and its replacement), deleted {deleted:?} (at most once)"
        );
    }

    // Nothing lost, nothing doubled.
    let doubled_records: Vec<(&String, &usize)> = records.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled_records.is_empty(), "{doubled_records:?}");
    let (events, reposts) = {
        let got = got.lock().unwrap();
        let reposts: usize = got.posts.values().map(|n| n - 1).sum();
        (got.events.clone(), reposts)
    };
    let mut ids_per_event: BTreeMap<(String, String), usize> = BTreeMap::new();
    for event in events.values() {
        *ids_per_event.entry(event.clone()).or_default() += 1;
    }
    let want: BTreeMap<(String, String), usize> = expected
        .iter()
        .map(|(name, phase)| ((name.clone(), format!("{phase:?}")), 1))
        .collect();
    assert_eq!(ids_per_event, want, "each job's end under exactly one id");
    let batch = batch_uids.lock().unwrap().clone();
    let twice: Vec<(&String, &BTreeSet<String>)> =
        batch.iter().filter(|(_, uids)| uids.len() > 1).collect();
    assert!(twice.is_empty(), "a second batch Job: {twice:?}");
    assert_eq!(batch.len(), expected.len(), "one batch Job per AI job");
    let admitted = admissions.lock().unwrap().clone();
    let readmitted: Vec<(&String, &BTreeSet<String>)> =
        admitted.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(readmitted.is_empty(), "admitted twice: {readmitted:?}");
    assert_eq!(admitted.len(), expected.len(), "every job admitted");
    println!(
        "storm: {} jobs and {TENANTS} tenants through SIGKILLs of both leaders, a kube-apiserver \
         restart and an etcd restart: every job final ({} usage records, one each; {} batch \
         Jobs and {} admissions, none twice), every tenant Ready, {} job ends delivered under \
         one id each ({reposts} repeated POSTs of an id, which a receiver drops by id), \
         {TIERS} PriorityClasses replaced once each",
        expected.len(),
        records.len(),
        batch.len(),
        admitted.len(),
        events.len()
    );

    // Clean up while the standbys run (they hold the finalizers): the tenants and their
    // namespaces, the jobs.
    let _ = tenants
        .delete_collection(&DeleteParams::background(), &by_label)
        .await;
    let _ = jobs
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in &tenant_names {
        let _ = namespaces
            .delete(&format!("tenant-{n}"), &DeleteParams::background())
            .await;
    }
    let gone = wait_for(
        "the storm's objects gone",
        Duration::from_secs(120),
        || async {
            let left = tenants.list(&by_label).await.ok()?.items.len()
                + jobs.list(&ListParams::default()).await.ok()?.items.len();
            (left == 0).then_some(())
        },
    )
    .await;
    assert!(gone.is_ok(), "left behind: {gone:?}");
}
