//! Manual maintenance of a node (`gryvia maintenance start|end`), as pure decisions: given
//! the node as read, what to write on it and what to tell the operator. The caller reads the
//! node, calls [`start`] or [`end`], and sends [`StartMaintenance::patch`] or
//! [`EndMaintenance::patch`] as a JSON merge patch.
//!
//! Starting annotates the node with the reason (`gryvia.io/maintenance`) and cordons it,
//! remembering in `gryvia.io/maintenance-cordoned` whether maintenance did the cordoning.
//! Ending removes both annotations and the `gryvia.io/gpu-unhealthy` taint (a human returning
//! a repaired node to service) and uncordons the node only when maintenance cordoned it.

use std::collections::BTreeMap;

use gryvia_types::labels;
use k8s_openapi::api::core::v1::{Node, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::facts;

/// What starting maintenance writes on a node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartMaintenance {
    /// The node was schedulable before (ending maintenance will uncordon it).
    pub was_schedulable: bool,
    /// Annotations to set: the reason, and whether maintenance cordoned the node (`"true"`
    /// also when an earlier start did).
    pub annotations: BTreeMap<String, String>,
    /// `spec.unschedulable` afterwards: always true.
    pub unschedulable: bool,
    /// What is done, one line each (`cordoned` or `was already cordoned`).
    pub done: Vec<String>,
}

impl StartMaintenance {
    /// The JSON merge patch that makes it so.
    pub fn patch(&self) -> Value {
        json!({
            "metadata": { "annotations": self.annotations },
            "spec": { "unschedulable": self.unschedulable }
        })
    }
}

/// Puts `node` into maintenance for `reason`.
pub fn start(node: &Node, reason: &str) -> StartMaintenance {
    let was_schedulable = !facts::cordoned(node);
    let already = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::MAINTENANCE_CORDONED))
        .is_some_and(|v| v == "true");
    let cordoned_by_us = if was_schedulable || already {
        "true"
    } else {
        "false"
    };
    StartMaintenance {
        was_schedulable,
        annotations: BTreeMap::from([
            (labels::MAINTENANCE.to_owned(), reason.to_owned()),
            (
                labels::MAINTENANCE_CORDONED.to_owned(),
                cordoned_by_us.to_owned(),
            ),
        ]),
        unschedulable: true,
        done: vec![if was_schedulable {
            "cordoned".to_owned()
        } else {
            "was already cordoned".to_owned()
        }],
    }
}

/// What ending maintenance writes on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndMaintenance {
    /// The `resourceVersion` the change is conditional on (the node as read).
    pub resource_version: Option<String>,
    /// Annotations to remove.
    pub remove_annotations: Vec<String>,
    /// The node's taints afterwards: all but `gryvia.io/gpu-unhealthy`.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` afterwards.
    pub unschedulable: bool,
    /// What is done, one line each (empty: nothing to undo).
    pub done: Vec<String>,
}

impl EndMaintenance {
    /// The JSON merge patch that makes it so (conditional on the `resourceVersion` read).
    pub fn patch(&self) -> Value {
        let annotations: serde_json::Map<String, Value> = self
            .remove_annotations
            .iter()
            .map(|k| (k.clone(), Value::Null))
            .collect();
        json!({
            "metadata": {
                "resourceVersion": self.resource_version,
                "annotations": annotations
            },
            "spec": { "taints": self.taints, "unschedulable": self.unschedulable }
        })
    }
}

/// Ends maintenance of `node`: the annotations go, the quarantine taint goes, and the node is
/// uncordoned when maintenance cordoned it (or when no annotation says otherwise).
pub fn end(node: &Node) -> EndMaintenance {
    let cordoned_by_us = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::MAINTENANCE_CORDONED))
        .is_none_or(|v| v == "true");
    let unschedulable = facts::cordoned(node);
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let before = taints.len();
    taints.retain(|t| t.key != labels::GPU_UNHEALTHY_TAINT);
    let mut done = Vec::new();
    if taints.len() != before {
        done.push(format!(
            "removed taint {}={}",
            labels::GPU_UNHEALTHY_TAINT,
            facts::quarantined_by(node).unwrap_or_default()
        ));
    }
    let uncordon = unschedulable && cordoned_by_us;
    if uncordon {
        done.push("uncordoned".to_owned());
    }
    EndMaintenance {
        resource_version: node.metadata.resource_version.clone(),
        remove_annotations: vec![
            labels::MAINTENANCE.to_owned(),
            labels::MAINTENANCE_CORDONED.to_owned(),
        ],
        taints,
        unschedulable: unschedulable && !uncordon,
        done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(v: Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn starting_cordons_a_schedulable_node_and_remembers_it() {
        let m = start(&node(json!({"metadata": {"name": "n"}})), "new PSU");
        assert!(m.was_schedulable);
        assert_eq!(m.done, vec!["cordoned"]);
        assert_eq!(
            m.patch(),
            json!({"metadata": {"annotations": {
                    labels::MAINTENANCE: "new PSU", labels::MAINTENANCE_CORDONED: "true"}},
                   "spec": {"unschedulable": true}})
        );
    }

    #[test]
    fn starting_on_a_cordoned_node_leaves_its_cordon_to_its_owner() {
        let cordoned = node(json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}));
        let m = start(&cordoned, "r");
        assert!(!m.was_schedulable);
        assert_eq!(m.done, vec!["was already cordoned"]);
        assert_eq!(m.annotations[labels::MAINTENANCE_CORDONED], "false");
        let again = node(json!({
            "metadata": {"name": "n", "annotations": {labels::MAINTENANCE_CORDONED: "true"}},
            "spec": {"unschedulable": true}}));
        assert_eq!(
            start(&again, "r").annotations[labels::MAINTENANCE_CORDONED],
            "true",
            "a second start keeps what the first one did"
        );
    }

    #[test]
    fn ending_removes_the_quarantine_and_uncordons_what_maintenance_cordoned() {
        let n = node(json!({
            "metadata": {"name": "n", "resourceVersion": "42",
                         "annotations": {labels::MAINTENANCE: "r", labels::MAINTENANCE_CORDONED: "true"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": labels::GPU_UNHEALTHY_TAINT, "value": "hc", "effect": "NoSchedule"},
                {"key": "other", "effect": "NoSchedule"}]}}));
        let m = end(&n);
        assert_eq!(
            m.done,
            vec!["removed taint gryvia.io/gpu-unhealthy=hc", "uncordoned"]
        );
        assert_eq!(
            m.patch(),
            json!({"metadata": {"resourceVersion": "42", "annotations": {
                    labels::MAINTENANCE: null, labels::MAINTENANCE_CORDONED: null}},
                   "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}],
                            "unschedulable": false}})
        );
    }

    #[test]
    fn ending_leaves_a_cordon_maintenance_did_not_make() {
        let n = node(json!({
            "metadata": {"name": "n", "annotations": {labels::MAINTENANCE_CORDONED: "false"}},
            "spec": {"unschedulable": true}}));
        let m = end(&n);
        assert!(m.unschedulable);
        assert!(m.done.is_empty());
        assert_eq!(m.patch()["spec"]["taints"], json!([]));
        assert_eq!(m.patch()["metadata"]["resourceVersion"], Value::Null);
    }
}
