use super::*;
use serde_json::json;

fn isvc(spec: Value) -> GryviaInferenceService {
    let mut base = json!({
        "model": {"name": "llama", "version": "v1", "uri": "s3://m/v1"},
        "runtime": "vllm", "image": "vllm/vllm-openai:v0.6.0", "port": 8000, "gpus": 1,
    });
    if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaInferenceService",
        "metadata": {"name": "chat", "namespace": "tenant-a", "generation": 1},
        "spec": base,
    }))
    .unwrap()
}

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn applied<'a>(
    plan: &'a Plan<GryviaInferenceServiceStatus>,
    kind: &str,
    name: &str,
) -> Option<&'a Value> {
    plan.apply
        .iter()
        .find(|c| c.object_ref.kind == kind && c.object_ref.name == name)
        .map(|c| &c.object)
}

fn deleted(plan: &Plan<GryviaInferenceServiceStatus>, kind: &str, name: &str) -> bool {
    plan.delete.iter().any(|r| r.kind == kind && r.name == name)
}

fn with_status(
    mut s: GryviaInferenceService,
    plan: &Plan<GryviaInferenceServiceStatus>,
) -> GryviaInferenceService {
    if let Some(st) = &plan.status {
        s.status = Some(st.clone());
    }
    s
}

fn track(replicas: i32, ready: i32) -> Option<Track> {
    Some(Track {
        replicas,
        ready,
        stalled: None,
    })
}

fn read(error: f64, latency: f64) -> Reading {
    Reading::Read {
        error_ratio: Some(error),
        latency_seconds: Some(latency),
    }
}

const R: ServingReconciler = ServingReconciler {
    check_interval: Duration::from_secs(10),
};

#[test]
fn vllm_tgi_triton_and_custom_get_their_arguments_ports_and_probes() {
    let v = isvc(json!({"gpus": 2, "gpuType": "H100"}));
    let plan = R.reconcile(&v, &ServingWorld::default(), at(0));
    let d = applied(&plan, "Deployment", "chat").unwrap();
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["args"],
        json!([
            "--model",
            "s3://m/v1",
            "--served-model-name",
            "llama",
            "--port",
            "8000",
            "--tensor-parallel-size",
            "2"
        ])
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(c["startupProbe"]["failureThreshold"], 120);
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "2");
    assert_eq!(
        d["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"],
        "H100"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["tolerations"][0]["key"],
        "nvidia.com/gpu"
    );
    assert_eq!(
        d["spec"]["template"]["metadata"]["labels"][VERSION_LABEL],
        "v1"
    );

    let t = isvc(json!({"runtime": "tgi", "gpus": 4}));
    let c = container(&t, "v1", "hf://org/m");
    assert_eq!(
        c["args"],
        json!([
            "--model-id",
            "hf://org/m",
            "--port",
            "8000",
            "--num-shard",
            "4"
        ])
    );

    let tr = isvc(json!({"runtime": "triton"}));
    let c = container(&tr, "v1", "s3://repo");
    assert_eq!(c["command"], json!(["tritonserver"]));
    assert_eq!(c["args"][0], "--model-repository=s3://repo");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/v2/health/ready");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/v2/health/live");
    assert_eq!(c["ports"].as_array().unwrap().len(), 3);
    let plan = R.reconcile(&tr, &ServingWorld::default(), at(0));
    assert_eq!(
        applied(&plan, "Service", "chat").unwrap()["spec"]["ports"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    let cu = isvc(json!({"runtime": "custom", "gpus": 0, "port": 9000}));
    let c = container(&cu, "v1", "pvc://w/m");
    assert!(c.get("args").is_none() && c.get("resources").is_none());
    assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], 9000);
    assert_eq!(
        c["env"][2],
        json!({"name": "MODEL_URI", "value": "pvc://w/m"})
    );
}

#[test]
fn fixed_replicas_have_no_autoscaler_and_a_range_gets_one_with_its_bounds() {
    let fixed = isvc(json!({"replicas": {"min": 2, "max": 2}}));
    let plan = R.reconcile(
        &fixed,
        &ServingWorld {
            autoscaler: true,
            ..ServingWorld::default()
        },
        at(0),
    );
    assert_eq!(
        applied(&plan, "Deployment", "chat").unwrap()["spec"]["replicas"],
        2
    );
    assert!(applied(&plan, "HorizontalPodAutoscaler", "chat").is_none());
    assert!(
        deleted(&plan, "HorizontalPodAutoscaler", "chat"),
        "an autoscaler no longer wanted is removed"
    );

    let scaled = isvc(json!({"replicas": {"min": 1, "max": 5},
        "autoscaling": {"metric": {"name": "requests_in_flight", "targetAverageValue": "8"}}}));
    let plan = R.reconcile(&scaled, &ServingWorld::default(), at(0));
    let d = applied(&plan, "Deployment", "chat").unwrap();
    assert!(
        d["spec"].get("replicas").is_none(),
        "the autoscaler owns the count"
    );
    let h = applied(&plan, "HorizontalPodAutoscaler", "chat").unwrap();
    assert_eq!(h["apiVersion"], "autoscaling/v2");
    assert_eq!(h["spec"]["minReplicas"], 1);
    assert_eq!(h["spec"]["maxReplicas"], 5);
    assert_eq!(h["spec"]["scaleTargetRef"]["name"], "chat");
    let metrics = h["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 1, "a custom metric alone: no CPU target");
    assert_eq!(metrics[0]["pods"]["metric"]["name"], "requests_in_flight");

    let both = isvc(
        json!({"replicas": {"min": 2, "max": 6}, "autoscaling": {"targetCPUUtilization": 60}}),
    );
    let h = autoscaler(&both);
    assert_eq!(
        h["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        60
    );
    let default = autoscaler(&isvc(json!({"replicas": {"min": 1, "max": 3}})));
    assert_eq!(
        default["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        DEFAULT_CPU_TARGET
    );
}

#[test]
fn the_weights_come_from_the_registry_and_a_missing_location_names_the_field() {
    let mut v = isvc(json!({}));
    v.spec.model.uri = None;
    let plan = R.reconcile(&v, &ServingWorld::default(), at(0));
    assert!(plan.apply.is_empty());
    let c = &plan.status.as_ref().unwrap().conditions[0];
    assert_eq!(
        (c.reason.as_str(), c.status.as_str()),
        ("ModelNotFound", "False")
    );
    assert!(
        c.message.starts_with("spec.model.uri: absent"),
        "{}",
        c.message
    );
    let world = ServingWorld {
        registry_uris: BTreeMap::from([("v1".to_owned(), "s3://reg/v1".to_owned())]),
        stable: track(1, 1),
        ..ServingWorld::default()
    };
    let plan = R.reconcile(&v, &world, at(0));
    let d = applied(&plan, "Deployment", "chat").unwrap();
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["args"][1],
        "s3://reg/v1"
    );
    let st = plan.status.unwrap();
    assert_eq!(st.url.as_deref(), Some("http://chat.tenant-a.svc:8000"));
    assert_eq!(st.ready_replicas, 1);
    assert_eq!(st.conditions[0].reason, "Serving");
}

#[test]
fn a_canary_takes_at_least_its_share_of_the_pods() {
    assert_eq!(canary_replicas(1, 10), 1);
    assert_eq!(canary_replicas(9, 10), 1);
    assert_eq!(canary_replicas(10, 10), 2);
    assert_eq!(canary_replicas(3, 50), 3);
    assert_eq!(canary_replicas(4, 20), 1);
    assert_eq!(canary_replicas(0, 25), 1);
}

fn canary(extra: Value) -> GryviaInferenceService {
    let mut c = json!({"version": "v2", "uri": "s3://m/v2", "trafficPercent": 20,
        "autoPromote": true, "autoRollback": true, "analysisSeconds": 30});
    if let (Some(b), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    isvc(json!({"replicas": {"min": 4, "max": 4}, "canary": c}))
}

/// Runs reconciles at `times` with the canary's reading, feeding each status into the next.
fn run(
    mut s: GryviaInferenceService,
    times: &[i64],
    reading: &Reading,
) -> (
    GryviaInferenceService,
    Vec<Plan<GryviaInferenceServiceStatus>>,
) {
    let mut plans = Vec::new();
    for t in times {
        let world = ServingWorld {
            stable: track(4, 4),
            canary: track(1, 1),
            reading: reading.clone(),
            ..ServingWorld::default()
        };
        let plan = R.reconcile(&s, &world, at(*t));
        s = with_status(s, &plan);
        plans.push(plan);
    }
    (s, plans)
}

#[test]
fn a_good_canary_is_checked_each_interval_and_promoted_after_its_analysis() {
    let s = canary(json!({}));
    let first = R.reconcile(
        &s,
        &ServingWorld {
            stable: track(4, 4),
            ..ServingWorld::default()
        },
        at(0),
    );
    assert!(first.events.iter().any(|e| e.reason == "CanaryStarted"));
    assert_eq!(
        applied(&first, "Deployment", "chat-canary").unwrap()["spec"]["replicas"],
        1
    );
    let st = first.status.clone().unwrap();
    assert_eq!(st.canary_phase.as_deref(), Some(phase::PROGRESSING));
    assert!(st.canary_start_time.is_none(), "no ready canary pod yet");
    assert_eq!(first.requeue_after(), Some(Duration::from_secs(10)));
    let s = with_status(s, &first);
    let (s, plans) = run(s, &[5, 8, 15, 25, 35], &read(0.001, 0.120));
    let st = s.status.clone().unwrap();
    assert_eq!(st.canary_start_time.as_ref().unwrap().0, at(5));
    // Checks at 5, 15, 25, 35 (8 is within the interval).
    assert_eq!(st.checks.len(), 4);
    assert!(st.checks.iter().all(|c| c.result == "Passed"));
    assert_eq!(st.checks[0].error_rate_percent, Some(0.1));
    assert_eq!(st.checks[0].latency_ms, Some(120.0));
    assert_eq!(st.canary_phase.as_deref(), Some(phase::PROMOTED));
    let d = st.decision.clone().unwrap();
    assert!(
        d.message.contains("4 of 4 check(s) passed"),
        "{}",
        d.message
    );
    let last = plans.last().unwrap();
    assert!(last.events.iter().any(|e| e.reason == "CanaryPromoted"));
    // The promoting reconcile itself serves v2 and removes the canary: nothing else may come
    // to trigger another (a deleted Deployment is no event for the controller).
    let stable = applied(last, "Deployment", "chat").unwrap();
    assert_eq!(
        stable["spec"]["template"]["metadata"]["labels"][VERSION_LABEL],
        "v2"
    );
    assert!(deleted(last, "Deployment", "chat-canary"));
    assert_eq!(st.stable_version.as_deref(), Some("v2"));
    // The promotion's reconcile and every later one: the stable track serves v2, no canary.
    let (s, plans) = run(s, &[36], &read(0.001, 0.1));
    let p = &plans[0];
    let stable = applied(p, "Deployment", "chat").unwrap();
    assert_eq!(
        stable["spec"]["template"]["metadata"]["labels"][VERSION_LABEL],
        "v2"
    );
    assert_eq!(
        stable["spec"]["template"]["spec"]["containers"][0]["args"][1],
        "s3://m/v2"
    );
    assert!(applied(p, "Deployment", "chat-canary").is_none());
    assert!(deleted(p, "Deployment", "chat-canary"));
    assert_eq!(s.status.unwrap().stable_version.as_deref(), Some("v2"));
}

#[test]
fn a_canary_over_its_error_limit_is_rolled_back_at_once_with_the_numbers() {
    let (s, plans) = run(
        canary(json!({"maxErrorRatePercent": 2.0})),
        &[0, 10],
        &read(0.15, 0.1),
    );
    let st = s.status.clone().unwrap();
    assert_eq!(st.canary_phase.as_deref(), Some(phase::ROLLED_BACK));
    assert_eq!(st.checks.len(), 1);
    assert_eq!(st.checks[0].result, "Failed");
    assert!(
        st.decision
            .unwrap()
            .message
            .contains("error rate 15.00% over 2%")
    );
    assert!(
        plans[0]
            .events
            .iter()
            .any(|e| e.reason == "CanaryCheckFailed" && e.type_ == EventType::Warning)
    );
    assert!(
        plans[0]
            .events
            .iter()
            .any(|e| e.reason == "CanaryRolledBack")
    );
    let stable = applied(&plans[1], "Deployment", "chat").unwrap();
    assert_eq!(
        stable["spec"]["template"]["metadata"]["labels"][VERSION_LABEL],
        "v1"
    );
    assert!(deleted(&plans[1], "Deployment", "chat-canary"));
    assert_eq!(st.canary_replicas, 0);
}

#[test]
fn a_slow_canary_fails_on_latency_and_waits_for_a_person_without_auto_rollback() {
    let (s, plans) = run(
        canary(json!({"maxLatencyMs": 500, "autoRollback": false})),
        &[0],
        &read(0.0, 0.9),
    );
    let st = s.status.clone().unwrap();
    assert_eq!(st.canary_phase.as_deref(), Some(phase::FAILED));
    assert!(
        st.checks[0]
            .message
            .contains("p99 latency 900 ms over 500 ms")
    );
    assert!(
        applied(&plans[0], "Deployment", "chat-canary").is_some(),
        "kept to be looked at"
    );
    let mut s = s;
    s.spec.canary.as_mut().unwrap().auto_rollback = true;
    let (s, plans) = run(s, &[100], &read(0.0, 0.9));
    assert_eq!(
        s.status.unwrap().canary_phase.as_deref(),
        Some(phase::ROLLED_BACK)
    );
    assert!(deleted(&plans[0], "Deployment", "chat-canary"));
}

#[test]
fn without_data_for_the_whole_analysis_nothing_is_promoted() {
    let none = Reading::Read {
        error_ratio: None,
        latency_seconds: None,
    };
    let (s, _) = run(canary(json!({})), &[0, 10, 20, 30], &none);
    let st = s.status.unwrap();
    assert!(st.checks.iter().all(|c| c.result == "NoData"));
    assert_eq!(st.canary_phase.as_deref(), Some(phase::ROLLED_BACK));
    assert!(
        st.decision
            .unwrap()
            .message
            .starts_with("no data in 4 check(s)")
    );
    let down = Reading::Unavailable("connection refused".into());
    let (s, _) = run(canary(json!({"autoRollback": false})), &[0, 10], &down);
    let st = s.status.unwrap();
    assert_eq!(
        st.canary_phase.as_deref(),
        Some(phase::PROGRESSING),
        "an outage alone decides nothing before the end"
    );
    assert_eq!(st.checks[0].message, "metrics source: connection refused");
}

#[test]
fn passed_waits_for_auto_promote_and_readiness_alone_passes_without_a_metrics_source() {
    let (s, _) = run(
        canary(json!({"autoPromote": false})),
        &[0, 10, 20, 30],
        &Reading::Unconfigured,
    );
    let st = s.status.clone().unwrap();
    assert_eq!(st.canary_phase.as_deref(), Some(phase::PASSED));
    assert!(st.checks[0].message.contains("readiness alone"));
    let mut s = s;
    s.spec.canary.as_mut().unwrap().auto_promote = true;
    let (s, _) = run(s, &[31], &Reading::Unconfigured);
    assert_eq!(
        s.status.unwrap().canary_phase.as_deref(),
        Some(phase::PROMOTED)
    );
}

#[test]
fn a_stuck_or_unready_canary_fails() {
    let s = canary(json!({}));
    let world = ServingWorld {
        stable: track(4, 4),
        canary: Some(Track {
            replicas: 1,
            ready: 0,
            stalled: Some("ProgressDeadlineExceeded".into()),
        }),
        ..ServingWorld::default()
    };
    let plan = R.reconcile(&s, &world, at(0));
    let st = plan.status.unwrap();
    assert_eq!(st.canary_phase.as_deref(), Some(phase::ROLLED_BACK));
    assert!(
        st.decision
            .unwrap()
            .message
            .contains("never became ready: ProgressDeadlineExceeded")
    );
    // Ready once, then its pods are gone: the next check fails.
    let (s, _) = run(canary(json!({})), &[0], &read(0.0, 0.1));
    let world = ServingWorld {
        stable: track(4, 4),
        canary: track(1, 0),
        reading: read(0.0, 0.1),
        ..ServingWorld::default()
    };
    let plan = R.reconcile(&s, &world, at(10));
    assert_eq!(
        plan.status.unwrap().checks[1].message,
        "no canary pod is ready"
    );
}

#[test]
fn a_new_canary_version_starts_a_new_analysis() {
    let (mut s, _) = run(canary(json!({})), &[0], &read(0.5, 0.1));
    assert_eq!(
        s.status.as_ref().unwrap().canary_phase.as_deref(),
        Some(phase::ROLLED_BACK)
    );
    s.spec.canary.as_mut().unwrap().version = "v3".into();
    s.spec.canary.as_mut().unwrap().uri = Some("s3://m/v3".into());
    let (s, plans) = run(s, &[50], &read(0.0, 0.1));
    let st = s.status.unwrap();
    assert_eq!(
        (st.canary_version.as_deref(), st.canary_phase.as_deref()),
        (Some("v3"), Some(phase::PROGRESSING))
    );
    assert_eq!(st.checks.len(), 1);
    assert!(applied(&plans[0], "Deployment", "chat-canary").is_some());
}

#[test]
fn queries_select_the_canarys_pods_by_namespace_and_name() {
    let s = canary(json!({}));
    let q = queries(&s, Duration::from_secs(15)).unwrap();
    assert!(
        q.error_ratio
            .contains(r#"namespace="tenant-a",pod=~"chat-canary-[a-z0-9]+-[a-z0-9]+""#),
        "{}",
        q.error_ratio
    );
    assert!(q.error_ratio.contains("[15s]"));
    assert!(q.latency.starts_with("histogram_quantile(0.99"));
    let own =
        canary(json!({"errorRateQuery": "my_errors{ns=\"$namespace\",v=\"$version\"}[$window]"}));
    assert_eq!(
        queries(&own, Duration::from_secs(30)).unwrap().error_ratio,
        r#"my_errors{ns="tenant-a",v="v2"}[30s]"#
    );
    assert!(queries(&isvc(json!({})), Duration::from_secs(30)).is_none());
    assert!(
        default_queries(ServingRuntime::Triton)
            .latency
            .contains("nv_inference_request_duration_us")
    );
    assert!(
        default_queries(ServingRuntime::Tgi)
            .error_ratio
            .contains("tgi_request_failure")
    );
}

#[test]
fn a_settled_service_reconciles_to_the_same_status() {
    let s = isvc(json!({}));
    let world = ServingWorld {
        stable: track(1, 1),
        ..ServingWorld::default()
    };
    let p = R.reconcile(&s, &world, at(0));
    let s = with_status(s, &p);
    let again = R.reconcile(&s, &world, at(60));
    assert!(
        again.status.is_none(),
        "no status patch when nothing changed"
    );
}
