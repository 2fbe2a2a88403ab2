//! Priority tiers: a GryviaPriority makes a Kubernetes PriorityClass of the same name, as a
//! pure function. Jobs annotated `gryvia.io/priority-class: <name>` run their pods with it
//! (see [`crate::aijob`]), and the scheduler preempts by it.

use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use std::collections::BTreeMap;
use std::fmt;

use gryvia_types::{GryviaPriority, GryviaPriorityStatus, PreemptionPolicy, labels};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::{Child, EventType, ObjectRef, Plan, Timestamp};

/// A PriorityClass's `preemptionPolicy`, as observed. It (de)serializes as the string
/// Kubernetes uses, so a world written as JSON reads as before.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Preemption {
    /// `PreemptLowerPriority` (the Kubernetes default).
    PreemptLowerPriority,
    /// `Never`.
    Never,
    /// A policy this version does not know.
    Other(String),
}

impl Preemption {
    /// The policy as Kubernetes writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Preemption::PreemptLowerPriority => "PreemptLowerPriority",
            Preemption::Never => "Never",
            Preemption::Other(s) => s,
        }
    }
}

impl From<&str> for Preemption {
    fn from(text: &str) -> Self {
        match text {
            "PreemptLowerPriority" => Preemption::PreemptLowerPriority,
            "Never" => Preemption::Never,
            other => Preemption::Other(other.to_owned()),
        }
    }
}

impl From<String> for Preemption {
    fn from(text: String) -> Self {
        Preemption::from(text.as_str())
    }
}

impl From<Preemption> for String {
    fn from(p: Preemption) -> Self {
        p.as_str().to_owned()
    }
}

impl From<PreemptionPolicy> for Preemption {
    fn from(p: PreemptionPolicy) -> Self {
        match p {
            PreemptionPolicy::PreemptLowerPriority => Preemption::PreemptLowerPriority,
            PreemptionPolicy::Never => Preemption::Never,
        }
    }
}

impl fmt::Display for Preemption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A PriorityClass as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedClass {
    /// `value`.
    pub value: i32,
    /// `preemptionPolicy`.
    pub preemption_policy: Preemption,
    /// Whether it carries Gryvia's managed-by label (else someone else made it).
    pub managed: bool,
}

impl ObservedClass {
    /// Summarises a PriorityClass (without a `preemptionPolicy` it preempts, as Kubernetes
    /// defaults it).
    pub fn of(pc: &PriorityClass) -> Self {
        ObservedClass {
            value: pc.value,
            preemption_policy: pc
                .preemption_policy
                .as_deref()
                .map_or(Preemption::PreemptLowerPriority, Preemption::from),
            managed: pc
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::MANAGED_BY))
                .map(String::as_str)
                == Some(labels::MANAGED_BY_VALUE),
        }
    }
}

/// The PriorityClass of a GryviaPriority: same name, value and preemption policy, never the
/// global default.
pub fn priority_class(prio: &GryviaPriority) -> PriorityClass {
    PriorityClass {
        metadata: ObjectMeta {
            name: prio.metadata.name.clone(),
            labels: Some(BTreeMap::from([(
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_VALUE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        value: prio.spec.value,
        preemption_policy: Some(policy_name(prio.spec.preemption_policy).to_owned()),
        global_default: Some(false),
        description: prio.spec.description.clone(),
    }
}

/// What the priority reconcile knows: the PriorityClass of the same name, when it exists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityWorld {
    /// The existing PriorityClass.
    pub class: Option<ObservedClass>,
    /// The tier's jobs judged against its SLA (an `SLABreached` condition), and of those the
    /// breaches.
    #[serde(default)]
    pub sla: (i32, i32),
}

/// The jobs of `jobs` judged against the SLA of tier `name` (their `SLABreached` condition),
/// and of those the breaches.
pub fn sla_counts<'a>(
    name: &str,
    jobs: impl IntoIterator<Item = &'a gryvia_types::GryviaAIJob>,
) -> (i32, i32) {
    let mut out = (0, 0);
    for j in jobs {
        let tier = j
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::PRIORITY_CLASS));
        if tier.map(String::as_str) != Some(name) {
            continue;
        }
        let Some(c) = j
            .status
            .as_ref()
            .and_then(|s| conditions::find(&s.conditions, crate::aijob::SLA_BREACHED))
        else {
            continue;
        };
        out.0 += 1;
        if c.status == "True" {
            out.1 += 1;
        }
    }
    out
}

/// The string Kubernetes uses for a preemption policy.
pub fn policy_name(p: PreemptionPolicy) -> &'static str {
    match p {
        PreemptionPolicy::PreemptLowerPriority => "PreemptLowerPriority",
        PreemptionPolicy::Never => "Never",
    }
}

/// The GryviaPriority controller's policy.
#[derive(Clone, Debug, Default)]
pub struct PriorityReconciler;

impl crate::Reconcile for PriorityReconciler {
    type Object = GryviaPriority;
    type World = PriorityWorld;
    type Status = GryviaPriorityStatus;

    fn name(&self) -> &'static str {
        "gryvia-priorities"
    }

    fn reconcile(
        &self,
        prio: &GryviaPriority,
        world: &PriorityWorld,
        now: Timestamp,
    ) -> Plan<GryviaPriorityStatus> {
        let mut plan = Plan::new();
        let name = prio.metadata.name.clone().unwrap_or_default();
        let generation = prio.metadata.generation;
        let mut status = prio.status.clone().unwrap_or_default();
        let policy = policy_name(prio.spec.preemption_policy);
        let cond = match &world.class {
            Some(c) if !c.managed => {
                status.priority_class_name = None;
                conditions::new(
                    conditions::READY,
                    Status::False,
                    "PriorityClassConflict",
                    format!(
                        "a PriorityClass named {name} exists and was not made by Gryvia; delete it or rename the GryviaPriority"
                    ),
                    generation,
                    now,
                )
            }
            Some(c)
                if c.value != prio.spec.value
                    || c.preemption_policy != Preemption::from(prio.spec.preemption_policy) =>
            {
                // value and preemptionPolicy of a PriorityClass are immutable: replace it.
                // Running pods keep the priority they were admitted with.
                plan.delete.push(ObjectRef::cluster(
                    "scheduling.k8s.io/v1",
                    "PriorityClass",
                    &name,
                ));
                plan.requeue(Duration::from_secs(1));
                plan.event(
                    EventType::Normal,
                    "Replacing",
                    format!(
                        "PriorityClass {name} has value {} / {}; replacing it with {} / {policy}",
                        c.value, c.preemption_policy, prio.spec.value
                    ),
                );
                conditions::new(
                    conditions::READY,
                    Status::False,
                    "Replacing",
                    "replacing the PriorityClass (its value and preemption policy are immutable)",
                    generation,
                    now,
                )
            }
            _ => {
                plan.apply_built(Child::from_resource(&priority_class(prio)));
                status.priority_class_name = Some(name.clone());
                conditions::new(
                    conditions::READY,
                    Status::True,
                    conditions::REASON_RECONCILED,
                    format!(
                        "PriorityClass {name} has value {} and preemption policy {policy}",
                        prio.spec.value
                    ),
                    generation,
                    now,
                )
            }
        };
        conditions::set(&mut status.conditions, cond);
        let with_sla = prio.spec.sla.is_some();
        status.sla_jobs = with_sla.then_some(world.sla.0);
        status.sla_breaches = with_sla.then_some(world.sla.1);
        plan.set_status_if_changed(prio.status.as_ref(), status);
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prio(policy: PreemptionPolicy) -> GryviaPriority {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
            "metadata": {"name": "high"},
            "spec": {"value": 10, "preemptionPolicy": policy}
        }))
        .unwrap()
    }

    #[test]
    fn a_preemption_policy_reads_and_writes_as_kubernetes_names_it() {
        for text in ["PreemptLowerPriority", "Never", "Sometimes"] {
            let p = Preemption::from(text);
            assert_eq!(p.to_string(), text);
            assert_eq!(serde_json::to_value(&p).unwrap(), text);
            assert_eq!(
                serde_json::from_value::<Preemption>(text.into()).unwrap(),
                p
            );
        }
        assert_eq!(Preemption::from(PreemptionPolicy::Never), Preemption::Never);
    }

    #[test]
    fn an_observed_class_defaults_to_preempting_and_knows_whether_gryvia_made_it() {
        let mut pc = priority_class(&prio(PreemptionPolicy::Never));
        let o = ObservedClass::of(&pc);
        assert_eq!(
            (o.value, o.preemption_policy, o.managed),
            (10, Preemption::Never, true)
        );
        pc.preemption_policy = None;
        pc.metadata.labels = None;
        let o = ObservedClass::of(&pc);
        assert_eq!(o.preemption_policy, Preemption::PreemptLowerPriority);
        assert!(!o.managed);
    }

    #[test]
    fn the_priority_class_is_never_the_global_default() {
        let pc = priority_class(&prio(PreemptionPolicy::PreemptLowerPriority));
        assert_eq!(pc.global_default, Some(false));
        assert_eq!(
            pc.preemption_policy.as_deref(),
            Some("PreemptLowerPriority")
        );
        assert_eq!(pc.metadata.name.as_deref(), Some("high"));
    }
}
