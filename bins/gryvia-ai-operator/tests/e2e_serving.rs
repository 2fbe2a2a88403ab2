//! End-to-end: the model registry and inference services against the real API server, KWOK
//! pods and a real Prometheus (built by `testenv/build --with-prometheus`) scraping series the
//! test serves for the canary's pods. Skipped without a control plane unless `GRYVIA_E2E=1`.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use gryvia_reconcile::serving::VERSION_LABEL;
use gryvia_testsupport::{Process, TestNamespace, free_port, http_get, wait_for};
use gryvia_types::{GryviaInferenceService, GryviaModelRegistry, ModelStage};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::json;

/// The Prometheus server testenv built.
fn prometheus_bin() -> String {
    let path = std::env::var("GRYVIA_PROMETHEUS_BIN").unwrap_or_else(|_| {
        let out = std::process::Command::new(gryvia_testsupport::repo_root().join("testenv/build"))
            .arg("--print-prometheus-dir")
            .output()
            .unwrap();
        format!("{}/prometheus", String::from_utf8_lossy(&out.stdout).trim())
    });
    assert!(
        std::path::Path::new(&path).exists(),
        "{path} is missing: run `testenv/build --with-prometheus` first"
    );
    path
}

/// What the canary's pods report: each scrape is 100 more requests, all fast and successful,
/// or (bad) 30 of them failing and all slow.
#[derive(Default)]
struct Series {
    bad: AtomicBool,
    ok: AtomicU64,
    failed: AtomicU64,
    fast: AtomicU64,
    slow: AtomicU64,
}

impl Series {
    fn scrape(&self) -> String {
        if self.bad.load(Ordering::SeqCst) {
            self.ok.fetch_add(70, Ordering::SeqCst);
            self.failed.fetch_add(30, Ordering::SeqCst);
            self.slow.fetch_add(100, Ordering::SeqCst);
        } else {
            self.ok.fetch_add(100, Ordering::SeqCst);
            self.fast.fetch_add(100, Ordering::SeqCst);
        }
        let (ok, failed) = (
            self.ok.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
        );
        let (fast, slow) = (
            self.fast.load(Ordering::SeqCst),
            self.slow.load(Ordering::SeqCst),
        );
        let all = fast + slow;
        format!(
            "# TYPE http_requests_total counter\n\
             http_requests_total{{status=\"2xx\"}} {ok}\n\
             http_requests_total{{status=\"5xx\"}} {failed}\n\
             # TYPE http_request_duration_seconds histogram\n\
             http_request_duration_seconds_bucket{{le=\"0.1\"}} {fast}\n\
             http_request_duration_seconds_bucket{{le=\"0.5\"}} {fast}\n\
             http_request_duration_seconds_bucket{{le=\"2\"}} {all}\n\
             http_request_duration_seconds_bucket{{le=\"+Inf\"}} {all}\n\
             http_request_duration_seconds_sum {}\n\
             http_request_duration_seconds_count {all}\n",
            fast as f64 * 0.05 + slow as f64 * 1.5
        )
    }
}

/// Serves `series` at `http://127.0.0.1:<port>/metrics`.
async fn serve_series(series: Arc<Series>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let s = series.clone();
            async move { s.scrape() }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

/// Starts Prometheus scraping the series every second as the pod `pod` of `namespace`;
/// returns it and its port once it is ready.
async fn start_prometheus(
    metrics_port: u16,
    namespace: &str,
    pod: &str,
) -> (Process, u16, tempdir::Dir) {
    let dir = tempdir::Dir::new("gryvia-e2e-prometheus");
    // Flow style: one line per key, no indentation to get wrong.
    let config = format!(
        "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
         scrape_configs: [{{job_name: canary, scrape_interval: 1s, static_configs: [\
         {{targets: ['127.0.0.1:{metrics_port}'], labels: {{namespace: '{namespace}', pod: '{pod}'}}}}]}}]\n"
    );
    let config_path = dir.path.join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let port = free_port();
    let process = Process::start(
        &prometheus_bin(),
        &[
            &format!("--config.file={}", config_path.display()),
            &format!("--storage.tsdb.path={}", dir.path.join("data").display()),
            &format!("--web.listen-address=127.0.0.1:{port}"),
        ],
        None,
        "prometheus-serving",
    )
    .unwrap();
    wait_for("Prometheus ready", Duration::from_secs(60), || async move {
        http_get(port, "/-/ready").await.filter(|(c, _)| *c == 200)
    })
    .await
    .unwrap();
    (process, port, dir)
}

/// A scratch directory removed on drop.
mod tempdir {
    pub struct Dir {
        pub path: std::path::PathBuf,
    }

    impl Dir {
        pub fn new(prefix: &str) -> Self {
            let path = std::env::temp_dir().join(gryvia_testsupport::unique(prefix));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn version(uri_base: &str, v: &str, stage: &str) -> serde_json::Value {
    json!({"version": v, "uri": format!("{uri_base}/{v}"), "stage": stage})
}

/// Waits until the inference service satisfies `check`; panics with its status otherwise.
async fn wait_service(
    api: &Api<GryviaInferenceService>,
    what: &str,
    check: impl Fn(&GryviaInferenceService) -> bool,
) -> GryviaInferenceService {
    let check = &check;
    let result = wait_for(what, Duration::from_secs(120), || async move {
        api.get("llama").await.ok().filter(|s| check(s))
    })
    .await;
    match result {
        Ok(s) => s,
        Err(e) => {
            let now = api.get("llama").await.map(|s| (s.spec, s.status));
            panic!("{e:#}; the service now: {now:?}")
        }
    }
}

/// Reads registry `name`, changes it with `change` and writes it back, again on a conflict (the
/// controller writes the registry's status meanwhile, which moves its resourceVersion).
async fn update_registry(
    api: &Api<GryviaModelRegistry>,
    name: &str,
    mut change: impl FnMut(&mut GryviaModelRegistry),
) {
    for _ in 0..20 {
        let mut r = api.get(name).await.unwrap();
        change(&mut r);
        match api.replace(name, &PostParams::default(), &r).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("update GryviaModelRegistry {name}: {e}"),
        }
    }
    panic!("update GryviaModelRegistry {name}: conflicts 20 times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn production_versions_are_served_a_good_canary_promoted_and_a_bad_one_rolled_back_on_prometheus_metrics()
 {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "aiop").await.unwrap();
    let ns = TestNamespace::create(&client, "serve").await.unwrap();
    let series = Arc::new(Series::default());
    let metrics_port = serve_series(series.clone()).await;
    // The canary's pods are named llama-canary-<hash>-<suffix>: the series stand for one.
    let (_prometheus, prom_port, _dir) =
        start_prometheus(metrics_port, &ns.name, "llama-canary-5d9f8c7b6-x2k4q").await;

    // The operator under its own RBAC, with its webhooks (the audit's user) for this namespace.
    let access = common::operator_access(&client, &lease_ns.name).await;
    let hook_port = free_port();
    let hook_addr = format!("127.0.0.1:{hook_port}");
    let hook_name = gryvia_testsupport::unique("gryvia-e2e-serve");
    let metrics_url = format!("http://127.0.0.1:{prom_port}");
    let selector = format!("kubernetes.io/metadata.name={}", ns.name);
    let (_operator, _) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &[
            "--metrics-url",
            &metrics_url,
            "--canary-check-seconds",
            "3",
            "--webhook-addr",
            &hook_addr,
            "--webhook-url",
            &format!("https://{hook_addr}"),
            "--webhook-name",
            &hook_name,
            "--webhook-namespace-selector",
            &selector,
        ],
        Some(&access.kubeconfig),
        "ai-operator-serving",
    )
    .unwrap();
    let _unregister = common::WebhookCleanup(hook_name.clone());
    use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
    let mwc: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("webhooks registered", Duration::from_secs(60), || {
        let mwc = mwc.clone();
        let name = hook_name.clone();
        async move { mwc.get(&name).await.ok() }
    })
    .await
    .unwrap();

    // A registry with v1 in production, served automatically.
    let registries: Api<GryviaModelRegistry> = Api::namespaced(client.clone(), &ns.name);
    let base = "s3://models/llama";
    let registry: GryviaModelRegistry = serde_json::from_value(json!({
        "metadata": {"name": "llama", "namespace": ns.name},
        "spec": {"modelName": "llama",
            "versions": [version(base, "v1", "production"), version(base, "v2", "staging")],
            "autoServe": {"enabled": true, "runtime": "vllm", "image": "vllm/vllm-openai:v0.6.0",
                "gpus": 1, "port": 8000, "replicas": {"min": 1, "max": 3},
                "autoscaling": {"targetCPUUtilization": 70},
                "canary": {"trafficPercent": 25, "analysisSeconds": 10,
                           "maxErrorRatePercent": 2.0, "maxLatencyMs": 500}}}
    }))
    .unwrap();
    registries
        .create(&PostParams::default(), &registry)
        .await
        .unwrap();
    let services: Api<GryviaInferenceService> = Api::namespaced(client.clone(), &ns.name);
    let s = wait_service(&services, "v1 served", |s| {
        s.status
            .as_ref()
            .is_some_and(|st| st.stable_version.as_deref() == Some("v1") && st.ready_replicas >= 1)
    })
    .await;
    assert_eq!(
        s.status.unwrap().url.as_deref(),
        Some(format!("http://llama.{}.svc:8000", ns.name).as_str())
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let d = deployments.get("llama").await.unwrap();
    let pod = d.spec.unwrap().template;
    let c = &pod.spec.unwrap().containers[0];
    let args = c.args.clone().unwrap();
    assert_eq!(&args[..2], ["--model", "s3://models/llama/v1"]);
    let limits = c.resources.clone().unwrap().limits.unwrap();
    assert_eq!(limits["nvidia.com/gpu"].0, "1");
    assert!(c.readiness_probe.is_some() && c.startup_probe.is_some());
    let hpa = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), &ns.name)
        .get("llama")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!((hpa.min_replicas, hpa.max_replicas), (Some(1), 3));
    assert_eq!(hpa.scale_target_ref.name, "llama");
    let cpu = hpa.metrics.unwrap()[0].resource.clone().unwrap();
    assert_eq!(cpu.target.average_utilization, Some(70));
    Api::<Service>::namespaced(client.clone(), &ns.name)
        .get("llama")
        .await
        .unwrap();

    // v2 to production with the CLI: a canary next to v1, good metrics, promoted.
    let (ok, out, err) = common::gryvia(&[
        "model",
        "promote",
        "llama",
        "v2",
        "--stage",
        "production",
        "-n",
        &ns.name,
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "llama: v2 staging -> production (v1 production -> archived)"
    );
    wait_service(&services, "a canary of v2", |s| {
        s.spec.canary.as_ref().is_some_and(|c| c.version == "v2")
    })
    .await;
    let s = wait_service(&services, "v2 promoted and served alone", |s| {
        s.spec.model.version == "v2"
            && s.spec.canary.is_none()
            && s.status
                .as_ref()
                .is_some_and(|st| st.stable_version.as_deref() == Some("v2"))
    })
    .await;
    let st = s.status.unwrap();
    let decision = st.decision.clone().unwrap();
    assert_eq!(decision.outcome, "Promoted", "{decision:?}");
    // Checks before Prometheus has two samples in the window have no data (inconclusive);
    // none failed, and the promotion rests on passed ones.
    assert!(
        st.checks.iter().all(|c| c.result != "Failed")
            && st.checks.iter().filter(|c| c.result == "Passed").count() >= 2,
        "{:?}",
        st.checks
    );
    assert!(decision.message.contains("none failed"), "{decision:?}");
    let c = &st.checks[st.checks.len() - 1];
    assert_eq!(c.error_rate_percent, Some(0.0), "{c:?}");
    assert!(c.latency_ms.is_some_and(|l| l < 100.0), "{c:?}");
    let d = wait_for(
        "the v2 stable Deployment, no canary",
        Duration::from_secs(60),
        || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("llama").await.ok()?;
                let v = d
                    .spec
                    .as_ref()?
                    .template
                    .metadata
                    .as_ref()?
                    .labels
                    .as_ref()?
                    .get(VERSION_LABEL)?
                    .clone();
                let canary_gone = deployments.get_opt("llama-canary").await.ok()?.is_none();
                (v == "v2" && canary_gone).then_some(d)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(
        d.spec.unwrap().template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap()[1],
        "s3://models/llama/v2"
    );
    let r = wait_for("the registry serving v2", Duration::from_secs(60), || {
        let registries = registries.clone();
        async move {
            let r = registries.get("llama").await.ok()?;
            let st = r.status.as_ref()?;
            let serving = gryvia_types::conditions::find(&st.conditions, "Serving")?;
            (st.serving_version.as_deref() == Some("v2") && serving.status == "True").then_some(r)
        }
    })
    .await
    .unwrap();
    let history = r.status.unwrap().history;
    let promoted = history
        .iter()
        .find(|e| e.version == "v2" && e.to == Some(ModelStage::Production))
        .unwrap();
    assert!(
        promoted.user.as_deref().is_some_and(|u| !u.is_empty()),
        "the webhook recorded who: {history:?}"
    );

    // v3 registered, then promoted by alice while the canary's pods fail 30 % of requests
    // (from now on: the rate window, 3 s, holds only bad scrapes after a few seconds).
    series.bad.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(5)).await;
    update_registry(&registries, "llama", |r| {
        r.spec
            .versions
            .push(serde_json::from_value(version(base, "v3", "none")).unwrap());
    })
    .await;
    let role: k8s_openapi::api::rbac::v1::Role = serde_json::from_value(json!({
        "metadata": {"name": "model-promoter"},
        "rules": [{"apiGroups": ["gryvia.io"], "resources": ["gryviamodelregistries"], "verbs": ["get", "update"]}]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "alice-promotes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "model-promoter"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]
    }))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let alice: Api<GryviaModelRegistry> = Api::namespaced(
        gryvia_testsupport::client_as("alice").await.unwrap(),
        &ns.name,
    );
    update_registry(&alice, "llama", |r| {
        let archived =
            gryvia_reconcile::registry::promote(&mut r.spec.versions, "v3", ModelStage::Production)
                .unwrap();
        assert_eq!(archived.as_deref(), Some("v2"));
    })
    .await;
    let s = wait_service(&services, "the v3 canary rolled back", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.canary_version.as_deref() == Some("v3")
                && st.canary_phase.as_deref() == Some("RolledBack")
        })
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(st.stable_version.as_deref(), Some("v2"), "v2 still serves");
    let decision = st.decision.unwrap();
    // 30 % once the window holds only bad scrapes; less when it still holds good ones.
    assert!(
        decision.message.starts_with("check failed: error rate ")
            && decision.message.contains("% over 2%"),
        "{decision:?}"
    );
    let failed = st.checks.iter().find(|c| c.result == "Failed").unwrap();
    assert!(
        failed
            .error_rate_percent
            .is_some_and(|e| e > 2.0 && e <= 30.0),
        "{failed:?}"
    );
    assert!(failed.latency_ms.is_some_and(|l| l > 500.0), "{failed:?}");
    wait_for(
        "the canary Deployment removed",
        Duration::from_secs(60),
        || {
            let deployments = deployments.clone();
            async move {
                deployments
                    .get_opt("llama-canary")
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            }
        },
    )
    .await
    .unwrap();
    let r = wait_for(
        "the registry says rolled back",
        Duration::from_secs(60),
        || {
            let registries = registries.clone();
            async move {
                let r = registries.get("llama").await.ok()?;
                let c = gryvia_types::conditions::find(&r.status.as_ref()?.conditions, "Serving")?
                    .clone();
                (c.reason == "CanaryRolledBack").then_some(r)
            }
        },
    )
    .await
    .unwrap();
    let history = r.status.unwrap().history;
    let by_alice = history
        .iter()
        .find(|e| e.version == "v3" && e.to == Some(ModelStage::Production))
        .unwrap();
    assert_eq!(by_alice.user.as_deref(), Some("alice"), "{history:?}");
    assert!(
        history.iter().any(|e| e.version == "v2"
            && e.to == Some(ModelStage::Archived)
            && e.user.as_deref() == Some("alice")),
        "{history:?}"
    );

    // The CLI shows it; a version that does not exist is one line naming the field.
    let (ok, out, err) = common::gryvia(&["serve", "status", "llama", "-n", &ns.name]);
    assert!(ok, "{err}");
    assert!(out.contains("Canary:     v3 RolledBack"), "{out}");
    assert!(out.contains("Failed"), "{out}");
    let (ok, out, _) = common::gryvia(&["model", "history", "llama", "-n", &ns.name]);
    assert!(ok && out.contains("alice"), "{out}");
    let (ok, out, _) = common::gryvia(&["model", "list", "-n", &ns.name]);
    assert!(ok, "{out}");
    let v2 = out.lines().find(|l| l.contains(" v2 ")).unwrap();
    assert!(
        v2.contains("archived") && v2.trim_end().ends_with("llama"),
        "{out}"
    );
    let (ok, _, err) = common::gryvia(&[
        "model", "promote", "llama", "v9", "--stage", "staging", "-n", &ns.name,
    ]);
    assert!(!ok);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("spec.versions: no version \"v9\""), "{err}");
}
