//! The quota-operator: tenants, GryviaQuotas and budgets; metering (usage records) opt-in.

use gryvia_reconcile::budget::{ALERT_ATTEMPTS, AlertChannels, AlertWebhook};
use gryvia_reconcile::invoice::InvoiceReconciler;
use gryvia_reconcile::tenancy::TenantOptions;

use super::{ControllerSet, OperatorFlags};
use crate::controllers::{budget, invoice, metering, quota, tenant, usage_record};
use crate::mail::{Mailer, SmtpSettings, SmtpTls, mailbox};
use crate::{Error, Result};

/// Name of the operator (its Lease, its logs).
pub const NAME: &str = "gryvia-quota-operator";

/// Reconciles GryviaTenants (namespace, quota, limit range, network policy, RoleBindings),
/// GryviaQuotas and GryviaBudgets; meters GPU jobs into priced usage records (opt-in).
#[derive(clap::Parser, Debug)]
#[command(name = "gryvia-quota-operator", version)]
pub struct Flags {
    /// Create RoleBindings for tenant members (opt-in; chart value quotaOperator.tenantRbac).
    #[arg(long, env = "GRYVIA_TENANT_RBAC")]
    pub tenant_rbac: bool,
    /// Meter GPU jobs: a GryviaUsageRecord for every GPU job, and for the idle GPU time of
    /// reservations with billing.chargeWhenIdle, priced from the GryviaGpuSku catalogue
    /// (opt-in: it puts a finalizer on every GryviaAIJob and GryviaReservation, which closes
    /// their open record when they are deleted).
    #[arg(long, env = "GRYVIA_METERING")]
    pub metering: bool,
    /// Invoices: price GryviaInvoices from the usage records and issue them once their period
    /// has ended, and give every tenant its invoice for each UTC month (opt-in; the records
    /// come from --metering).
    #[arg(long, env = "GRYVIA_INVOICES")]
    pub invoices: bool,
    /// Seconds after its period's end an invoice is issued (the records of jobs that ran up
    /// to the end are closed by then).
    #[arg(long, default_value_t = 300)]
    pub invoice_grace_seconds: u64,
    /// Where budget alerts go besides Events.
    #[command(flatten)]
    pub alerts: AlertFlags,
    /// Flags every operator takes.
    #[command(flatten)]
    pub operator: OperatorFlags,
}

/// Where budget threshold alerts go besides Events: a signed webhook (alerts with the
/// `webhook` action) and e-mail (the `email` action), each delivered at least once with a
/// log in the budget's status.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AlertFlags {
    /// POST alerts with the `webhook` action here (https; chart value
    /// quotaOperator.budgetWebhook.url).
    #[arg(long, env = "GRYVIA_BUDGET_WEBHOOK_URL")]
    pub budget_webhook_url: Option<String>,
    /// Secret (in the operator's namespace, --lease-namespace) whose key
    /// --budget-webhook-secret-key signs the alerts (chart value
    /// quotaOperator.budgetWebhook.secretName); unsigned without it.
    #[arg(long, env = "GRYVIA_BUDGET_WEBHOOK_SECRET")]
    pub budget_webhook_secret: Option<String>,
    /// Key of the signing Secret.
    #[arg(long, default_value = "secret")]
    pub budget_webhook_secret_key: String,
    /// Allow an http:// budget webhook URL (a receiver on the same host or network only).
    #[arg(long)]
    pub budget_webhook_allow_http: bool,
    /// SMTP server (host:port) that sends alerts with the `email` action.
    #[arg(long, env = "GRYVIA_SMTP_SERVER")]
    pub smtp_server: Option<String>,
    /// Sender address of alert e-mail (required with --smtp-server).
    #[arg(long, env = "GRYVIA_SMTP_FROM")]
    pub smtp_from: Option<String>,
    /// Security of the SMTP connection.
    #[arg(long, value_enum, default_value = "starttls")]
    pub smtp_tls: SmtpTls,
    /// SMTP user name (the password is read from the environment variable
    /// GRYVIA_SMTP_PASSWORD).
    #[arg(long, env = "GRYVIA_SMTP_USERNAME")]
    pub smtp_username: Option<String>,
    /// Who gets every alert e-mail, besides each budget's spec.emailRecipients
    /// (comma-separated).
    #[arg(long, env = "GRYVIA_BUDGET_EMAIL_TO", value_delimiter = ',')]
    pub budget_email_to: Vec<String>,
    /// Attempts of a budget alert's or an invoice's webhook delivery before it is given up (a
    /// Warning Event says so).
    #[arg(long, default_value_t = ALERT_ATTEMPTS, value_parser = clap::value_parser!(i32).range(1..=100))]
    pub budget_alert_attempts: i32,
}

impl AlertFlags {
    /// The budget controller's alert channels and mailer, with the signing Secret in
    /// `namespace` and the SMTP password from `password` (GRYVIA_SMTP_PASSWORD).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the flag when a URL, address or server is not usable.
    pub fn alerts(&self, namespace: &str, password: Option<String>) -> Result<budget::Alerts> {
        let webhook = match &self.budget_webhook_url {
            None => None,
            Some(url) => {
                let scheme_ok = url.starts_with("https://")
                    || (self.budget_webhook_allow_http && url.starts_with("http://"));
                let parsed = url.parse::<http::Uri>().ok().filter(|u| u.host().is_some());
                if !scheme_ok || parsed.is_none() {
                    return Err(Error::Invalid(format!(
                        "--budget-webhook-url: {url:?} is not an https:// URL{}",
                        if self.budget_webhook_allow_http {
                            " or an http:// one"
                        } else {
                            " (http:// needs --budget-webhook-allow-http)"
                        }
                    )));
                }
                Some(AlertWebhook {
                    url: url.clone(),
                    secret: self.budget_webhook_secret.as_ref().map(|name| {
                        (
                            namespace.to_owned(),
                            name.clone(),
                            self.budget_webhook_secret_key.clone(),
                        )
                    }),
                })
            }
        };
        let mailer = match (&self.smtp_server, &self.smtp_from) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Error::Invalid(
                    "--smtp-from: required with --smtp-server".to_owned(),
                ));
            }
            (Some(server), Some(from)) => Some(Mailer::new(&SmtpSettings {
                server: server.clone(),
                from: from.clone(),
                tls: self.smtp_tls,
                credentials: self
                    .smtp_username
                    .clone()
                    .map(|user| (user, password.unwrap_or_default())),
            })?),
        };
        for to in &self.budget_email_to {
            mailbox(to, "--budget-email-to")?;
        }
        Ok(budget::Alerts {
            channels: AlertChannels {
                webhook,
                email_to: mailer.is_some().then(|| self.budget_email_to.clone()),
                max_attempts: self.budget_alert_attempts,
            },
            mailer,
        })
    }
}

/// The controllers the quota-operator runs with `flags`.
///
/// # Errors
/// [`Error::Invalid`] naming the flag when an alert flag is not usable.
pub fn controllers(flags: &Flags) -> Result<ControllerSet> {
    let options = TenantOptions {
        tenant_rbac: flags.tenant_rbac,
    };
    let alerts = flags.alerts.alerts(
        &flags.operator.lease_namespace,
        std::env::var("GRYVIA_SMTP_PASSWORD").ok(),
    )?;
    let invoices = InvoiceReconciler {
        grace: std::time::Duration::from_secs(flags.invoice_grace_seconds),
        max_attempts: flags.alerts.budget_alert_attempts,
        secret_namespace: flags.operator.lease_namespace.clone(),
    };
    Ok(ControllerSet::new()
        .with(move |s| tenant::controller(s, options))
        .with(quota::controller)
        .with(move |s| budget::controller(s, alerts.clone()))
        .with_if(flags.metering, metering::controller)
        .with_if(flags.metering, usage_record::controller)
        .with_if(flags.metering, metering::reservation_controller)
        .with_if(flags.invoices, move |s| {
            invoice::controller(s, invoices.clone())
        })
        .with_if(flags.invoices, invoice::monthly_controller))
}

/// Runs the quota-operator until SIGTERM.
///
/// # Errors
/// What [`super::run_blocking`] returns.
pub fn run(flags: &Flags) -> Result<()> {
    super::run_blocking(NAME, &flags.operator, controllers(flags)?, None)
}
