//! The generated schemas against real objects: the features guide's examples and a valid
//! object of every kind are accepted and decode into the typed structs; invalid objects are
//! rejected with messages that name the field; `deploy/crds/` is up to date.

#![expect(
    clippy::unwrap_used,
    reason = "fixture helpers panic on broken fixtures"
)]

use std::path::Path;

use gryvia_types::validation::{Validator, parse_yaml_documents};
use serde_json::Value;

fn load(rel: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_yaml_documents(&text).unwrap()
}

fn validator() -> Validator {
    Validator::new().unwrap()
}

fn reject(v: &Validator, yaml: &str) -> String {
    let doc = parse_yaml_documents(yaml).unwrap().remove(0);
    match v.validate(&doc) {
        Ok(()) => panic!("accepted an invalid object:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_guide_example_validates_and_decodes() {
    let v = validator();
    for file in ["healthcheck", "reservation", "tenant", "template", "budget"] {
        let docs = load(&format!("guide/{file}.yaml"));
        assert_eq!(docs.len(), 1, "{file}");
        v.validate(&docs[0])
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let hc: gryvia_types::GryviaHealthCheck = v.decode(&load("guide/healthcheck.yaml")[0]).unwrap();
    assert_eq!(hc.spec.checks.len(), 2);
    assert_eq!(
        hc.spec.checks[1].type_,
        gryvia_types::CheckType::GpuEccErrors
    );
    assert_eq!(hc.spec.checks[1].threshold.max, Some(0.0));
    assert!(hc.spec.on_failure.auto_remediate);
    assert_eq!(
        hc.spec.on_failure.consecutive_failures, 3,
        "flap damping default"
    );
    let r: gryvia_types::GryviaReservation = v.decode(&load("guide/reservation.yaml")[0]).unwrap();
    assert_eq!(r.spec.resources.gpu_count, 32);
    assert_eq!(r.spec.billing.unwrap().discount, 15);
    let t: gryvia_types::GryviaTenant = v.decode(&load("guide/tenant.yaml")[0]).unwrap();
    let q = t.spec.quotas.unwrap();
    assert_eq!(q.concurrent_gpus, Some(128));
    assert_eq!(q.cost_usd.unwrap().monthly, Some(50000));
    assert_eq!(t.spec.storage_quotas["datasets"].0, "100Ti");
    assert_eq!(t.spec.deletion_policy, gryvia_types::DeletionPolicy::Retain);
    let tpl: gryvia_types::GryviaTemplate = v.decode(&load("guide/template.yaml")[0]).unwrap();
    assert_eq!(tpl.spec.defaults.resources.unwrap().gpu_count, Some(8));
    assert_eq!(tpl.spec.parameters[1].default.as_deref(), Some("32"));
    let b: gryvia_types::GryviaBudget = v.decode(&load("guide/budget.yaml")[0]).unwrap();
    assert_eq!(
        b.spec.alerts[1].actions,
        vec![
            gryvia_types::AlertAction::Block,
            gryvia_types::AlertAction::Email
        ]
    );
}

#[test]
fn a_valid_object_of_every_kind_validates() {
    let v = validator();
    let docs = load("valid/all.yaml");
    let mut kinds: Vec<String> = docs
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    for file in ["healthcheck", "reservation", "tenant", "template", "budget"] {
        kinds.push(
            load(&format!("guide/{file}.yaml"))[0]["kind"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    kinds.sort();
    assert_eq!(
        kinds,
        gryvia_types::crds::kinds(),
        "one valid fixture per kind"
    );
    for doc in &docs {
        v.validate(doc).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn priority_over_100_is_rejected_naming_the_field() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {name: j, namespace: d}\nspec: {image: x, priority: 101}",
    );
    assert!(
        err.contains("spec.priority: Invalid value: 101: must be less than or equal to 100"),
        "{err}"
    );
}

#[test]
fn negative_gpu_count_is_rejected_naming_the_field() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata: {name: j, namespace: d}\nspec: {image: x, gpus: -1}",
    );
    assert!(err.contains("spec.gpus: Invalid value: -1"), "{err}");
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaReservation\nmetadata: {name: r}\nspec: {owner: {type: team, name: a}, resources: {gpuType: A, gpuCount: -4}, schedule: {type: immediate, endTime: '2030-01-01T00:00:00Z'}}",
    );
    assert!(err.contains("spec.resources.gpuCount"), "{err}");
}

#[test]
fn unknown_health_check_type_is_rejected_with_the_supported_values() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaHealthCheck\nmetadata: {name: h}\nspec: {target: {type: cluster}, schedule: '*/5 * * * *', checks: [{name: v, type: gpu-voltage}]}",
    );
    assert!(
        err.contains("spec.checks[0].type: Unsupported value: \"gpu-voltage\""),
        "{err}"
    );
    assert!(err.contains("\"gpu-ecc-errors\""), "{err}");
}

#[test]
fn template_without_category_is_rejected() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaTemplate\nmetadata: {name: t}\nspec: {defaults: {image: x}}",
    );
    assert!(err.contains("spec.category: Required value"), "{err}");
}

#[test]
fn budget_alert_threshold_over_1000_is_rejected() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaBudget\nmetadata: {name: b}\nspec: {scope: {type: team, name: a}, period: {type: monthly}, limits: {costUSD: 10}, alerts: [{threshold: 1001}]}",
    );
    assert!(
        err.contains(
            "spec.alerts[0].threshold: Invalid value: 1001: must be less than or equal to 1000"
        ),
        "{err}"
    );
}

#[test]
fn a_budget_email_recipient_that_is_not_an_address_is_rejected() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaBudget\nmetadata: {name: b}\nspec: {scope: {type: team, name: a}, period: {type: monthly}, limits: {costUSD: 10}, emailRecipients: [finance]}",
    );
    assert!(
        err.contains("spec.emailRecipients[0]: Invalid value: \"finance\""),
        "{err}"
    );
}

#[test]
fn an_invoice_webhook_over_http_needs_allow_insecure() {
    let v = validator();
    let doc = |extra: &str| {
        format!(
            "apiVersion: gryvia.io/v1alpha1\nkind: GryviaInvoice\nmetadata: {{name: i}}\nspec: {{tenant: ml, periodStart: '2026-11-01T00:00:00Z', periodEnd: '2026-12-01T00:00:00Z', webhook: {{url: 'http://billing.local/in', secretRef: {{name: s, key: k}}{extra}}}}}"
        )
    };
    let err = reject(&v, &doc(""));
    assert!(
        err.contains("webhook.url must be https:// unless webhook.allowInsecure is true"),
        "{err}"
    );
    let ok = parse_yaml_documents(&doc(", allowInsecure: true")).unwrap();
    v.validate(&ok[0]).unwrap();
}

#[test]
fn cross_field_rules_are_enforced_with_their_messages() {
    let v = validator();
    let docs = load("invalid/cases.yaml");
    assert!(docs.len() >= 20, "{} cases", docs.len());
    for doc in docs {
        let expected = doc["metadata"]["annotations"]["test.gryvia.io/expect"]
            .as_str()
            .unwrap()
            .to_owned();
        let err = match v.validate(&doc) {
            Ok(()) => panic!("accepted an invalid object: {doc}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&expected), "expected {expected:?} in {err:?}");
    }
}

#[test]
fn unknown_fields_are_reported_like_kubectl_strict_validation() {
    let err = reject(
        &validator(),
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaTenant\nmetadata: {name: t}\nspec: {displayName: T, quotas: {concurentGPUs: 4}}",
    );
    assert!(
        err.contains("spec.quotas.concurentGPUs: unknown field"),
        "{err}"
    );
}

#[test]
fn wrong_api_version_and_kind_are_named() {
    let v = validator();
    let err = reject(
        &v,
        "apiVersion: gryvia.io/v1\nkind: GryviaTenant\nmetadata: {name: t}\nspec: {displayName: T}",
    );
    assert!(
        err.contains("apiVersion: must be \"gryvia.io/v1alpha1\""),
        "{err}"
    );
    let err = reject(
        &v,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaNope\nmetadata: {name: t}\nspec: {}",
    );
    assert!(
        err.contains("kind: \"GryviaNope\" is not a Gryvia kind"),
        "{err}"
    );
}

#[test]
fn closed_usage_records_are_immutable() {
    let v = validator();
    let old = &load("valid/all.yaml")
        .into_iter()
        .find(|d| d["kind"] == "GryviaUsageRecord")
        .unwrap();
    let mut new = old.clone();
    new["spec"]["gpuCount"] = Value::from(1);
    let err = v.validate_update(&new, Some(old)).unwrap_err().to_string();
    assert!(err.contains("a closed usage record is immutable"), "{err}");
    v.validate_update(old, Some(old)).unwrap();
}

/// The template defaults are the job spec with every field optional (plus the older
/// `resources` alias): the two can never drift apart.
#[test]
fn template_defaults_have_the_shape_of_the_job_spec() {
    let job = gryvia_types::crds::by_kind("GryviaAIJob").unwrap();
    let tpl = gryvia_types::crds::by_kind("GryviaTemplate").unwrap();
    let props = |crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition, path: &[&str]| {
        let mut s = serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap()).unwrap();
        for p in path {
            s = s["properties"][p].clone();
        }
        let mut keys: Vec<String> = s["properties"].as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let job_fields = props(&job, &["spec"]);
    let mut default_fields = props(&tpl, &["spec", "defaults"]);
    default_fields.retain(|k| k != "resources");
    let mut job_fields_without_ref = job_fields.clone();
    job_fields_without_ref.retain(|k| k != "templateRef");
    assert_eq!(default_fields, job_fields_without_ref);
}

#[test]
fn deploy_crds_are_up_to_date() {
    // deploy/crds for kubectl, and the Helm chart's crds/ (Helm installs those before the rest).
    for rel in ["deploy/crds", "deploy/helm/gryvia/crds"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
        let mut expected_files = Vec::new();
        for crd in gryvia_types::crds::all() {
            let name = gryvia_types::crds::file_name(&crd);
            let want = gryvia_types::crds::to_yaml(&crd).unwrap();
            let have = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                have == want,
                "{rel}/{name} is stale: run `cargo run -p gryvia-cli -- crds --out-dir {rel} --reference-dir docs/reference`"
            );
            expected_files.push(name);
        }
        let mut present: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        present.sort();
        expected_files.sort();
        assert_eq!(
            present, expected_files,
            "{rel}/ holds files no kind generates"
        );
    }
}

#[test]
fn the_crd_reference_is_up_to_date() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference");
    let mut expected = Vec::new();
    for (name, want) in gryvia_types::reference::pages() {
        let have = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
        assert!(
            have == want,
            "docs/reference/{name} is stale: run `cargo run -p gryvia-cli -- crds --out-dir deploy/crds --reference-dir docs/reference`"
        );
        expected.push(name);
    }
    let mut present: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    present.sort();
    expected.sort();
    assert_eq!(
        present, expected,
        "docs/reference/ holds files no kind generates"
    );
}

#[test]
fn the_platform_admin_role_names_every_kind_and_no_role_uses_a_wildcard() {
    // deploy/user-roles.yaml is rendered from the chart: ClusterRole gryvia-platform-admin must
    // list every Gryvia kind by name (a new kind is not an admin's until it is added), and no
    // role under deploy/ may grant "*".
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("deploy/user-roles.yaml")).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let admin = docs
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "gryvia-platform-admin")
        .expect("deploy/user-roles.yaml has the ClusterRole gryvia-platform-admin");
    let granted: Vec<&str> = admin["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["apiGroups"][0] == "gryvia.io")
        .flat_map(|r| r["resources"].as_array().unwrap().iter())
        .filter_map(Value::as_str)
        .collect();
    for crd in gryvia_types::crds::all() {
        let plural = &crd.spec.names.plural;
        assert!(
            granted.contains(&plural.as_str()),
            "gryvia-platform-admin does not name {plural}: add it in deploy/helm/gryvia/templates/user-roles.yaml"
        );
    }
    for dir in ["deploy"] {
        for entry in walk(&root.join(dir)) {
            let text = std::fs::read_to_string(&entry).unwrap();
            for line in text.lines().filter(|l| {
                l.trim_start().starts_with("resources:") || l.trim_start().starts_with("verbs:")
            }) {
                assert!(
                    !line.contains("\"*\"") && !line.contains("['*']") && !line.contains("[*]"),
                    "{} grants a wildcard: {line}",
                    entry.display()
                );
            }
        }
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "yaml") {
            out.push(p);
        }
    }
    out
}
