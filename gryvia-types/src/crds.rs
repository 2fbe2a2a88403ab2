//! Generation of the CustomResourceDefinitions of every Gryvia kind.
//!
//! `deploy/crds/` holds the output of [`to_yaml`] per CRD (one file each, named by
//! [`file_name`]); a test fails when those files are stale.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::core::CustomResourceExt;

use crate::{Error, Result};

/// Every Gryvia CRD, sorted by kind.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        crate::GryviaAIJob::crd(),
        crate::GryviaAutoPolicy::crd(),
        crate::GryviaAutoTuner::crd(),
        crate::GryviaBudget::crd(),
        crate::GryviaCollectorConfig::crd(),
        crate::GryviaFabricSignal::crd(),
        crate::GryviaFlowAggregate::crd(),
        crate::GryviaFlowPolicy::crd(),
        crate::GryviaGpuNode::crd(),
        crate::GryviaGpuSku::crd(),
        crate::GryviaHealthCheck::crd(),
        crate::GryviaInferenceService::crd(),
        crate::GryviaInvoice::crd(),
        crate::GryviaJobHook::crd(),
        crate::GryviaModelRegistry::crd(),
        crate::GryviaNetwork::crd(),
        crate::GryviaNetworkAnomaly::crd(),
        crate::GryviaNetworkBaseline::crd(),
        crate::GryviaNetworkCost::crd(),
        crate::GryviaPriority::crd(),
        crate::GryviaQueue::crd(),
        crate::GryviaQuota::crd(),
        crate::GryviaReservation::crd(),
        crate::GryviaServiceGraph::crd(),
        crate::GryviaStorage::crd(),
        crate::GryviaTemplate::crd(),
        crate::GryviaTenant::crd(),
        crate::GryviaTrainingInsight::crd(),
        crate::GryviaUsageRecord::crd(),
        crate::GryviaWorkflow::crd(),
        crate::GryviaWorkspace::crd(),
    ];
    crds.sort_by(|a, b| a.spec.names.kind.cmp(&b.spec.names.kind));
    for crd in &mut crds {
        let labels = crd.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(PART_OF_LABEL.to_owned(), PART_OF.to_owned());
        labels.insert(VERSION_LABEL.to_owned(), RELEASE.to_owned());
    }
    crds
}

/// The label every Gryvia CRD carries, with [`PART_OF`] as its value.
pub const PART_OF_LABEL: &str = "app.kubernetes.io/part-of";
/// The value of [`PART_OF_LABEL`].
pub const PART_OF: &str = "gryvia";
/// The label selector of the Gryvia CRDs.
pub const PART_OF_SELECTOR: &str = "app.kubernetes.io/part-of=gryvia";
/// The label with the Gryvia release that wrote a CRD.
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";
/// This release of Gryvia (the workspace version).
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// One line on the Gryvia CRDs a cluster has (`installed`, read with [`PART_OF_SELECTOR`]),
/// against this release's: their release label(s), how many of this release's kinds are there
/// and Established, which are missing, and kinds this release does not know.
pub fn installed_report(installed: &[CustomResourceDefinition]) -> String {
    use std::collections::BTreeSet;
    let ours: BTreeSet<String> = all().into_iter().filter_map(|c| c.metadata.name).collect();
    let mut releases = BTreeSet::new();
    let (mut present, mut established, mut unknown) = (BTreeSet::new(), 0usize, Vec::new());
    for crd in installed {
        let Some(name) = crd.metadata.name.clone() else {
            continue;
        };
        if let Some(v) = crd
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(VERSION_LABEL))
        {
            releases.insert(v.clone());
        }
        let is_established = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if ours.contains(&name) {
            established += usize::from(is_established);
            present.insert(name);
        } else {
            unknown.push(name);
        }
    }
    if present.is_empty() && unknown.is_empty() {
        return format!(
            "none installed (this client's release {RELEASE} has {}; run gryvia install)",
            ours.len()
        );
    }
    let releases: Vec<String> = releases.into_iter().collect();
    let mut line = format!(
        "gryvia {} ({} of {} kinds installed, {established} Established, group gryvia.io/{})",
        if releases.is_empty() {
            "unlabelled".to_owned()
        } else {
            releases.join(", ")
        },
        present.len(),
        ours.len(),
        crate::VERSION
    );
    let missing: Vec<&String> = ours.difference(&present).collect();
    if !missing.is_empty() {
        line.push_str(&format!(
            "; missing: {}",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !unknown.is_empty() {
        line.push_str(&format!("; unknown to this client: {}", unknown.join(", ")));
    }
    if releases.iter().any(|r| r != RELEASE) {
        line.push_str(&format!("; this client is {RELEASE}: run gryvia install"));
    }
    line
}

/// Every Gryvia kind name, sorted.
pub fn kinds() -> Vec<String> {
    all().into_iter().map(|c| c.spec.names.kind).collect()
}

/// The CRD of `kind`.
///
/// # Errors
/// [`Error::UnknownKind`] when `kind` is not a Gryvia kind.
pub fn by_kind(kind: &str) -> Result<CustomResourceDefinition> {
    all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .ok_or_else(|| Error::UnknownKind(kind.to_owned()))
}

/// The file name of a CRD in `deploy/crds/`: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!(
        "{}.yaml",
        crd.metadata
            .name
            .as_deref()
            .unwrap_or(&crd.spec.names.plural)
    )
}

/// One CRD as a YAML document (without the leading `---`).
///
/// # Errors
/// [`Error::Yaml`] when serialization fails.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String> {
    serde_saphyr::to_string(crd).map_err(|e| Error::Yaml(e.to_string()))
}

/// Every CRD as one multi-document YAML stream, for `gryvia crds | kubectl apply -f -`.
///
/// # Errors
/// [`Error::Yaml`] when serialization fails.
pub fn all_yaml() -> Result<String> {
    let mut out = String::new();
    for crd in all() {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Calls `$m!($args; <every Gryvia kind>)`: one list of the kinds for the typed dispatches.
macro_rules! with_kinds {
    ($m:ident!($($args:tt)*)) => {
        $m!($($args)*;
            GryviaAIJob, GryviaAutoPolicy, GryviaAutoTuner, GryviaBudget, GryviaCollectorConfig,
            GryviaFabricSignal, GryviaFlowAggregate, GryviaFlowPolicy, GryviaGpuNode, GryviaGpuSku,
            GryviaHealthCheck, GryviaInferenceService, GryviaInvoice, GryviaJobHook,
            GryviaModelRegistry, GryviaNetwork, GryviaNetworkAnomaly, GryviaNetworkBaseline,
            GryviaNetworkCost, GryviaPriority, GryviaQueue, GryviaQuota, GryviaReservation,
            GryviaServiceGraph, GryviaStorage, GryviaTemplate, GryviaTenant, GryviaTrainingInsight,
            GryviaUsageRecord, GryviaWorkflow, GryviaWorkspace)
    };
}

/// `value` as a `T`; an error names the field's path after `prefix`.
fn decode<T: serde::de::DeserializeOwned>(value: serde_json::Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Error::Decode {
            path: match (prefix.is_empty(), path.as_str()) {
                (true, _) => path.clone(),
                (false, ".") => prefix.to_owned(),
                (false, _) => format!("{prefix}.{path}"),
            },
            reason: e.into_inner().to_string(),
        }
    })
}

/// Decodes `value` through the typed struct of its `kind` and writes it back: the object as
/// Gryvia's own types see it (defaults filled in, fields the types do not know dropped). This
/// is the typed decode of objects that come from the API server (already validated there) and
/// the last step of client-side normalization.
///
/// # Errors
/// [`Error::UnknownKind`] when `kind` is missing or not a Gryvia kind; [`Error::Json`] when
/// the object does not fit its type (the message names the field).
pub fn typed_value(value: serde_json::Value) -> Result<serde_json::Value> {
    macro_rules! by_kind {
        ($kind:expr, $value:expr; $($t:ident),* $(,)?) => {
            match $kind {
                $(stringify!($t) => Ok(serde_json::to_value(decode::<crate::$t>($value, "")?)?),)*
                other => Err(Error::UnknownKind(other.to_owned())),
            }
        };
    }
    let kind = value
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    with_kinds!(by_kind!(kind.as_str(), value))
}

/// Decodes the JSON body of a list response (`{"kind": "GryviaAIJobList", "items": [...]}`)
/// straight into the typed structs of its kind and writes each item back as a value, as
/// [`typed_value`] does for one object. Item `i` that does not fit names itself
/// (`items[i]...` in the serde path).
///
/// # Errors
/// [`Error::UnknownKind`] when the list's kind is missing or not a list of a Gryvia kind;
/// [`Error::Json`] when the body is not JSON or an item does not fit its type.
pub fn typed_list(body: &[u8]) -> Result<Vec<serde_json::Value>> {
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(default)]
        kind: String,
    }
    fn fast<T: serde::de::DeserializeOwned + serde::Serialize>(
        body: &[u8],
        kind: &str,
    ) -> Result<Vec<serde_json::Value>> {
        #[derive(serde::Deserialize)]
        struct List<T> {
            #[serde(default = "Vec::new")]
            items: Vec<T>,
        }
        let list: List<T> = serde_json::from_slice(body)?;
        list.items
            .iter()
            .map(|item| {
                let mut v = serde_json::to_value(item)?;
                if let serde_json::Value::Object(m) = &mut v {
                    // kube's derived types write apiVersion and kind themselves; this keeps
                    // them whatever the list carried.
                    m.entry("apiVersion")
                        .or_insert_with(|| crate::API_VERSION.into());
                    m.entry("kind").or_insert_with(|| kind.into());
                }
                Ok(v)
            })
            .collect()
    }
    macro_rules! by_kind {
        ($kind:expr; $($t:ident),* $(,)?) => {
            match $kind {
                $(stringify!($t) => fast::<crate::$t>(body, stringify!($t)),)*
                other => Err(Error::UnknownKind(other.to_owned())),
            }
        };
    }
    let peek: Peek = serde_json::from_slice(body)?;
    let kind = peek.kind.strip_suffix("List").unwrap_or_default();
    let fast: Result<Vec<serde_json::Value>> = with_kinds!(by_kind!(kind));
    match fast {
        Err(Error::Json(_)) => Err(locate(body, kind)),
        other => other,
    }
}

/// The error of the first item of a list body that does not fit `kind`, naming its index and
/// field (the slow path, taken only when the typed decode failed).
fn locate(body: &[u8], kind: &str) -> Error {
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(default)]
        items: Vec<serde_json::Value>,
    }
    let list: List = match serde_json::from_slice(body) {
        Ok(l) => l,
        Err(e) => return Error::Json(e),
    };
    for (i, mut item) in list.items.into_iter().enumerate() {
        if let serde_json::Value::Object(m) = &mut item {
            m.entry("kind").or_insert_with(|| kind.into());
        }
        if let Err(e) = typed_value(item) {
            return match e {
                Error::Decode { path, reason } => Error::Decode {
                    path: format!("items[{i}].{path}"),
                    reason,
                },
                other => other,
            };
        }
    }
    Error::Decode {
        path: "items".to_owned(),
        reason: "an item does not fit its type".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn established(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
            CustomResourceDefinitionCondition, CustomResourceDefinitionStatus,
        };
        crd.status = Some(CustomResourceDefinitionStatus {
            conditions: Some(vec![CustomResourceDefinitionCondition {
                type_: "Established".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        crd
    }

    #[test]
    fn every_crd_is_labelled_with_the_release_and_the_report_counts_what_is_there() {
        let crds: Vec<_> = all().into_iter().map(established).collect();
        for crd in &crds {
            let labels = crd.metadata.labels.clone().unwrap_or_default();
            assert_eq!(labels.get(PART_OF_LABEL).map(String::as_str), Some(PART_OF));
            assert_eq!(labels.get(VERSION_LABEL).map(String::as_str), Some(RELEASE));
        }
        assert_eq!(
            installed_report(&crds),
            format!(
                "gryvia {RELEASE} (31 of 31 kinds installed, 31 Established, group gryvia.io/v1alpha1)"
            )
        );
        assert!(installed_report(&[]).starts_with("none installed"));

        // An older release, one kind missing, one not Established, one this client does not know.
        let mut old: Vec<_> = crds[1..].to_vec();
        old[0].status = None;
        for crd in &mut old {
            crd.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(VERSION_LABEL.into(), "0.0.9".into());
        }
        let mut gone = old[1].clone();
        gone.metadata.name = Some("gryviaretired.gryvia.io".into());
        old.push(gone);
        let line = installed_report(&old);
        assert!(
            line.starts_with("gryvia 0.0.9 (30 of 31 kinds installed, 29 Established"),
            "{line}"
        );
        assert!(line.contains("missing: gryviaaijobs.gryvia.io"), "{line}");
        assert!(
            line.contains("unknown to this client: gryviaretired.gryvia.io"),
            "{line}"
        );
        assert!(
            line.ends_with(&format!("this client is {RELEASE}: run gryvia install")),
            "{line}"
        );
    }

    #[test]
    fn every_kind_is_in_group_gryvia_and_category_gryvia() {
        let crds = all();
        assert_eq!(crds.len(), 31);
        for crd in &crds {
            assert_eq!(crd.spec.group, crate::GROUP);
            assert_eq!(crd.spec.versions.len(), 1);
            assert_eq!(crd.spec.versions[0].name, crate::VERSION);
            let cats = crd.spec.names.categories.clone().unwrap_or_default();
            assert_eq!(
                cats,
                vec![crate::CATEGORY.to_owned()],
                "{}",
                crd.spec.names.kind
            );
            assert!(
                crd.spec
                    .names
                    .short_names
                    .as_ref()
                    .is_some_and(|s| !s.is_empty()),
                "{} has no short name",
                crd.spec.names.kind
            );
        }
    }

    #[test]
    fn short_names_are_unique() {
        let mut names: Vec<String> = all()
            .into_iter()
            .flat_map(|c| c.spec.names.short_names.unwrap_or_default())
            .collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn unknown_kind_is_an_error_naming_it() {
        let err = by_kind("Deployment").unwrap_err().to_string();
        assert!(err.contains("Deployment"), "{err}");
    }

    #[test]
    fn typed_value_decodes_every_kind_and_refuses_others() {
        for kind in kinds() {
            let v = serde_json::json!({"apiVersion": crate::API_VERSION, "kind": kind,
                "metadata": {"name": "x"}, "spec": {}});
            // Every kind decodes or names the field it misses; none is unknown.
            if let Err(e) = typed_value(v) {
                assert!(matches!(e, Error::Decode { .. }), "{kind}: {e}");
            }
        }
        let job = serde_json::json!({"apiVersion": crate::API_VERSION, "kind": "GryviaAIJob",
            "metadata": {"name": "j"}, "spec": {"image": "i", "gpus": 1}, "extra": 1});
        let out = typed_value(job).unwrap();
        assert_eq!(out["spec"]["retryLimit"], 3);
        assert!(out.get("extra").is_none());
        let err = typed_value(serde_json::json!({"kind": "Pod"})).unwrap_err();
        assert!(matches!(err, Error::UnknownKind(k) if k == "Pod"));
    }

    #[test]
    fn typed_list_decodes_items_of_the_list_kind() {
        let body = serde_json::json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJobList",
            "metadata": {}, "items": [
                {"metadata": {"name": "a"}, "spec": {"image": "i", "gpus": 1}},
                {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                 "metadata": {"name": "b"}, "spec": {"image": "i", "gpus": 2}}]});
        let items = typed_list(body.to_string().as_bytes()).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0]["kind"], "GryviaAIJob");
        assert_eq!(items[0]["spec"]["retryLimit"], 3);
        assert_eq!(items[1]["metadata"]["name"], "b");
        let bad = serde_json::json!({"kind": "GryviaAIJobList", "items": [{"metadata": {}, "spec": {"gpus": "x"}}]});
        let err = typed_list(bad.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("items[0].spec.gpus: invalid type"),
            "{err}"
        );
        let pods = serde_json::json!({"kind": "PodList", "items": []});
        assert!(matches!(
            typed_list(pods.to_string().as_bytes()),
            Err(Error::UnknownKind(_))
        ));
    }
}
