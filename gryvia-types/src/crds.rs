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
    crds
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
