use super::*;
use serde_json::json;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn ws(spec: Value) -> GryviaWorkspace {
    let mut base = json!({"type": "jupyter", "owner": "alice@example.com", "gpus": 1,
        "storage": {"size": "10Gi", "storageClassName": "fast"}, "idleTimeoutMinutes": 30});
    if let (Some(b), Some(e)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkspace",
        "metadata": {"name": "nb", "namespace": "tenant-a", "uid": "w-1", "generation": 1},
        "spec": base,
    }))
    .unwrap()
}

fn running(start: i64, ws: &GryviaWorkspace) -> Option<PodState> {
    Some(PodState {
        uid: "pod-uid-1234-5678".into(),
        phase: "Running".into(),
        start: Some(at(start)),
        spec_hash: Some(spec_hash(ws)),
        deleting: false,
        deleted_at: None,
    })
}

fn applied<'a>(plan: &'a Plan<GryviaWorkspaceStatus>, kind: &str) -> Vec<&'a Value> {
    plan.apply
        .iter()
        .filter(|c| c.object_ref.kind == kind)
        .map(|c| &c.object)
        .collect()
}

fn with_status(mut w: GryviaWorkspace, plan: &Plan<GryviaWorkspaceStatus>) -> GryviaWorkspace {
    if let Some(s) = &plan.status {
        w.status = Some(s.clone());
    }
    w
}

const R: WorkspaceReconciler = WorkspaceReconciler {
    poll: Duration::from_secs(15),
};

#[test]
fn a_new_workspace_gets_its_pod_service_token_and_home() {
    let w = ws(json!({"gpuType": "A100"}));
    let world = WorkspaceWorld {
        token_exists: false,
        new_token: "s3cr3t".into(),
        ..WorkspaceWorld::default()
    };
    let plan = R.reconcile(&w, &world, at(0));
    let pod = applied(&plan, "Pod")[0];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["command"], json!(["jupyter", "lab"]));
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--port=8888"))
    );
    assert_eq!(c["env"][0]["valueFrom"]["secretKeyRef"]["name"], "nb-token");
    assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/home/jovyan");
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "nb-home"
    );
    assert_eq!(
        pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"],
        "A100"
    );
    assert_eq!(
        pod["metadata"]["annotations"][OWNER_ANNOTATION],
        "alice@example.com"
    );
    let secret = applied(&plan, "Secret")[0];
    assert_eq!(secret["stringData"][TOKEN_KEY], "s3cr3t");
    let pvc = applied(&plan, "PersistentVolumeClaim")[0];
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(pvc["spec"]["storageClassName"], "fast");
    assert_eq!(
        applied(&plan, "Service")[0]["spec"]["ports"][0]["port"],
        8888
    );
    let st = plan.status.unwrap();
    assert_eq!(st.phase.as_deref(), Some("Pending"));
    assert_eq!(st.url.as_deref(), Some("http://nb.tenant-a.svc:8888"));
    // The token is made once.
    let again = R.reconcile(&w, &WorkspaceWorld::default(), at(1));
    assert!(applied(&again, "Secret").is_empty());
}

#[test]
fn code_server_listens_on_8080_with_its_password() {
    let w = ws(json!({"type": "vscode", "storage": null}));
    let p = pod(&w);
    let c = &p["spec"]["containers"][0];
    assert!(c.get("command").is_none());
    assert_eq!(
        c["args"],
        json!([
            "--bind-addr",
            "0.0.0.0:8080",
            "--auth",
            "password",
            "/home/coder"
        ])
    );
    assert_eq!(c["env"][0]["name"], "PASSWORD");
    assert_eq!(c["image"], default_image(WorkspaceType::Vscode));
    assert!(p["spec"].get("volumes").is_none());
}

#[test]
fn activity_is_read_from_jupyter_and_code_server_answers() {
    let t = parse_activity(WorkspaceType::Jupyter, r#"{"started":"2026-12-05T07:00:00.000000Z","last_activity":"2026-12-05T07:10:00.123456Z","kernels":0,"connections":0}"#).unwrap();
    assert_eq!(t.to_string(), "2026-12-05T07:10:00.123456Z");
    let t = parse_activity(
        WorkspaceType::Vscode,
        r#"{"status":"alive","lastHeartbeat":1796454000000}"#,
    )
    .unwrap();
    assert_eq!(t, Timestamp::from_second(1_796_454_000).unwrap());
    assert!(
        parse_activity(WorkspaceType::Jupyter, "<html>")
            .unwrap_err()
            .starts_with("not JSON")
    );
    assert!(
        parse_activity(WorkspaceType::Vscode, "{}")
            .unwrap_err()
            .contains("lastHeartbeat")
    );
    assert_eq!(
        activity_path(WorkspaceType::Jupyter, "abc"),
        "/api/status?token=abc"
    );
}

#[test]
fn an_idle_workspace_is_culled_keeping_its_storage_and_an_active_one_is_not() {
    let w = ws(json!({}));
    let mut world = WorkspaceWorld {
        pod: running(0, &w),
        activity: Activity::Seen(at(600)),
        ..WorkspaceWorld::default()
    };
    // 20 minutes after the last activity: not yet; look again within the poll.
    let plan = R.reconcile(&w, &world, at(600 + 20 * 60));
    assert!(plan.delete.is_empty());
    assert_eq!(plan.requeue_after(), Some(Duration::from_secs(15)));
    let w = with_status(w, &plan);
    assert_eq!(
        w.status.as_ref().unwrap().last_activity.as_ref().unwrap().0,
        at(600)
    );
    assert_eq!(
        w.status.as_ref().unwrap().session_pod_uid.as_deref(),
        Some("pod-uid-1234-5678")
    );
    let open = applied(&plan, "GryviaUsageRecord")[0];
    assert_eq!(open["metadata"]["name"], "ws-nb-poduid12");
    assert_eq!(open["spec"]["workload"]["kind"], "GryviaWorkspace");
    assert!(open["spec"].get("endTime").is_none());
    // 30 minutes: culled.
    let plan = R.reconcile(&w, &world, at(600 + 30 * 60));
    assert!(
        plan.delete
            .iter()
            .any(|r| r.kind == "Pod" && r.name == "nb")
    );
    assert!(
        !plan
            .delete
            .iter()
            .any(|r| r.kind == "PersistentVolumeClaim")
    );
    let own = plan
        .apply
        .iter()
        .find(|c| c.object_ref.kind == "GryviaWorkspace")
        .unwrap();
    assert!(!own.owned);
    assert!(own.object["metadata"]["annotations"][CULLED_ANNOTATION].is_string());
    let e = plan.events.iter().find(|e| e.reason == "Culled").unwrap();
    assert!(
        e.message.starts_with("idle for 30 minute(s)"),
        "{}",
        e.message
    );
    let closed = applied(&plan, "GryviaUsageRecord")[0];
    assert_eq!(
        closed["spec"]["endTime"]
            .as_str()
            .unwrap()
            .parse::<Timestamp>()
            .unwrap(),
        at(2400)
    );
    let st = plan.status.clone().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Stopped"));
    assert!(st.session_pod_uid.is_none());
    // Activity since: it lives on.
    world.activity = Activity::Seen(at(2000));
    let plan = R.reconcile(&w, &world, at(600 + 30 * 60));
    assert!(plan.delete.is_empty());
}

#[test]
fn unreadable_activity_culls_nothing_and_says_why() {
    let w = ws(json!({}));
    let world = WorkspaceWorld {
        pod: running(0, &w),
        activity: Activity::Unreadable("503 from the pod proxy".into()),
        ..WorkspaceWorld::default()
    };
    let plan = R.reconcile(&w, &world, at(100_000));
    assert!(plan.delete.is_empty());
    let c = conditions::find(&plan.status.unwrap().conditions, ACTIVITY_KNOWN)
        .cloned()
        .unwrap();
    assert_eq!(c.status, "False");
    assert!(c.message.contains("503 from the pod proxy"));
}

#[test]
fn idle_time_counts_from_the_pods_start_after_a_restart() {
    let mut w = ws(json!({"idleTimeoutMinutes": 5}));
    w.status = Some(GryviaWorkspaceStatus {
        last_activity: Some(Time(at(0))),
        ..GryviaWorkspaceStatus::default()
    });
    let world = WorkspaceWorld {
        pod: running(10_000, &w),
        activity: Activity::Seen(at(0)),
        ..WorkspaceWorld::default()
    };
    let plan = R.reconcile(&w, &world, at(10_060));
    assert!(plan.delete.is_empty(), "started a minute ago");
}

#[test]
fn stopped_and_culled_workspaces_have_no_pod_and_start_again() {
    let w = ws(json!({"stopped": true}));
    let world = WorkspaceWorld {
        pod: running(0, &w),
        ..WorkspaceWorld::default()
    };
    let plan = R.reconcile(&w, &world, at(50));
    assert!(plan.delete.iter().any(|r| r.kind == "Pod"));
    assert!(
        applied(&plan, "PersistentVolumeClaim").len() == 1,
        "the claim stays"
    );
    let gone = R.reconcile(&w, &WorkspaceWorld::default(), at(60));
    assert!(applied(&gone, "Pod").is_empty());
    assert_eq!(
        gone.status
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .reason,
        "Stopped"
    );
    let mut culled_ws = ws(json!({}));
    culled_ws.metadata.annotations = Some(BTreeMap::from([(
        CULLED_ANNOTATION.to_owned(),
        at(0).to_string(),
    )]));
    let plan = R.reconcile(&culled_ws, &WorkspaceWorld::default(), at(60));
    assert!(applied(&plan, "Pod").is_empty());
    assert!(
        plan.status
            .unwrap()
            .conditions
            .iter()
            .any(|c| c.message.contains("gryvia workspace start"))
    );
    // Started again (the annotation removed): a pod.
    let started = ws(json!({}));
    assert_eq!(
        applied(
            &R.reconcile(&started, &WorkspaceWorld::default(), at(70)),
            "Pod"
        )
        .len(),
        1
    );
}

#[test]
fn a_pod_of_an_older_spec_or_one_that_ended_is_made_again() {
    let w = ws(json!({}));
    let mut old = running(0, &w).unwrap();
    old.spec_hash = Some("different".into());
    let plan = R.reconcile(
        &w,
        &WorkspaceWorld {
            pod: Some(old),
            ..WorkspaceWorld::default()
        },
        at(10),
    );
    assert!(plan.delete.iter().any(|r| r.kind == "Pod"));
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "Restarting" && e.message.contains("spec changed"))
    );
    let mut ended = running(0, &w).unwrap();
    ended.phase = "Failed".into();
    let plan = R.reconcile(
        &w,
        &WorkspaceWorld {
            pod: Some(ended),
            ..WorkspaceWorld::default()
        },
        at(10),
    );
    assert!(plan.events.iter().any(|e| e.message.contains("pod ended")));
}

#[test]
fn a_pod_that_vanished_closes_its_record_and_a_cpu_workspace_is_not_metered() {
    let w = ws(json!({}));
    let plan = R.reconcile(
        &w,
        &WorkspaceWorld {
            pod: running(0, &w),
            ..WorkspaceWorld::default()
        },
        at(100),
    );
    let w = with_status(w, &plan);
    let plan = R.reconcile(&w, &WorkspaceWorld::default(), at(700));
    let closed = applied(&plan, "GryviaUsageRecord")[0];
    assert!(closed["spec"]["endTime"].is_string());
    assert!(plan.status.unwrap().session_pod_uid.is_none());
    let cpu = ws(json!({"gpus": 0}));
    let plan = R.reconcile(
        &cpu,
        &WorkspaceWorld {
            pod: running(0, &cpu),
            ..WorkspaceWorld::default()
        },
        at(100),
    );
    assert!(applied(&plan, "GryviaUsageRecord").is_empty());
}

#[test]
fn a_workspace_over_the_gpu_quota_waits_and_says_by_how_much() {
    let w = ws(json!({"gpus": 2}));
    let quota = |used| {
        Some(GpuQuota {
            name: "tenant-a-gpus".into(),
            hard: 8,
            used,
        })
    };
    let plan = R.reconcile(
        &w,
        &WorkspaceWorld {
            quota: quota(7),
            ..WorkspaceWorld::default()
        },
        at(0),
    );
    assert!(applied(&plan, "Pod").is_empty());
    assert_eq!(plan.requeue_after(), Some(Duration::from_secs(15)));
    let ready = plan
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "QuotaExceeded");
    assert_eq!(
        ready.message,
        "needs 2 GPU(s); ResourceQuota tenant-a-gpus has 1 of 8 left: it starts when they are free"
    );
    let plan = R.reconcile(
        &w,
        &WorkspaceWorld {
            quota: quota(6),
            ..WorkspaceWorld::default()
        },
        at(30),
    );
    assert_eq!(applied(&plan, "Pod").len(), 1);
}
