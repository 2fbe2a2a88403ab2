//! The ai-operator: AI jobs, templates, priorities, workflows and hyperparameter studies; reservations, job hooks,
//! the native queue scheduler and the Kueue integration opt-in; the admission webhooks when
//! `--webhook-addr` is given (on every replica).

use std::net::SocketAddr;
use std::path::PathBuf;

use super::{ControllerSet, OperatorFlags, Sidecar};
use crate::admission::{Endpoint, Registration, WebhookOptions};
use crate::controllers::{
    aijob, job_hook, kueue, priority, queue, registry, reservation, serving, template, tuner,
    workflow, workspace,
};
use crate::{Error, Result};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-ai-operator";

/// Runs AI jobs, checks job templates, turns priority tiers into PriorityClasses, runs
/// workflows and serves the admission webhooks of GryviaAIJobs.
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-ai-operator", version)]
pub struct Flags {
    /// Run GryviaReservations: label (and, exclusive, taint) the nodes they hold, evict
    /// borrowers when the owner's pods wait, account availability (opt-in; turning it on makes
    /// existing reservations start tainting nodes).
    #[arg(long, env = "GRYVIA_ENABLE_RESERVATIONS")]
    pub enable_reservations: bool,
    /// Run GryviaJobHooks: POST signed webhooks when watched jobs start, are retried, succeed
    /// or fail (opt-in: turning it on makes existing hooks start sending).
    #[arg(long, env = "GRYVIA_ENABLE_JOB_HOOKS")]
    pub enable_job_hooks: bool,
    /// Run the native queue scheduler: jobs of namespaces a GryviaQueue covers wait until
    /// their queue admits them (quota per GPU product, cohorts, gangs, preemption, backfill),
    /// and their status says where they stand (opt-in: turning it on makes such jobs queue).
    #[arg(long, env = "GRYVIA_NATIVE_QUEUE_SCHEDULER")]
    pub native_queue_scheduler: bool,
    /// Schedule through Kueue (installed separately): tenants, queues and priority tiers
    /// become ClusterQueues, LocalQueues, ResourceFlavors and WorkloadPriorityClasses, each
    /// job's batch Job is submitted suspended to its namespace's LocalQueue, and its status
    /// shows Kueue's admission (opt-in; not with the native queue scheduler).
    #[arg(
        long,
        env = "GRYVIA_KUEUE_INTEGRATION",
        conflicts_with = "native_queue_scheduler"
    )]
    pub kueue_integration: bool,
    /// How often a GryviaAutoTuner with running trials reads their metrics from their logs
    /// (seconds, at least 1).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub tuner_poll_seconds: u64,
    /// A Prometheus-compatible query API (for example http://prometheus:9090) the canaries
    /// of inference services read their error rate and latency from; without it a canary is
    /// judged on the readiness of its pods alone.
    #[arg(long, env = "GRYVIA_METRICS_URL", value_parser = http_url)]
    pub metrics_url: Option<String>,
    /// How often a canary is checked (seconds, at least 1); also the rate window of its
    /// queries.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub canary_check_seconds: u64,
    /// How often a running GryviaWorkspace with an idle timeout reads its server's activity
    /// (seconds, at least 1).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub workspace_poll_seconds: u64,
    /// Serve the admission webhooks (TLS) on this address and register them (not with
    /// --dry-run: registering is a change to the cluster).
    #[arg(long, conflicts_with = "dry_run")]
    pub webhook_addr: Option<SocketAddr>,
    /// The API server reaches the webhooks at this https URL (for example
    /// https://127.0.0.1:9443 outside a cluster).
    #[arg(long, conflicts_with = "webhook_service")]
    pub webhook_url: Option<String>,
    /// The API server reaches the webhooks through this Service: NAMESPACE/NAME[:PORT].
    #[arg(long)]
    pub webhook_service: Option<String>,
    /// Directory with tls.crt, tls.key and ca.crt (for example a cert-manager Secret); a
    /// self-signed CA is made at start when absent (one replica only).
    #[arg(long)]
    pub webhook_cert_dir: Option<PathBuf>,
    /// Reject jobs when the admission facts cannot be read, and register with
    /// failurePolicy Fail (default: fail open, as the features guide describes).
    #[arg(long)]
    pub webhook_fail_closed: bool,
    /// The admission gate: reject new GPU jobs in the scope of a GryviaBudget in state
    /// `blocked` (its spend reached its limit with enforcement on), and of tenants past their
    /// monthly money or GPU-hour quota or their prepaid balance; needs --webhook-addr.
    #[arg(long, env = "GRYVIA_ADMISSION_GATE")]
    pub admission_gate: bool,
    /// Name of the webhook configurations.
    #[arg(long, default_value = "gryvia-ai-operator")]
    pub webhook_name: String,
    /// Only review jobs in namespaces with these labels (key=value[,key=value]).
    #[arg(long)]
    pub webhook_namespace_selector: Option<String>,
    /// Flags every operator takes.
    #[command(flatten)]
    pub operator: OperatorFlags,
}

/// An http(s) URL, as a flag's value.
fn http_url(s: &str) -> std::result::Result<String, String> {
    if s.starts_with("http://") || s.starts_with("https://") {
        Ok(s.trim_end_matches('/').to_owned())
    } else {
        Err(format!("{s:?} is not an http:// or https:// URL"))
    }
}

/// The controllers the ai-operator runs with `flags`.
pub fn controllers(flags: &Flags) -> ControllerSet {
    let native_queue = flags.native_queue_scheduler;
    let poll = std::time::Duration::from_secs(flags.tuner_poll_seconds);
    let metrics_url = flags.metrics_url.clone();
    let check = std::time::Duration::from_secs(flags.canary_check_seconds);
    let workspace_poll = std::time::Duration::from_secs(flags.workspace_poll_seconds);
    let scheduling = if flags.kueue_integration {
        aijob::Scheduling::Kueue
    } else if native_queue {
        aijob::Scheduling::NativeQueue
    } else {
        aijob::Scheduling::Direct
    };
    ControllerSet::new()
        .with(move |shared| aijob::controller(shared, scheduling))
        .with(template::controller)
        .with(priority::controller)
        .with(workflow::controller)
        .with(move |shared| tuner::controller(shared, poll))
        .with(move |shared| serving::controller(shared, metrics_url.clone(), check))
        .with(registry::controller)
        .with(move |shared| workspace::controller(shared, workspace_poll))
        .with_if(flags.enable_reservations, reservation::controller)
        .with_if(flags.enable_job_hooks, job_hook::controller)
        .with_if(native_queue, queue::controller)
        .with_if(flags.kueue_integration, kueue::controller)
}

fn endpoint(flags: &Flags) -> Result<Endpoint> {
    match (&flags.webhook_url, &flags.webhook_service) {
        (Some(url), _) => {
            if !url.starts_with("https://") {
                return Err(Error::Invalid(format!(
                    "--webhook-url: {url:?} must start with https://"
                )));
            }
            Ok(Endpoint::Url(url.clone()))
        }
        (None, Some(svc)) => {
            let invalid = || {
                Error::Invalid(format!(
                    "--webhook-service: {svc:?} is not NAMESPACE/NAME[:PORT]"
                ))
            };
            let (ns, rest) = svc.split_once('/').ok_or_else(invalid)?;
            let (name, port) = match rest.split_once(':') {
                Some((n, p)) => (
                    n,
                    p.parse::<i32>().map_err(|_| {
                        Error::Invalid(format!("--webhook-service: port {p:?} is not a number"))
                    })?,
                ),
                None => (rest, 443),
            };
            Ok(Endpoint::Service {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                port,
            })
        }
        (None, None) => Err(Error::Invalid(
            "--webhook-addr needs --webhook-url or --webhook-service".to_owned(),
        )),
    }
}

/// The admission webhook options `flags` ask for (`None` without `--webhook-addr`).
///
/// # Errors
/// [`Error::Invalid`] naming the flag: webhook flags without `--webhook-addr`, an endpoint
/// that is not https or not `NAMESPACE/NAME[:PORT]`.
pub fn webhook_options(flags: &Flags) -> Result<Option<WebhookOptions>> {
    let Some(addr) = flags.webhook_addr else {
        if flags.webhook_url.is_some() || flags.webhook_service.is_some() {
            return Err(Error::Invalid(
                "--webhook-url and --webhook-service need --webhook-addr".to_owned(),
            ));
        }
        if flags.admission_gate {
            return Err(Error::Invalid(
                "--admission-gate needs --webhook-addr (the gate is the validating webhook)"
                    .to_owned(),
            ));
        }
        return Ok(None);
    };
    Ok(Some(WebhookOptions {
        addr,
        registration: Registration {
            name: flags.webhook_name.clone(),
            endpoint: endpoint(flags)?,
            ca_pem: String::new(),
            fail_closed: flags.webhook_fail_closed,
            namespace_selector: flags.webhook_namespace_selector.clone(),
        },
        cert_dir: flags.webhook_cert_dir.clone(),
        admission_gate: flags.admission_gate,
    }))
}

/// Runs the ai-operator until SIGTERM (the webhooks on every replica, the controllers while
/// leading).
///
/// # Errors
/// Invalid webhook flags ([`webhook_options`]), or what [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    let webhooks = webhook_options(flags)?;
    let sidecar: super::SidecarBuilder = Box::new(move |client, metrics| {
        webhooks.map(|w| -> Sidecar { Box::pin(crate::admission::run(client, w, metrics)) })
    });
    super::run_blocking(NAME, &flags.operator, controllers(flags), Some(sidecar))
}
