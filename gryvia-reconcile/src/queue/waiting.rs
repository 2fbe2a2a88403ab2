//! What a waiting job shows people: its queue, position, expected start and why it waits, from
//! whichever scheduler holds it (the native queue's standing, Kueue's word, or the job's own
//! `Scheduled` condition). `gryvia queue` and the gateway show the same.

use gryvia_types::GryviaAIJob;
use serde::Serialize;

/// A waiting job as people see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// The job's namespace.
    pub namespace: String,
    /// The job's name.
    pub job: String,
    /// The queue holding it: a GryviaQueue, `kueue:<LocalQueue>`, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Its place in the native queue (1 is next).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i32>,
    /// The job's priority.
    pub priority: i32,
    /// Workers.
    pub replicas: i32,
    /// GPUs per worker (a fraction such as `0.5` for shared GPUs).
    pub gpus_per_worker: String,
    /// The GPU product asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// When the native queue expects it to start (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<String>,
    /// Why it waits, in words.
    pub why: String,
}

/// The view of one waiting job.
pub fn waiting(job: &GryviaAIJob) -> Waiting {
    let status = job.status.as_ref();
    let standing = status.and_then(|s| s.queue.as_ref());
    let kueue = status.and_then(|s| s.kueue.as_ref());
    let why = match (standing, kueue) {
        (Some(q), _) => q.reason.clone(),
        (None, Some(k)) => format!(
            "Kueue {}: {}",
            k.state,
            k.message.as_deref().unwrap_or("no message")
        ),
        (None, None) => status
            .and_then(|s| gryvia_types::conditions::find(&s.conditions, "Scheduled"))
            .map_or_else(
                || "not yet seen by the ai-operator".to_owned(),
                |c| format!("{}: {}", c.reason, c.message),
            ),
    };
    Waiting {
        namespace: job.metadata.namespace.clone().unwrap_or_default(),
        job: job.metadata.name.clone().unwrap_or_default(),
        queue: match (standing, kueue) {
            (Some(q), _) => Some(q.queue.clone()),
            (None, Some(k)) => Some(format!("kueue:{}", k.local_queue)),
            (None, None) => None,
        },
        position: standing.map(|q| q.position),
        priority: job.spec.priority,
        replicas: job.spec.replicas,
        gpus_per_worker: job
            .spec
            .gpu_fraction
            .map_or_else(|| job.spec.gpus.to_string(), |f| f.to_string()),
        gpu_type: job.spec.gpu_type.clone(),
        expected_start: standing
            .and_then(|q| q.expected_start.as_ref())
            .map(|t| t.0.to_string()),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gryvia_types::testing::ai_job;

    #[test]
    fn a_native_standing_names_queue_position_and_reason() {
        let mut j = ai_job("ns", "train", "img");
        j.status = Some(
            serde_json::from_value(serde_json::json!({
                "queue": {"queue": "research", "position": 3, "reason": "waiting for 4 GPUs",
                          "expectedStart": "2026-12-05T13:00:00Z"}
            }))
            .unwrap(),
        );
        let w = waiting(&j);
        assert_eq!(w.queue.as_deref(), Some("research"));
        assert_eq!(w.position, Some(3));
        assert_eq!(w.why, "waiting for 4 GPUs");
        assert_eq!(w.expected_start.as_deref(), Some("2026-12-05T13:00:00Z"));
    }

    #[test]
    fn no_status_says_the_operator_has_not_seen_it() {
        let w = waiting(&ai_job("ns", "train", "img"));
        assert_eq!(w.why, "not yet seen by the ai-operator");
        assert_eq!(w.queue, None);
    }
}
