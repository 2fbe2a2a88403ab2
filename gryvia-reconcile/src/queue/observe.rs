//! The cycle's world, read from the objects the controller watches: queues, jobs, priority
//! classes, nodes and pods. Pure, so what-if tools and tests build it the same way.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use gryvia_types::scheduling::{GryviaPriority, GryviaQueue};
use gryvia_types::{GryviaAIJob, JobAdmission, QueueStanding, labels};
use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use super::{JobInfo, NodeCapacity, QueueInfo, QueueWorld};
use crate::facts::{self, PodView};

/// The GryviaPriority a job names (`gryvia.io/priority-class`), when it exists.
pub fn tier_of<'a>(
    job: &GryviaAIJob,
    priorities: &'a [GryviaPriority],
) -> Option<&'a GryviaPriority> {
    let name = job
        .metadata
        .annotations
        .as_ref()?
        .get(labels::PRIORITY_CLASS)?;
    priorities
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name.as_str()))
}

/// The value of the GryviaPriority class a job names (`gryvia.io/priority-class`), 0 without
/// one or for a class that does not exist.
pub fn class_value(job: &GryviaAIJob, priorities: &[GryviaPriority]) -> i32 {
    tier_of(job, priorities).map_or(0, |p| p.spec.value)
}

fn live_on_node(pod: &impl PodView) -> Option<&str> {
    facts::pod_phase(pod)
        .is_live()
        .then(|| facts::node_of(pod))
        .flatten()
}

/// The (namespace, job name) a pod is a worker of.
fn worker_of(pod: &impl PodView) -> Option<(&str, &str)> {
    let meta = pod.pod_meta();
    let ns = meta.namespace.as_deref()?;
    let job = meta.labels.as_ref()?.get(labels::JOB_NAME)?;
    Some((ns, job.as_str()))
}

/// Builds the world of one cycle: every queue; every unfinished job of a namespace a queue
/// covers (but not one running workers without an admission: it started before its
/// namespace got a queue), and every job that still holds an admission (its queue may be
/// gone); every node that advertises GPUs, with what pods other than admitted jobs' workers
/// use there.
pub fn world_of(
    queues: &[impl Borrow<GryviaQueue>],
    jobs: &[impl Borrow<GryviaAIJob>],
    priorities: &[GryviaPriority],
    nodes: &[impl Borrow<Node>],
    pods: &[impl PodView],
) -> QueueWorld {
    let queues: Vec<QueueInfo> = queues.iter().map(|q| QueueInfo::of(q.borrow())).collect();
    let covered: BTreeSet<&str> = queues
        .iter()
        .flat_map(|q| q.namespaces.iter().map(String::as_str))
        .collect();
    let mut live: BTreeMap<(&str, &str), BTreeMap<String, u32>> = BTreeMap::new();
    for pod in pods {
        if let (Some(w), Some(node)) = (worker_of(pod), live_on_node(pod)) {
            *live
                .entry(w)
                .or_default()
                .entry(node.to_owned())
                .or_insert(0) += 1;
        }
    }
    let mut infos = Vec::new();
    let mut admitted: BTreeSet<(&str, &str)> = BTreeSet::new();
    for job in jobs {
        let job: &GryviaAIJob = job.borrow();
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let holds = job.status.as_ref().is_some_and(|s| s.admission.is_some());
        if !holds && !covered.contains(ns) {
            continue;
        }
        let workers = live.get(&(ns, name)).cloned().unwrap_or_default();
        // A job whose workers ran before its namespace got a queue runs on outside it: its
        // pods count as used room on their nodes, and it is not a candidate.
        if !holds && !workers.is_empty() {
            continue;
        }
        if let Some(mut info) = JobInfo::of(job, class_value(job, priorities), workers) {
            if let Some(tier) = tier_of(job, priorities) {
                info.sla_seconds = tier.spec.sla.as_ref().map(|s| s.max_queue_seconds);
                info.quota_override_percent =
                    tier.spec.quota_override.as_ref().map_or(0, |o| o.percent);
            }
            if info.admission().is_some() {
                admitted.insert((ns, name));
            }
            infos.push(info);
        }
    }
    let mut others: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for pod in pods {
        let Some(node) = live_on_node(pod) else {
            continue;
        };
        if worker_of(pod).is_some_and(|w| admitted.contains(&w)) {
            continue;
        }
        others.entry(node).or_default().push(pod);
    }
    let nodes = nodes
        .iter()
        .map(|n| {
            let n: &Node = n.borrow();
            let name = n.metadata.name.as_deref().unwrap_or_default();
            NodeCapacity::of(n, others.get(name).into_iter().flatten().copied())
        })
        .filter(|n| !n.allocatable.0.is_empty())
        .collect();
    QueueWorld {
        queues,
        jobs: infos,
        nodes,
    }
}

/// What would become of a job submitted now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum WhatIf {
    /// No GryviaQueue covers its namespace: kube-scheduler places it as it comes.
    NoQueue {
        /// The namespace.
        namespace: String,
    },
    /// Its queue would admit it at once.
    StartsNow {
        /// The admission it would get.
        admission: JobAdmission,
    },
    /// It would wait.
    Waits {
        /// Where it would stand: queue, position, why, expected start.
        standing: QueueStanding,
    },
}

/// What would become of `job` (not created) if it were submitted at `now` into `world` (built
/// by [`world_of`]); a job of the same name in the world is taken as replaced. Pure: nothing
/// is created.
pub fn what_if(
    world: &QueueWorld,
    job: &GryviaAIJob,
    priorities: &[GryviaPriority],
    now: crate::Timestamp,
) -> WhatIf {
    let mut job = job.clone();
    job.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    job.status = None;
    let namespace = job.metadata.namespace.clone().unwrap_or_default();
    let covered = world
        .queues
        .iter()
        .any(|q| q.namespaces.contains(&namespace));
    let Some(info) = JobInfo::of(&job, class_value(&job, priorities), BTreeMap::new()) else {
        return WhatIf::NoQueue { namespace };
    };
    if !covered {
        return WhatIf::NoQueue { namespace };
    }
    let key = info.key.clone();
    let mut world = world.clone();
    world.jobs.retain(|j| j.key != key);
    world.jobs.push(info);
    let decided = super::cycle(&world, now);
    if let Some(a) = decided.admitted.into_iter().find(|a| a.job == key) {
        return WhatIf::StartsNow {
            admission: a.admission,
        };
    }
    match decided.pending.get(&key) {
        Some(standing) => WhatIf::Waits {
            standing: standing.clone(),
        },
        None => WhatIf::NoQueue { namespace },
    }
}
