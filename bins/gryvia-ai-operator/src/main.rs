//! `gryvia-ai-operator`: runs GryviaAIJobs as batch Jobs (retries, failure classification),
//! checks GryviaTemplates, makes a PriorityClass of every GryviaPriority, serves the
//! admission webhooks for new jobs, and (opt-in) runs reservations and job hooks.
//!
//! A thin binary: flags, logging, wiring. The controllers are in `gryvia_client::aijob`, the
//! webhooks in `gryvia_client::admission`, the policy in `gryvia_reconcile`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Parser;
use gryvia_client::admission::{Endpoint, Registration, WebhookOptions};
use gryvia_client::operator::{OperatorFlags, init_logging};

/// Runs AI jobs, checks job templates, turns priority tiers into PriorityClasses and serves
/// the admission webhooks of GryviaAIJobs.
#[derive(Parser, Debug)]
#[command(name = "gryvia-ai-operator", version, about)]
struct Flags {
    /// Run GryviaReservations: taint and label the nodes they hold (opt-in; turning it on makes
    /// existing reservations start tainting nodes).
    #[arg(long, env = "GRYVIA_ENABLE_RESERVATIONS")]
    enable_reservations: bool,
    /// Run GryviaJobHooks: POST signed webhooks when watched jobs start, are retried, succeed
    /// or fail (opt-in: turning it on makes existing hooks start sending).
    #[arg(long, env = "GRYVIA_ENABLE_JOB_HOOKS")]
    enable_job_hooks: bool,
    /// Serve the admission webhooks (TLS) on this address and register them.
    #[arg(long)]
    webhook_addr: Option<SocketAddr>,
    /// The API server reaches the webhooks at this https URL (for example
    /// https://127.0.0.1:9443 outside a cluster).
    #[arg(long, conflicts_with = "webhook_service")]
    webhook_url: Option<String>,
    /// The API server reaches the webhooks through this Service: NAMESPACE/NAME[:PORT].
    #[arg(long)]
    webhook_service: Option<String>,
    /// Directory with tls.crt, tls.key and ca.crt (for example a cert-manager Secret); a
    /// self-signed CA is made at start when absent (one replica only).
    #[arg(long)]
    webhook_cert_dir: Option<PathBuf>,
    /// Reject jobs when the admission facts cannot be read, and register with
    /// failurePolicy Fail (default: fail open, as the features guide describes).
    #[arg(long)]
    webhook_fail_closed: bool,
    /// The admission gate: reject new GPU jobs in the scope of a GryviaBudget in state
    /// `blocked` (its spend reached its limit with enforcement on); needs --webhook-addr.
    #[arg(long, env = "GRYVIA_ADMISSION_GATE")]
    admission_gate: bool,
    /// Name of the webhook configurations.
    #[arg(long, default_value = "gryvia-ai-operator")]
    webhook_name: String,
    /// Only review jobs in namespaces with these labels (key=value[,key=value]).
    #[arg(long)]
    webhook_namespace_selector: Option<String>,
    #[command(flatten)]
    operator: OperatorFlags,
}

fn main() -> std::process::ExitCode {
    let flags = Flags::parse();
    init_logging(&flags.operator.log_format);
    gryvia_client::operator::exit_code(run(flags))
}

fn webhook_options(flags: &Flags) -> anyhow::Result<Option<WebhookOptions>> {
    let Some(addr) = flags.webhook_addr else {
        if flags.webhook_url.is_some() || flags.webhook_service.is_some() {
            bail!("--webhook-url and --webhook-service need --webhook-addr");
        }
        if flags.admission_gate {
            bail!("--admission-gate needs --webhook-addr (the gate is the validating webhook)");
        }
        return Ok(None);
    };
    let endpoint = match (&flags.webhook_url, &flags.webhook_service) {
        (Some(url), _) => {
            if !url.starts_with("https://") {
                bail!("--webhook-url: {url:?} must start with https://");
            }
            Endpoint::Url(url.clone())
        }
        (None, Some(svc)) => {
            let (ns, rest) = svc.split_once('/').with_context(|| {
                format!("--webhook-service: {svc:?} is not NAMESPACE/NAME[:PORT]")
            })?;
            let (name, port) = match rest.split_once(':') {
                Some((n, p)) => (
                    n,
                    p.parse::<i32>().with_context(|| {
                        format!("--webhook-service: port {p:?} is not a number")
                    })?,
                ),
                None => (rest, 443),
            };
            Endpoint::Service {
                namespace: ns.to_owned(),
                name: name.to_owned(),
                port,
            }
        }
        (None, None) => bail!("--webhook-addr needs --webhook-url or --webhook-service"),
    };
    Ok(Some(WebhookOptions {
        addr,
        registration: Registration {
            name: flags.webhook_name.clone(),
            endpoint,
            ca_pem: String::new(),
            fail_closed: flags.webhook_fail_closed,
            namespace_selector: flags.webhook_namespace_selector.clone(),
        },
        cert_dir: flags.webhook_cert_dir.clone(),
        admission_gate: flags.admission_gate,
    }))
}

fn run(flags: Flags) -> anyhow::Result<()> {
    let webhooks = webhook_options(&flags)?;
    gryvia_client::operator::run_blocking_with(
        "gryvia-ai-operator",
        &flags.operator,
        |client, metrics| {
            let options = gryvia_client::aijob::AiOptions {
                reservations: flags.enable_reservations,
                job_hooks: flags.enable_job_hooks,
            };
            let controllers =
                gryvia_client::aijob::controllers(client.clone(), options, metrics.clone());
            let sidecar = webhooks.map(|w| -> gryvia_client::operator::Sidecar {
                Box::pin(gryvia_client::admission::run(client, w, metrics))
            });
            (controllers, sidecar)
        },
    )
    .context("operator")
}
