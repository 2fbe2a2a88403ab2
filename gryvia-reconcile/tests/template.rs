//! Template checking and rendering, and the priority tiers.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::BTreeMap;

use gryvia_reconcile::priority::{ObservedClass, PriorityReconciler, PriorityWorld};
use gryvia_reconcile::template::{
    TemplateReconciler, TemplateWorld, instantiate, render, validate,
};
use gryvia_reconcile::{Reconcile, plan::ObjectRef};
use gryvia_types::{GryviaPriority, GryviaTemplate};
use serde_json::json;

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap()
}

/// The features guide's example template, with an image.
fn guide_template() -> GryviaTemplate {
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
        "metadata": {"name": "my-training-template", "generation": 1},
        "spec": {
            "description": "Custom training template",
            "category": "training",
            "defaults": {
                "image": "registry.local/train:{{ .version }}",
                "framework": "pytorch",
                "resources": {"gpuType": "A100-80G", "gpuCount": 8},
                "command": ["python", "train.py", "--data={{ .dataPath }}", "--batch-size={{.batchSize}}"]
            },
            "parameters": [
                {"name": "dataPath", "type": "string", "required": true,
                 "validation": {"pattern": "/[a-z0-9/_-]+"}},
                {"name": "batchSize", "type": "integer", "default": "32", "validation": {"min": 1, "max": 512}},
                {"name": "version", "type": "string", "default": "v1", "validation": {"enum": ["v1", "v2"]}},
                {"name": "fp16", "type": "boolean", "default": "true"}
            ]
        }
    }))
    .unwrap()
}

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_guide_template_renders_into_a_job_with_placeholders_filled_and_old_resources_mapped() {
    let job = render(
        &guide_template(),
        "run-1",
        "team-a",
        &params(&[("dataPath", "/datasets/imagenet"), ("batchSize", "64")]),
    )
    .unwrap();
    assert_eq!(job.metadata.name.as_deref(), Some("run-1"));
    assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["gryvia.io/template"],
        "my-training-template"
    );
    assert_eq!(job.spec.image, "registry.local/train:v1");
    assert_eq!(
        job.spec.command,
        vec![
            "python",
            "train.py",
            "--data=/datasets/imagenet",
            "--batch-size=64"
        ]
    );
    assert_eq!(job.spec.gpus, 8);
    assert_eq!(job.spec.gpu_type.as_deref(), Some("A100-80G"));
    let r = job.spec.template_ref.unwrap();
    assert_eq!(r.name, "my-training-template");
    assert_eq!(r.parameters["batchSize"], "64");
    assert_eq!(r.parameters["version"], "v1", "defaults are recorded too");
}

#[test]
fn a_job_without_a_name_is_named_by_the_api_server_after_its_template() {
    let p = params(&[("dataPath", "/datasets/imagenet")]);
    let named = instantiate(&guide_template(), Some("run-1"), "team-a", &p).unwrap();
    assert_eq!(named.metadata.name.as_deref(), Some("run-1"));
    assert_eq!(named.metadata.generate_name, None);
    let mut long = guide_template();
    long.metadata.name = Some(format!("{}-x", "t".repeat(44)));
    let unnamed = instantiate(&long, None, "team-a", &p).unwrap();
    assert_eq!(unnamed.metadata.name, None);
    // 45 characters, the dash they end with trimmed, then the API server's dash.
    assert_eq!(
        unnamed.metadata.generate_name,
        Some(format!("{}-", "t".repeat(44)))
    );
}

#[test]
fn a_missing_required_parameter_is_an_error_naming_it() {
    let e = render(&guide_template(), "r", "ns", &params(&[])).unwrap_err();
    assert_eq!(e.field, "parameters.dataPath");
    assert!(e.message.contains("required"));
}

#[test]
fn out_of_range_wrong_type_pattern_and_enum_violations_are_errors_naming_the_parameter() {
    let t = guide_template();
    let cases = [
        (("batchSize", "0"), "below the minimum 1"),
        (("batchSize", "1024"), "above the maximum 512"),
        (("batchSize", "big"), "not an integer"),
        (("dataPath", "relative/path"), "does not match the pattern"),
        (("version", "v3"), "is not one of v1, v2"),
        (("fp16", "yes"), "not true or false"),
    ];
    for ((k, v), want) in cases {
        let mut p = params(&[("dataPath", "/d")]);
        p.insert(k.to_owned(), v.to_owned());
        let e = render(&t, "r", "ns", &p).unwrap_err();
        assert_eq!(e.field, format!("parameters.{k}"));
        assert!(e.message.contains(want), "{k}={v}: {e}");
    }
}

#[test]
fn an_unknown_parameter_is_an_error_listing_the_known_ones() {
    let e = render(
        &guide_template(),
        "r",
        "ns",
        &params(&[("dataPath", "/d"), ("lr", "0.1")]),
    )
    .unwrap_err();
    assert_eq!(e.field, "parameters.lr");
    assert!(
        e.message.contains("dataPath, batchSize, version, fp16"),
        "{e}"
    );
}

#[test]
fn a_placeholder_naming_no_parameter_makes_the_template_invalid_with_its_path() {
    let mut t = guide_template();
    t.spec.defaults.args = Some(vec!["--lr={{ .learningRate }}".into()]);
    let e = validate(&t.spec).unwrap_err();
    assert_eq!(e.field, "defaults.args[0]");
    assert!(e.message.contains("learningRate"));
    let plan = TemplateReconciler.reconcile(&t, &TemplateWorld::default(), now());
    let s = plan.status.unwrap();
    assert_eq!(s.conditions[0].type_, "Valid");
    assert_eq!(s.conditions[0].status, "False");
    assert!(s.conditions[0].message.starts_with("defaults.args[0]"));
    assert_eq!(plan.events.len(), 1);
}

#[test]
fn a_default_outside_its_own_range_makes_the_template_invalid() {
    let mut t = guide_template();
    t.spec.parameters[1].default = Some("1000".into());
    let e = validate(&t.spec).unwrap_err();
    assert_eq!(e.field, "parameters.batchSize.default");
}

#[test]
fn min_and_max_on_a_string_parameter_and_a_broken_pattern_are_invalid() {
    let mut t = guide_template();
    t.spec.parameters[2].validation.as_mut().unwrap().min = Some(1.0);
    assert_eq!(
        validate(&t.spec).unwrap_err().field,
        "parameters.version.validation"
    );
    let mut t = guide_template();
    t.spec.parameters[0].validation.as_mut().unwrap().pattern = Some("([".into());
    assert_eq!(
        validate(&t.spec).unwrap_err().field,
        "parameters.dataPath.validation.pattern"
    );
}

#[test]
fn a_template_without_an_image_cannot_render() {
    let mut t = guide_template();
    t.spec.defaults.image = None;
    assert_eq!(validate(&t.spec).unwrap_err().field, "defaults.image");
}

#[test]
fn a_valid_template_is_valid_and_counts_its_jobs_and_says_so_once() {
    let mut t = guide_template();
    let plan = TemplateReconciler.reconcile(
        &t,
        &TemplateWorld {
            instantiated_jobs: 3,
        },
        now(),
    );
    let s = plan.status.unwrap();
    assert_eq!(s.instantiated_jobs, 3);
    assert_eq!(s.conditions[0].status, "True");
    assert!(plan.events.is_empty());
    t.status = Some(s);
    let again = TemplateReconciler.reconcile(
        &t,
        &TemplateWorld {
            instantiated_jobs: 3,
        },
        now(),
    );
    assert!(again.is_noop());
}

#[test]
fn malformed_placeholders_are_reported() {
    let mut t = guide_template();
    t.spec.defaults.args = Some(vec!["{{ dataPath }}".into()]);
    assert!(
        validate(&t.spec)
            .unwrap_err()
            .message
            .contains("must be {{ .name }}")
    );
    t.spec.defaults.args = Some(vec!["{{ .dataPath".into()]);
    assert!(validate(&t.spec).unwrap_err().message.contains("unclosed"));
}

fn priority(value: i32, policy: &str) -> GryviaPriority {
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
        "metadata": {"name": "high", "generation": 1},
        "spec": {"value": value, "preemptionPolicy": policy, "description": "urgent"}
    }))
    .unwrap()
}

#[test]
fn a_priority_makes_a_priority_class_of_the_same_name() {
    let plan =
        PriorityReconciler.reconcile(&priority(1000, "Never"), &PriorityWorld::default(), now());
    let pc = &plan.apply[0].object;
    assert_eq!(pc["kind"], "PriorityClass");
    assert_eq!(pc["metadata"]["name"], "high");
    assert_eq!(pc["value"], 1000);
    assert_eq!(pc["preemptionPolicy"], "Never");
    assert_eq!(pc["globalDefault"], false);
    let s = plan.status.unwrap();
    assert_eq!(s.priority_class_name.as_deref(), Some("high"));
    assert_eq!(s.conditions[0].status, "True");
}

#[test]
fn a_changed_value_replaces_the_immutable_priority_class() {
    let w = PriorityWorld {
        class: Some(ObservedClass {
            value: 10,
            preemption_policy: "PreemptLowerPriority".into(),
            managed: true,
        }),
        ..PriorityWorld::default()
    };
    let plan = PriorityReconciler.reconcile(&priority(1000, "PreemptLowerPriority"), &w, now());
    assert!(plan.apply.is_empty());
    assert_eq!(
        plan.delete,
        vec![ObjectRef::cluster(
            "scheduling.k8s.io/v1",
            "PriorityClass",
            "high"
        )]
    );
    assert!(plan.requeue_after_ms.is_some());
}

#[test]
fn a_priority_class_someone_else_made_is_reported_not_touched() {
    let w = PriorityWorld {
        class: Some(ObservedClass {
            value: 1000,
            preemption_policy: "Never".into(),
            managed: false,
        }),
        ..PriorityWorld::default()
    };
    let plan = PriorityReconciler.reconcile(&priority(1000, "Never"), &w, now());
    assert!(plan.apply.is_empty() && plan.delete.is_empty());
    assert_eq!(
        plan.status.unwrap().conditions[0].reason,
        "PriorityClassConflict"
    );
}

#[test]
fn a_tier_with_an_sla_counts_its_jobs_outcomes() {
    use gryvia_reconcile::priority::sla_counts;
    let outcome = |name: &str, tier: &str, breached: Option<&str>| -> gryvia_types::GryviaAIJob {
        let mut j = gryvia_types::testing::ai_job("ns", name, "img");
        j.metadata.annotations = Some(BTreeMap::from([(
            "gryvia.io/priority-class".to_owned(),
            tier.to_owned(),
        )]));
        if let Some(s) = breached {
            j.status = Some(
                serde_json::from_value(serde_json::json!({"conditions": [{
                "type": "SLABreached", "status": s, "reason": "r", "message": "m",
                "lastTransitionTime": "2026-12-03T00:00:00Z"}]}))
                .unwrap(),
            );
        }
        j
    };
    let jobs = [
        outcome("a", "high", Some("True")),
        outcome("b", "high", Some("False")),
        outcome("c", "high", None),
        outcome("d", "low", Some("True")),
    ];
    assert_eq!(sla_counts("high", &jobs), (2, 1));
    let mut p = priority(1000, "Never");
    let w = PriorityWorld {
        sla: (2, 1),
        ..PriorityWorld::default()
    };
    let s = PriorityReconciler.reconcile(&p, &w, now()).status.unwrap();
    assert_eq!(
        (s.sla_jobs, s.sla_breaches),
        (None, None),
        "no SLA, no counts"
    );
    p.spec.sla = Some(gryvia_types::PrioritySla {
        max_queue_seconds: 60,
    });
    let s = PriorityReconciler.reconcile(&p, &w, now()).status.unwrap();
    assert_eq!((s.sla_jobs, s.sla_breaches), (Some(2), Some(1)));
}
