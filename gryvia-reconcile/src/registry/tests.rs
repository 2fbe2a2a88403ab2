use super::*;
use gryvia_types::GryviaInferenceServiceStatus;
use serde_json::json;

fn at(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn registry(versions: Value, auto_serve: bool) -> GryviaModelRegistry {
    let mut spec = json!({"modelName": "llama", "versions": versions});
    if auto_serve {
        spec["autoServe"] = json!({"enabled": true, "runtime": "vllm", "image": "vllm/vllm-openai:v0.6.0",
            "gpus": 1, "port": 8000, "replicas": {"min": 2, "max": 4},
            "canary": {"trafficPercent": 25, "analysisSeconds": 60, "maxErrorRatePercent": 0.5}});
    }
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaModelRegistry",
        "metadata": {"name": "llama", "namespace": "tenant-a", "generation": 1},
        "spec": spec,
    }))
    .unwrap()
}

fn v(version: &str, stage: &str) -> Value {
    json!({"version": version, "uri": format!("s3://m/{version}"), "stage": stage})
}

fn apply_patch(mut r: GryviaModelRegistry, ops: &[Value]) -> GryviaModelRegistry {
    for op in ops {
        if op["path"] == "/metadata/annotations" {
            r.metadata.annotations = Some(BTreeMap::new());
        } else {
            r.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(
                    AUDIT_ANNOTATION.to_owned(),
                    op["value"].as_str().unwrap().to_owned(),
                );
        }
    }
    r
}

#[test]
fn the_webhook_records_who_changed_which_stage_and_a_client_cannot_rewrite_it() {
    let created = registry(json!([v("v1", "staging"), v("v2", "none")]), false);
    let ops = audit(None, &created, Some("alice"), at(0));
    let created = apply_patch(created, &ops);
    let a = annotated(&created);
    assert_eq!(a.len(), 1, "a version registered at none is no change");
    assert_eq!(
        (a[0].version.as_str(), a[0].from, a[0].to),
        ("v1", None, Some(ModelStage::Staging))
    );
    assert_eq!(a[0].user.as_deref(), Some("alice"));

    let mut promoted = registry(json!([v("v1", "production"), v("v2", "staging")]), false);
    promoted.metadata.annotations = Some(BTreeMap::from([(
        AUDIT_ANNOTATION.to_owned(),
        "[]".to_owned(),
    )]));
    let ops = audit(Some(&created), &promoted, Some("bob"), at(10));
    let promoted = apply_patch(promoted, &ops);
    let a = annotated(&promoted);
    assert_eq!(
        a.len(),
        3,
        "the client's empty list is replaced by the old entries plus the new"
    );
    assert_eq!(
        (a[1].version.as_str(), a[1].from, a[1].to),
        (
            "v1",
            Some(ModelStage::Staging),
            Some(ModelStage::Production)
        )
    );
    assert_eq!(
        (a[2].version.as_str(), a[2].user.as_deref()),
        ("v2", Some("bob"))
    );
    // An update that changes no stage leaves the annotation as it is.
    assert!(audit(Some(&promoted), &promoted, Some("carol"), at(20)).is_empty());
    // Removing a version is recorded too.
    let removed = registry(json!([v("v1", "production")]), false);
    let removed = apply_patch(
        removed.clone(),
        &audit(Some(&promoted), &removed, Some("dan"), at(30)),
    );
    let last = annotated(&removed).pop().unwrap();
    assert_eq!(
        (last.version.as_str(), last.to, last.user.as_deref()),
        ("v2", None, Some("dan"))
    );
}

#[test]
fn the_controller_moves_the_webhooks_entries_into_status_and_records_changes_seen_without_it() {
    let created = registry(json!([v("v1", "staging")]), false);
    let created = apply_patch(
        created.clone(),
        &audit(None, &created, Some("alice"), at(0)),
    );
    let plan = RegistryReconciler.reconcile(&created, &RegistryWorld::default(), at(1));
    let st = plan.status.clone().unwrap();
    assert_eq!(st.history.len(), 1);
    assert_eq!(st.history[0].user.as_deref(), Some("alice"));
    assert!(
        plan.events
            .iter()
            .any(|e| e.message == "version v1 to staging by alice")
    );
    // A change the webhook did not see (it was down): recorded with no user.
    let mut later = registry(json!([v("v1", "production")]), false);
    later.metadata.annotations = created.metadata.annotations.clone();
    later.status = Some(st);
    let plan = RegistryReconciler.reconcile(&later, &RegistryWorld::default(), at(5));
    let st = plan.status.clone().unwrap();
    assert_eq!(st.history.len(), 2);
    assert_eq!(
        (
            st.history[1].from,
            st.history[1].to,
            st.history[1].user.clone()
        ),
        (
            Some(ModelStage::Staging),
            Some(ModelStage::Production),
            None
        )
    );
    assert_eq!(st.production_version.as_deref(), Some("v1"));
    // Reconciling again adds nothing.
    later.status = Some(st);
    let again = RegistryReconciler.reconcile(&later, &RegistryWorld::default(), at(9));
    assert!(again.status.is_none() && again.events.is_empty());
}

fn service(
    stable: &str,
    phase_: Option<&str>,
    canary: Option<&str>,
    ready: i32,
) -> GryviaInferenceService {
    let mut s: GryviaInferenceService = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaInferenceService",
        "metadata": {"name": "llama", "namespace": "tenant-a"},
        "spec": {"model": {"name": "llama", "version": stable}, "runtime": "vllm", "image": "x"},
    }))
    .unwrap();
    s.status = Some(GryviaInferenceServiceStatus {
        stable_version: Some(stable.to_owned()),
        stable_uri: Some(format!("s3://m/{stable}")),
        canary_phase: phase_.map(str::to_owned),
        canary_version: canary.map(str::to_owned),
        ready_replicas: ready,
        ..GryviaInferenceServiceStatus::default()
    });
    s
}

fn served(plan: &Plan<GryviaModelRegistryStatus>) -> GryviaInferenceServiceSpec {
    let c = plan
        .apply
        .iter()
        .find(|c| c.object_ref.kind == "GryviaInferenceService")
        .unwrap();
    serde_json::from_value(c.object["spec"].clone()).unwrap()
}

#[test]
fn auto_serve_serves_the_first_production_version_and_canaries_the_next() {
    let r = registry(json!([v("v1", "production")]), true);
    let plan = RegistryReconciler.reconcile(&r, &RegistryWorld::default(), at(0));
    let spec = served(&plan);
    assert_eq!(
        (spec.model.version.as_str(), spec.model.uri.as_deref()),
        ("v1", Some("s3://m/v1"))
    );
    assert!(spec.canary.is_none());
    assert_eq!(
        (spec.replicas.min, spec.replicas.max, spec.port),
        (2, 4, 8000)
    );
    assert_eq!(
        plan.status.as_ref().unwrap().inference_service.as_deref(),
        Some("llama")
    );

    let r2 = registry(json!([v("v1", "archived"), v("v2", "production")]), true);
    let world = RegistryWorld {
        name_taken: false,
        service: Some(service("v1", None, None, 2)),
    };
    let plan = RegistryReconciler.reconcile(&r2, &world, at(10));
    let spec = served(&plan);
    assert_eq!(spec.model.version, "v1", "the served version stays stable");
    let c = spec.canary.unwrap();
    assert_eq!(
        (
            c.version.as_str(),
            c.uri.as_deref(),
            c.traffic_percent,
            c.analysis_seconds
        ),
        ("v2", Some("s3://m/v2"), 25, 60)
    );
    assert!(c.auto_promote && c.auto_rollback);
    assert_eq!(c.max_error_rate_percent, Some(0.5));
    let cond = conditions::find(&plan.status.unwrap().conditions, SERVING)
        .cloned()
        .unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("False", "Waiting")
    );

    let world = RegistryWorld {
        name_taken: false,
        service: Some(service("v1", Some(phase::PROGRESSING), Some("v2"), 2)),
    };
    let plan = RegistryReconciler.reconcile(&r2, &world, at(20));
    let cond = conditions::find(&plan.status.unwrap().conditions, SERVING)
        .cloned()
        .unwrap();
    assert_eq!(cond.reason, "Canary");

    // Promoted: the service's stable version is v2; its spec now names v2 alone.
    let world = RegistryWorld {
        name_taken: false,
        service: Some(service("v2", Some(phase::PROMOTED), Some("v2"), 2)),
    };
    let plan = RegistryReconciler.reconcile(&r2, &world, at(90));
    let spec = served(&plan);
    assert_eq!(spec.model.version, "v2");
    assert!(spec.canary.is_none());
    let st = plan.status.unwrap();
    assert_eq!(st.serving_version.as_deref(), Some("v2"));
    let cond = conditions::find(&st.conditions, SERVING).cloned().unwrap();
    assert_eq!(
        (cond.status.as_str(), cond.reason.as_str()),
        ("True", "Serving")
    );
}

#[test]
fn a_rolled_back_canary_stays_rolled_back_and_says_why() {
    let r2 = registry(json!([v("v1", "archived"), v("v2", "production")]), true);
    let mut s = service("v1", Some(phase::ROLLED_BACK), Some("v2"), 2);
    s.status.as_mut().unwrap().decision = Some(gryvia_types::CanaryDecision {
        time: Time(at(50)),
        outcome: phase::ROLLED_BACK.into(),
        message: "check failed: error rate 12.00% over 0.5%".into(),
    });
    let plan = RegistryReconciler.reconcile(
        &r2,
        &RegistryWorld {
            name_taken: false,
            service: Some(s),
        },
        at(60),
    );
    let spec = served(&plan);
    assert_eq!(spec.model.version, "v1");
    assert_eq!(
        spec.canary.unwrap().version,
        "v2",
        "the same canary: the service keeps it rolled back"
    );
    let cond = conditions::find(&plan.status.unwrap().conditions, SERVING)
        .cloned()
        .unwrap();
    assert_eq!(cond.reason, "CanaryRolledBack");
    assert!(
        cond.message.contains("error rate 12.00% over 0.5%"),
        "{}",
        cond.message
    );
}

#[test]
fn without_auto_serve_or_production_nothing_is_served() {
    let r = registry(json!([v("v1", "production")]), false);
    assert!(
        RegistryReconciler
            .reconcile(&r, &RegistryWorld::default(), at(0))
            .apply
            .is_empty()
    );
    let r = registry(json!([v("v1", "staging")]), true);
    let plan = RegistryReconciler.reconcile(&r, &RegistryWorld::default(), at(0));
    assert!(plan.apply.is_empty());
    assert!(plan.status.unwrap().production_version.is_none());
}

#[test]
fn a_service_of_the_same_name_that_is_not_the_registrys_is_left_alone() {
    let r = registry(json!([v("v1", "production")]), true);
    let plan = RegistryReconciler.reconcile(
        &r,
        &RegistryWorld {
            service: None,
            name_taken: true,
        },
        at(0),
    );
    assert!(plan.apply.is_empty());
    let cond = conditions::find(&plan.status.unwrap().conditions, SERVING)
        .cloned()
        .unwrap();
    assert_eq!(cond.reason, "NameTaken");
}

#[test]
fn promoting_to_production_archives_the_previous_one_and_an_unknown_version_is_named() {
    let mut r = registry(
        json!([v("v1", "production"), v("v2", "staging"), v("v3", "none")]),
        false,
    );
    assert_eq!(
        promote(&mut r.spec.versions, "v2", ModelStage::Production),
        Ok(Some("v1".to_owned()))
    );
    let stages: Vec<ModelStage> = r.spec.versions.iter().map(|v| v.stage).collect();
    assert_eq!(
        stages,
        [
            ModelStage::Archived,
            ModelStage::Production,
            ModelStage::None
        ]
    );
    assert_eq!(
        promote(&mut r.spec.versions, "v3", ModelStage::Staging),
        Ok(None)
    );
    let err = promote(&mut r.spec.versions, "v9", ModelStage::Staging).unwrap_err();
    assert_eq!(
        err,
        "spec.versions: no version \"v9\" (there are: v1, v2, v3)"
    );
}
