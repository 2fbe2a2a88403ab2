//! Priority tiers: a GryviaPriority makes a Kubernetes PriorityClass of the same name, as a
//! pure function. Jobs annotated `gryvia.io/priority-class: <name>` run their pods with it
//! (see [`crate::aijob`]), and the scheduler preempts by it.

use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::{GryviaPriority, GryviaPriorityStatus, PreemptionPolicy, labels};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{Child, EventType, ObjectRef, Plan, Timestamp};

/// A PriorityClass as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedClass {
    /// `value`.
    pub value: i32,
    /// `preemptionPolicy`.
    pub preemption_policy: String,
    /// Whether it carries Gryvia's managed-by label (else someone else made it).
    pub managed: bool,
}

/// What the priority reconcile knows: the PriorityClass of the same name, when it exists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PriorityWorld {
    /// The existing PriorityClass.
    pub class: Option<ObservedClass>,
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
            Some(c) if c.value != prio.spec.value || c.preemption_policy != policy => {
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
                let mut pc = json!({
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name, "labels": {labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
                    "value": prio.spec.value,
                    "preemptionPolicy": policy,
                    "globalDefault": false,
                });
                if let Some(d) = &prio.spec.description {
                    pc["description"] = d.clone().into();
                }
                if let Ok(child) = Child::from_json(pc) {
                    plan.apply_child(child);
                }
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
        plan.set_status_if_changed(prio.status.as_ref(), status);
        plan
    }
}
