//! Budgets, as a pure function: a GryviaBudget's spend and GPU-hours in its current period,
//! from the GryviaUsageRecords of its scope priced at the GryviaGpuSku catalogue.
//!
//! Periods follow the UTC calendar (a day, a week from Monday, a month, a quarter, a year).
//! A record counts for the part of its interval inside the period (an open record up to now),
//! at its SKU's price; records priced in another currency than USD are listed in
//! `uncountedCurrencies`, not added. The forecast extrapolates the spend so far linearly to the
//! end of the period (from one hour into it).
//!
//! The state: `blocked` at or past 100 % of a limit when enforcement is on with `block` (or an
//! alert with the `block` action has been crossed), `exceeded` at or past 100 % otherwise,
//! `warning` past an alert threshold, `ok` below. Utilisation is the larger of spend against
//! `costUSD` and GPU-hours against `gpuHours`. Each threshold crossed raises one Warning Event
//! per period. The ai-operator's admission gate rejects new jobs in the scope of a `blocked`
//! budget ([`crate::admission`]).

use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use gryvia_types::money::{Decimal, MICROS};
use gryvia_types::{
    AlertAction, AlertChannel, AlertDelivery, BudgetAlert, BudgetScopeType, BudgetState,
    DeliveryState, EnforcementAction, GryviaBudget, GryviaBudgetStatus, GryviaUsageRecord,
    PeriodType,
};
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::delivery;
use crate::metering::{Sku, sku_of};
use crate::{Delivery, Email, EventType, Notification, Plan, Timestamp};

/// How often a budget is brought up to date (open records keep counting).
pub const REFRESH: Duration = Duration::from_secs(60);

/// What the budget reconcile knows: every usage record and the catalogue.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct BudgetWorld {
    /// Usage records (the reconcile picks its scope's).
    pub records: Vec<GryviaUsageRecord>,
    /// The catalogue.
    pub skus: Vec<Sku>,
    /// For a budget of a tenant (scope `team` or `tenant`): the tenant's
    /// `notifications.email`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenant_emails: Vec<String>,
}

/// The period containing `now`: its start and end.
pub fn period(kind: PeriodType, now: Timestamp) -> (Timestamp, Timestamp) {
    let today = now.to_zoned(TimeZone::UTC).date();
    let (start, end): (Date, Date) = match kind {
        PeriodType::Daily => (today, today.tomorrow().unwrap_or(today)),
        PeriodType::Weekly => {
            let back = i64::from(today.weekday().since(Weekday::Monday));
            let monday = today
                .checked_sub(jiff::Span::new().days(back))
                .unwrap_or(today);
            (
                monday,
                monday
                    .checked_add(jiff::Span::new().days(7))
                    .unwrap_or(monday),
            )
        }
        PeriodType::Monthly => {
            let first = today.first_of_month();
            (
                first,
                first
                    .checked_add(jiff::Span::new().months(1))
                    .unwrap_or(first),
            )
        }
        PeriodType::Quarterly => {
            let month = (today.month() - 1) / 3 * 3 + 1;
            let first = Date::new(today.year(), month, 1).unwrap_or(today);
            (
                first,
                first
                    .checked_add(jiff::Span::new().months(3))
                    .unwrap_or(first),
            )
        }
        PeriodType::Yearly => {
            let first = today.first_of_year();
            (
                first,
                first
                    .checked_add(jiff::Span::new().years(1))
                    .unwrap_or(first),
            )
        }
    };
    let at = |d: Date| d.to_zoned(TimeZone::UTC).map_or(now, |z| z.timestamp());
    (at(start), at(end))
}

/// What a budget's scope covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The work of one tenant (scope type `team` or `tenant`).
    Tenant(&'a str),
    /// The work in one namespace.
    Namespace(&'a str),
    /// All work.
    Cluster,
}

/// The scope of `budget`.
pub fn scope(budget: &GryviaBudget) -> Scope<'_> {
    let name = budget.spec.scope.name.as_str();
    match budget.spec.scope.type_ {
        BudgetScopeType::Team | BudgetScopeType::Tenant => Scope::Tenant(name),
        BudgetScopeType::Namespace => Scope::Namespace(name),
        BudgetScopeType::Cluster => Scope::Cluster,
    }
}

/// Whether `budget` covers work of `tenant` (when it belongs to one) in `namespace`: the one
/// scope rule of budgets, admission's gate and usage records.
pub fn covers(budget: &GryviaBudget, tenant: Option<&str>, namespace: &str) -> bool {
    match scope(budget) {
        Scope::Tenant(name) => tenant == Some(name),
        Scope::Namespace(name) => namespace == name,
        Scope::Cluster => true,
    }
}

/// Whether `record` is in the budget's scope.
pub fn in_scope(budget: &GryviaBudget, record: &GryviaUsageRecord) -> bool {
    covers(budget, Some(&record.spec.tenant), &record.spec.namespace)
}

/// The budgets whose scope is `tenant` itself (as team or tenant; not the namespace or
/// cluster budgets that also cover it), sorted by name: what `gryvia tenant` shows.
pub fn budgets_of_tenant<'a>(
    budgets: impl IntoIterator<Item = &'a GryviaBudget>,
    tenant: &str,
) -> Vec<&'a GryviaBudget> {
    let mut out: Vec<&GryviaBudget> = budgets
        .into_iter()
        .filter(|b| scope(b) == Scope::Tenant(tenant))
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// Spend of a scope in a period.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spend {
    /// US dollars, micro-units.
    pub usd_micros: i64,
    /// GPU-seconds.
    pub gpu_seconds: i64,
    /// Currencies that were not counted.
    pub uncounted: Vec<String>,
}

/// The spend of the budget's scope from `start` to `now`.
pub fn spend(
    budget: &GryviaBudget,
    world: &BudgetWorld,
    start: Timestamp,
    now: Timestamp,
) -> Spend {
    let mut out = Spend::default();
    for r in world.records.iter().filter(|r| in_scope(budget, r)) {
        // A network record is priced already, and counts whole in the period it starts in.
        if let Some(n) = &r.spec.network {
            if !crate::invoice::network_in_span(r, start, now) {
                continue;
            }
            if n.currency == "USD" {
                out.usd_micros = out
                    .usd_micros
                    .saturating_add(n.amount.micros().unwrap_or(0));
            } else if !out.uncounted.contains(&n.currency) {
                out.uncounted.push(n.currency.clone());
            }
            continue;
        }
        let from = r.spec.start_time.0.max(start);
        let to = r.spec.end_time.as_ref().map_or(now, |t| t.0).min(now);
        if to <= from {
            continue;
        }
        let gpu_seconds = to
            .duration_since(from)
            .as_secs()
            .saturating_mul(i64::from(r.spec.gpu_count.max(0)));
        out.gpu_seconds = out.gpu_seconds.saturating_add(gpu_seconds);
        match sku_of(r, &world.skus) {
            Some(s) if s.currency == "USD" => {
                let price = crate::metering::unit_price(r, s);
                let micros = i128::from(gpu_seconds) * i128::from(price) / 3600;
                out.usd_micros = out
                    .usd_micros
                    .saturating_add(i64::try_from(micros).unwrap_or(i64::MAX));
            }
            Some(s) if !out.uncounted.contains(&s.currency) => {
                out.uncounted.push(s.currency.clone());
            }
            Some(_) => {}
            // Unpriced (no SKU yet): GPU-hours count, money cannot.
            None => {}
        }
    }
    out.uncounted.sort();
    out
}

/// The spend `micros` so far in the period from `start` to `end`, extrapolated linearly to its
/// end; `None` in the first hour (too early to say).
pub fn forecast(micros: i64, start: Timestamp, end: Timestamp, now: Timestamp) -> Option<Decimal> {
    let elapsed = now.as_second() - start.as_second();
    let length = end.as_second() - start.as_second();
    (elapsed >= 3600).then(|| {
        let f = i128::from(micros) * i128::from(length) / i128::from(elapsed);
        Decimal::from_micros(i64::try_from(f).unwrap_or(i64::MAX))
    })
}

/// Utilisation in percent (the larger of the two limits'), `None` without limits.
fn utilisation(budget: &GryviaBudget, usd_micros: i64, gpu_seconds: i64) -> Option<i64> {
    let cost = budget.spec.limits.cost_usd.map(|l| {
        if l <= 0 {
            i64::MAX
        } else {
            usd_micros.saturating_mul(100) / l.saturating_mul(MICROS)
        }
    });
    let hours = budget.spec.limits.gpu_hours.map(|l| {
        if l <= 0 {
            i64::MAX
        } else {
            gpu_seconds.saturating_mul(100) / l.saturating_mul(3600)
        }
    });
    cost.into_iter().chain(hours).max()
}

/// Attempts of an alert delivery before it is given up, unless the operator says otherwise.
pub const ALERT_ATTEMPTS: i32 = 10;

/// The budget webhook: where alerts with the `webhook` action are POSTed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertWebhook {
    /// Where to POST.
    pub url: String,
    /// The Secret with the signing key: namespace, name and key (unsigned when `None`).
    pub secret: Option<(String, String, String)>,
}

/// Where a budget's alerts can go besides Events (the quota-operator's flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertChannels {
    /// The budget webhook (`--budget-webhook-url`).
    pub webhook: Option<AlertWebhook>,
    /// Whether e-mail can be sent (`--smtp-server`), and to whom besides each budget's
    /// `emailRecipients` (`--budget-email-to`); `None` without an SMTP server.
    pub email_to: Option<Vec<String>>,
    /// Attempts of a delivery before it is given up.
    pub max_attempts: i32,
}

impl Default for AlertChannels {
    fn default() -> Self {
        AlertChannels {
            webhook: None,
            email_to: None,
            max_attempts: ALERT_ATTEMPTS,
        }
    }
}

impl AlertChannels {
    /// Who gets `budget`'s e-mail: its recipients, its tenant's (`tenant`:
    /// `notifications.email`) and the operator's, each once, in order. `None` without an SMTP
    /// server.
    pub fn recipients(&self, budget: &GryviaBudget, tenant: &[String]) -> Option<Vec<String>> {
        let operator = self.email_to.as_ref()?;
        let mut to: Vec<String> = Vec::new();
        for r in budget
            .spec
            .email_recipients
            .iter()
            .chain(tenant)
            .chain(operator)
        {
            if !to.contains(r) {
                to.push(r.clone());
            }
        }
        Some(to)
    }
}

/// The GryviaBudget controller's policy.
#[derive(Clone, Debug, Default)]
pub struct BudgetReconciler {
    /// Where alerts go.
    pub alerts: AlertChannels,
}

impl crate::Reconcile for BudgetReconciler {
    type Object = GryviaBudget;
    type World = BudgetWorld;
    type Status = GryviaBudgetStatus;

    fn name(&self) -> &'static str {
        "gryvia-budgets"
    }

    fn reconcile(
        &self,
        budget: &GryviaBudget,
        world: &BudgetWorld,
        now: Timestamp,
    ) -> Plan<GryviaBudgetStatus> {
        let mut plan = Plan::new();
        let current = budget.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let (start, end) = period(budget.spec.period.type_, now);
        if status.period_start.as_ref().map(|t| t.0) != Some(start) {
            // A new period: thresholds alert again.
            status.alerted_thresholds.clear();
        }
        status.period_start = Some(Time(start));
        let s = spend(budget, world, start, now);
        let spend_usd = Decimal::from_micros(s.usd_micros);
        let gpu_hours = Decimal::from_micros(
            i64::try_from(i128::from(s.gpu_seconds) * i128::from(MICROS) / 3600)
                .unwrap_or(i64::MAX),
        );
        status.spend_usd = Some(spend_usd.clone());
        status.gpu_hours = Some(gpu_hours.clone());
        status.uncounted_currencies = s.uncounted;
        status.forecast_usd = forecast(s.usd_micros, start, end, now);

        let used = utilisation(budget, s.usd_micros, s.gpu_seconds).unwrap_or(0);
        let mut crossed: Vec<_> = budget
            .spec
            .alerts
            .iter()
            .filter(|a| i64::from(a.threshold) <= used)
            .collect();
        crossed.sort_by_key(|a| a.threshold);
        let enforce = budget.spec.enforcement.enabled
            && budget.spec.enforcement.action == EnforcementAction::Block;
        let block_alert = crossed
            .iter()
            .any(|a| a.actions.contains(&AlertAction::Block));
        let state = if used >= 100 && (enforce || block_alert) {
            BudgetState::Blocked
        } else if used >= 100 {
            BudgetState::Exceeded
        } else if !crossed.is_empty() {
            BudgetState::Warning
        } else {
            BudgetState::Ok
        };
        status.state = Some(state);
        let crossing = Crossing {
            percent: used,
            spend_usd,
            gpu_hours,
            period_start: start,
            now,
        };
        for a in &crossed {
            if !status.alerted_thresholds.contains(&a.threshold) {
                status.alerted_thresholds.push(a.threshold);
                plan.event(
                    EventType::Warning,
                    "BudgetThreshold",
                    format!(
                        "{} of the {:?} budget's scope {} is at {} (threshold {} %): spend {} USD, {} GPU-hours",
                        scope_text(budget),
                        budget.spec.period.type_,
                        budget.spec.scope.name,
                        of_limit(used),
                        a.threshold,
                        crossing.spend_usd.as_str(),
                        crossing.gpu_hours.as_str(),
                    ),
                );
                self.raise_alerts(
                    &mut plan,
                    budget,
                    &world.tenant_emails,
                    a,
                    &crossing,
                    &mut status.deliveries,
                );
            }
        }
        status.alerted_thresholds.sort_unstable();
        conditions::set(&mut status.conditions, ready(budget, state, used, now));
        self.send_due(
            &mut plan,
            budget,
            &world.tenant_emails,
            &mut status.deliveries,
            now,
        );
        delivery::prune(&mut status.deliveries);
        plan.set_status_if_changed(budget.status.as_ref(), status);
        let to_end = Duration::try_from(end.duration_since(now)).unwrap_or(REFRESH);
        plan.requeue(REFRESH.min(to_end.max(Duration::from_secs(1))));
        plan
    }

    fn record_deliveries(
        &self,
        budget: &GryviaBudget,
        plan: &mut Plan<GryviaBudgetStatus>,
        deliveries: &[Delivery],
        now: Timestamp,
    ) -> bool {
        let status = plan
            .status
            .get_or_insert_with(|| budget.status.clone().unwrap_or_default());
        let outcomes = delivery::record_all(
            &mut status.deliveries,
            deliveries,
            self.alerts.max_attempts,
            now,
        );
        let gave_up: Vec<String> = outcomes
            .gave_up
            .iter()
            .filter_map(|(id, why)| {
                let d = status.deliveries.iter().find(|d| &d.id == id)?;
                Some(format!(
                    "{} alert of the {} % threshold: gave up after {} attempts, last: {why}",
                    channel_text(d.channel),
                    d.threshold,
                    d.attempts
                ))
            })
            .collect();
        if let Some(wait) = outcomes.retry_in {
            plan.requeue(wait);
        }
        for message in gave_up {
            plan.event(EventType::Warning, "AlertDeliveryFailed", message);
        }
        true
    }
}

/// Where spend stood when thresholds were crossed.
#[derive(Clone, Debug)]
struct Crossing {
    percent: i64,
    spend_usd: Decimal,
    gpu_hours: Decimal,
    period_start: Timestamp,
    now: Timestamp,
}

fn channel_text(channel: AlertChannel) -> &'static str {
    match channel {
        AlertChannel::Webhook => "webhook",
        AlertChannel::Email => "e-mail",
    }
}

/// The id of the alert of `threshold` on `channel` in the period starting at `period_start`:
/// the same on every attempt and every reconcile.
pub fn alert_id(
    budget: &GryviaBudget,
    period_start: Timestamp,
    threshold: i32,
    channel: AlertChannel,
) -> String {
    let uid = budget.metadata.uid.as_deref().unwrap_or_default();
    let channel = match channel {
        AlertChannel::Webhook => "webhook",
        AlertChannel::Email => "email",
    };
    format!("{uid}.{}.{threshold}.{channel}", period_start.as_second())
}

/// The JSON body of a webhook alert (the same on every attempt).
pub fn alert_body(budget: &GryviaBudget, d: &AlertDelivery) -> serde_json::Value {
    let limits = &budget.spec.limits;
    serde_json::json!({
        "id": d.id,
        "type": "budget.threshold",
        "time": d.time,
        "budget": {"name": budget.metadata.name, "uid": budget.metadata.uid},
        "scope": {"type": scope_text(budget), "name": budget.spec.scope.name},
        "period": {"type": budget.spec.period.type_, "start": d.period_start},
        "threshold": d.threshold,
        "percent": d.percent,
        "spendUSD": d.spend_usd,
        "gpuHours": d.gpu_hours,
        "limits": {"costUSD": limits.cost_usd, "gpuHours": limits.gpu_hours},
        "actions": budget.spec.alerts.iter()
            .find(|a| a.threshold == d.threshold)
            .map(|a| a.actions.clone())
            .unwrap_or_default(),
    })
}

/// The subject and text of an e-mail alert.
pub fn alert_email(budget: &GryviaBudget, d: &AlertDelivery) -> (String, String) {
    let name = budget.metadata.name.as_deref().unwrap_or_default();
    let subject = format!(
        "[Gryvia] budget {name}: {} % threshold crossed ({})",
        d.threshold,
        of_limit(d.percent)
    );
    let limits = &budget.spec.limits;
    let limit =
        |v: Option<i64>, unit: &str| v.map_or_else(|| "none".to_owned(), |v| format!("{v} {unit}"));
    let blocks = budget
        .spec
        .alerts
        .iter()
        .any(|a| a.threshold == d.threshold && a.actions.contains(&AlertAction::Block));
    let mut text = format!(
        "The {:?} budget {name} of {} {} crossed its {} % threshold at {}.\n\n\
         Utilisation: {}\n\
         Spend: {} USD (limit: {})\n\
         GPU-hours: {} (limit: {})\n\
         Period started: {}\n",
        budget.spec.period.type_,
        scope_text(budget),
        budget.spec.scope.name,
        d.threshold,
        d.time.0,
        of_limit(d.percent),
        d.spend_usd.as_str(),
        limit(limits.cost_usd, "USD"),
        d.gpu_hours.as_str(),
        limit(limits.gpu_hours, "GPU-hours"),
        d.period_start.0,
    );
    if blocks && d.percent >= 100 {
        text.push_str("\nNew GPU jobs in this scope are rejected by the admission gate.\n");
    }
    text.push_str(&format!("\nAlert id: {}\n", d.id));
    (subject, text)
}

impl BudgetReconciler {
    /// Adds a pending delivery of the alert of `alert` crossed now to `log` for each of its
    /// channels that can be sent; an Event for each that cannot.
    fn raise_alerts(
        &self,
        plan: &mut Plan<GryviaBudgetStatus>,
        budget: &GryviaBudget,
        tenant_emails: &[String],
        alert: &BudgetAlert,
        c: &Crossing,
        log: &mut Vec<AlertDelivery>,
    ) {
        let mut not_sent = |why: String| {
            plan.event(
                EventType::Warning,
                "AlertNotSent",
                format!("the {} % threshold's alert: {why}", alert.threshold),
            );
        };
        for channel in [AlertChannel::Webhook, AlertChannel::Email] {
            let action = match channel {
                AlertChannel::Webhook => AlertAction::Webhook,
                AlertChannel::Email => AlertAction::Email,
            };
            if !alert.actions.contains(&action) {
                continue;
            }
            match (
                channel,
                self.alerts.webhook.is_some(),
                self.alerts.recipients(budget, tenant_emails),
            ) {
                (AlertChannel::Webhook, false, _) => {
                    not_sent(
                        "action webhook, but the quota-operator has no --budget-webhook-url"
                            .to_owned(),
                    );
                    continue;
                }
                (AlertChannel::Email, _, None) => {
                    not_sent(
                        "action email, but the quota-operator has no --smtp-server".to_owned(),
                    );
                    continue;
                }
                (AlertChannel::Email, _, Some(to)) if to.is_empty() => {
                    not_sent("action email, but nobody to send it to (spec.emailRecipients, the tenant's notifications.email, the quota-operator's --budget-email-to)".to_owned());
                    continue;
                }
                _ => {}
            }
            let id = alert_id(budget, c.period_start, alert.threshold, channel);
            if log.iter().any(|d| d.id == id) {
                continue;
            }
            log.push(AlertDelivery {
                id,
                channel,
                threshold: alert.threshold,
                percent: c.percent,
                spend_usd: c.spend_usd.clone(),
                gpu_hours: c.gpu_hours.clone(),
                period_start: Time(c.period_start),
                time: Time(c.now),
                attempts: 0,
                last_attempt: None,
                response_code: None,
                error: None,
                state: DeliveryState::Pending,
            });
        }
    }

    /// Sends the due pending deliveries of `log` (a channel the operator no longer has gives
    /// its deliveries up), and asks to be woken for the rest.
    fn send_due(
        &self,
        plan: &mut Plan<GryviaBudgetStatus>,
        budget: &GryviaBudget,
        tenant_emails: &[String],
        log: &mut [AlertDelivery],
        now: Timestamp,
    ) {
        let recipients = self.alerts.recipients(budget, tenant_emails);
        for d in log.iter_mut().filter(|d| d.state == DeliveryState::Pending) {
            let gone = match d.channel {
                AlertChannel::Webhook => self
                    .alerts
                    .webhook
                    .is_none()
                    .then_some("--budget-webhook-url"),
                AlertChannel::Email => recipients
                    .as_ref()
                    .is_none_or(Vec::is_empty)
                    .then_some("--smtp-server or recipients"),
            };
            if let Some(what) = gone {
                d.state = DeliveryState::GaveUp;
                d.error = Some(format!("the quota-operator no longer has {what}"));
            }
        }
        let (send, wake) = delivery::due(log, now);
        for d in send {
            match (d.channel, &self.alerts.webhook, &recipients) {
                (AlertChannel::Webhook, Some(w), _) => plan.notifications.push(Notification {
                    id: d.id.clone(),
                    url: w.url.clone(),
                    secret: w.secret.clone(),
                    body: alert_body(budget, d),
                    timeout_ms: None,
                }),
                (AlertChannel::Email, _, Some(to)) => {
                    let (subject, text) = alert_email(budget, d);
                    plan.emails.push(Email {
                        id: d.id.clone(),
                        to: to.clone(),
                        subject,
                        text,
                    });
                }
                _ => {}
            }
        }
        if let Some(wait) = wake {
            plan.requeue(wait);
        }
    }
}

/// The Ready condition of a budget in `state` at `used` percent.
fn ready(budget: &GryviaBudget, state: BudgetState, used: i64, now: Timestamp) -> Condition {
    let (cs, reason, message) = match state {
        BudgetState::Blocked => (
            Status::False,
            "Blocked",
            format!(
                "{}: new jobs in the scope are rejected by the admission gate",
                of_limit(used)
            ),
        ),
        BudgetState::Exceeded => (Status::True, "Exceeded", of_limit(used)),
        _ => (Status::True, "Counted", of_limit(used)),
    };
    conditions::new(
        conditions::READY,
        cs,
        reason,
        message,
        budget.metadata.generation,
        now,
    )
}

/// Utilisation as people read it: `N % of the limit`, or `at a limit of 0` (a limit of 0 is
/// always reached: its utilisation is unbounded).
pub fn of_limit(percent: i64) -> String {
    if percent == i64::MAX {
        "at a limit of 0".to_owned()
    } else {
        format!("{percent} % of the limit")
    }
}

fn scope_text(budget: &GryviaBudget) -> &'static str {
    match budget.spec.scope.type_ {
        BudgetScopeType::Team => "team",
        BudgetScopeType::Tenant => "tenant",
        BudgetScopeType::Namespace => "namespace",
        BudgetScopeType::Cluster => "cluster",
    }
}

/// The budgets that block new jobs of `tenant` in `namespace` (state `blocked`), by name.
pub fn blocking<'a>(
    budgets: impl IntoIterator<Item = &'a GryviaBudget>,
    tenant: Option<&str>,
    namespace: &str,
) -> Vec<String> {
    let mut out: Vec<String> = budgets
        .into_iter()
        .filter(|b| b.status.as_ref().and_then(|s| s.state) == Some(BudgetState::Blocked))
        .filter(|b| covers(b, tenant, namespace))
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reconcile;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn budget(extra: serde_json::Value) -> GryviaBudget {
        let mut spec = serde_json::json!({
            "scope": {"type": "tenant", "name": "ml"},
            "period": {"type": "monthly"},
            "limits": {"costUSD": 100},
            "alerts": [{"threshold": 50}, {"threshold": 90, "actions": ["email"]}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                s.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget",
            "metadata": {"name": "ml-monthly", "generation": 1}, "spec": spec
        }))
        .unwrap()
    }

    fn record(
        tenant: &str,
        sku: &str,
        gpus: i32,
        start: &str,
        end: Option<&str>,
    ) -> GryviaUsageRecord {
        let mut spec = serde_json::json!({
            "tenant": tenant, "namespace": format!("tenant-{tenant}"),
            "workload": {"kind": "GryviaAIJob", "name": "j"}, "sku": sku,
            "gpuCount": gpus, "startTime": start,
        });
        if let Some(e) = end {
            spec["endTime"] = e.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord",
            "metadata": {"name": "r"}, "spec": spec
        }))
        .unwrap()
    }

    fn skus() -> Vec<Sku> {
        vec![
            Sku {
                name: "h100".into(),
                gpu_product: "H100".into(),
                price_micros: 4_000_000,
                currency: "USD".into(),
            },
            Sku {
                name: "eu".into(),
                gpu_product: "EU".into(),
                price_micros: 1_000_000,
                currency: "EUR".into(),
            },
        ]
    }

    #[test]
    fn periods_follow_the_utc_calendar() {
        let now = ts("2026-08-13T15:00:00Z"); // a Thursday
        let p = |k| {
            let (a, b) = period(k, now);
            (a.to_string(), b.to_string())
        };
        assert_eq!(
            p(PeriodType::Daily),
            ("2026-08-13T00:00:00Z".into(), "2026-08-14T00:00:00Z".into())
        );
        assert_eq!(
            p(PeriodType::Weekly),
            ("2026-08-10T00:00:00Z".into(), "2026-08-17T00:00:00Z".into())
        );
        assert_eq!(
            p(PeriodType::Monthly),
            ("2026-08-01T00:00:00Z".into(), "2026-09-01T00:00:00Z".into())
        );
        assert_eq!(
            p(PeriodType::Quarterly),
            ("2026-07-01T00:00:00Z".into(), "2026-10-01T00:00:00Z".into())
        );
        assert_eq!(
            p(PeriodType::Yearly),
            ("2026-01-01T00:00:00Z".into(), "2027-01-01T00:00:00Z".into())
        );
    }

    #[test]
    fn spend_counts_the_part_of_each_record_in_the_period_and_scope() {
        let b = budget(serde_json::json!({}));
        let world = BudgetWorld {
            records: vec![
                // 2 GPUs from July 31 22:00 to August 1 02:00: 2 hours in August.
                record(
                    "ml",
                    "h100",
                    2,
                    "2026-07-31T22:00:00Z",
                    Some("2026-08-01T02:00:00Z"),
                ),
                // Open since August 2 00:00, 1 GPU: 24 hours up to now.
                record("ml", "h100", 1, "2026-08-02T00:00:00Z", None),
                // Another tenant, and a record in euros.
                record("cv", "h100", 8, "2026-08-02T00:00:00Z", None),
                record("ml", "eu", 1, "2026-08-02T00:00:00Z", None),
            ],
            skus: skus(),
            tenant_emails: Vec::new(),
        };
        let s = spend(
            &b,
            &world,
            ts("2026-08-01T00:00:00Z"),
            ts("2026-08-03T00:00:00Z"),
        );
        assert_eq!(s.gpu_seconds, (4 + 24 + 24) * 3600);
        assert_eq!(s.usd_micros, (4 + 24) * 4_000_000);
        assert_eq!(s.uncounted, ["EUR"]);
    }

    #[test]
    fn a_network_record_counts_its_amount_whole_in_the_period_it_starts_in() {
        let b = budget(serde_json::json!({}));
        let net = |start: &str, currency: &str| {
            let mut r = record("ml", "", 0, start, None);
            r.spec.network = Some(gryvia_types::NetworkUsage {
                egress_bytes: 1 << 30,
                cross_zone_bytes: 0,
                amount: Decimal::parse("0.25").unwrap(),
                currency: currency.into(),
            });
            r
        };
        let world = BudgetWorld {
            records: vec![
                net("2026-07-31T23:00:00Z", "USD"),
                net("2026-08-01T00:00:00Z", "USD"),
                net("2026-08-02T00:00:00Z", "CHF"),
            ],
            skus: skus(),
            tenant_emails: Vec::new(),
        };
        let s = spend(
            &b,
            &world,
            ts("2026-08-01T00:00:00Z"),
            ts("2026-08-03T00:00:00Z"),
        );
        assert_eq!((s.usd_micros, s.gpu_seconds), (250_000, 0));
        assert_eq!(s.uncounted, ["CHF"]);
    }

    #[test]
    fn states_alerts_and_the_forecast() {
        let mut b = budget(serde_json::json!({}));
        let now = ts("2026-08-11T00:00:00Z"); // 10 days into a 31-day month
        // 1 GPU for 10 hours at 4.00: 40 USD of 100.
        let mut world = BudgetWorld {
            records: vec![record(
                "ml",
                "h100",
                1,
                "2026-08-01T00:00:00Z",
                Some("2026-08-01T10:00:00Z"),
            )],
            skus: skus(),
            tenant_emails: Vec::new(),
        };
        let plan = BudgetReconciler::default().reconcile(&b, &world, now);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.state, Some(BudgetState::Ok));
        assert_eq!(st.spend_usd.as_ref().unwrap().as_str(), "40");
        assert_eq!(st.gpu_hours.as_ref().unwrap().as_str(), "10");
        assert_eq!(
            st.forecast_usd.as_ref().unwrap().as_str(),
            "124",
            "40 in 10 days of 31"
        );
        assert_eq!(st.period_start, Some(Time(ts("2026-08-01T00:00:00Z"))));
        assert!(plan.events.is_empty());
        assert_eq!(plan.requeue_after(), Some(REFRESH));
        b.status = Some(st);

        // 60 USD: past 50 %, one event, once.
        world.records.push(record(
            "ml",
            "h100",
            1,
            "2026-08-02T00:00:00Z",
            Some("2026-08-02T05:00:00Z"),
        ));
        let plan = BudgetReconciler::default().reconcile(&b, &world, now);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.state, Some(BudgetState::Warning));
        assert_eq!(st.alerted_thresholds, [50]);
        assert_eq!(plan.events.len(), 1);
        assert!(
            plan.events[0]
                .message
                .contains("is at 60 % of the limit (threshold 50 %)"),
            "{}",
            plan.events[0].message
        );
        b.status = Some(st);
        let again = BudgetReconciler::default().reconcile(&b, &world, now);
        assert!(
            again.events.is_empty() && again.status.is_none(),
            "{:?}",
            again.summary()
        );

        // 100 USD without enforcement: exceeded; with it: blocked.
        world.records.push(record(
            "ml",
            "h100",
            1,
            "2026-08-03T00:00:00Z",
            Some("2026-08-03T10:00:00Z"),
        ));
        let st = BudgetReconciler::default()
            .reconcile(&b, &world, now)
            .status
            .unwrap();
        assert_eq!(st.state, Some(BudgetState::Exceeded));
        assert_eq!(st.alerted_thresholds, [50, 90]);
        let mut enforced = budget(serde_json::json!({"enforcement": {"enabled": true}}));
        enforced.status = b.status.clone();
        let st = BudgetReconciler::default()
            .reconcile(&enforced, &world, now)
            .status
            .unwrap();
        assert_eq!(st.state, Some(BudgetState::Blocked));
        let ready = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(ready.reason, "Blocked");
        // An alert with the block action blocks too.
        let alert_blocks =
            budget(serde_json::json!({"alerts": [{"threshold": 100, "actions": ["block"]}]}));
        assert_eq!(
            BudgetReconciler::default()
                .reconcile(&alert_blocks, &world, now)
                .status
                .unwrap()
                .state,
            Some(BudgetState::Blocked)
        );

        // Next month: thresholds alert again, the spend starts from zero.
        let mut b2 = enforced.clone();
        b2.status = Some(st);
        let st = BudgetReconciler::default()
            .reconcile(&b2, &world, ts("2026-09-01T00:30:00Z"))
            .status
            .unwrap();
        assert_eq!(st.state, Some(BudgetState::Ok));
        assert!(st.alerted_thresholds.is_empty());
        assert_eq!(st.forecast_usd, None, "no forecast in the first hour");
    }

    fn alerting() -> BudgetReconciler {
        BudgetReconciler {
            alerts: AlertChannels {
                webhook: Some(AlertWebhook {
                    url: "https://alerts.example/budget".to_owned(),
                    secret: Some((
                        "gryvia-system".into(),
                        "budget-hook".into(),
                        "secret".into(),
                    )),
                }),
                email_to: Some(vec![
                    "ops@example.com".to_owned(),
                    "lead@example.com".to_owned(),
                ]),
                max_attempts: 3,
            },
        }
    }

    fn sixty_dollars() -> BudgetWorld {
        BudgetWorld {
            records: vec![record(
                "ml",
                "h100",
                1,
                "2026-08-01T00:00:00Z",
                Some("2026-08-01T15:00:00Z"),
            )],
            skus: skus(),
            tenant_emails: Vec::new(),
        }
    }

    fn answer(id: &str, status: Option<u16>, error: Option<&str>) -> Delivery {
        Delivery {
            id: id.to_owned(),
            status,
            error: error.map(str::to_owned),
        }
    }

    #[test]
    fn a_crossed_threshold_is_posted_and_mailed_once_with_a_stable_id() {
        let r = alerting();
        let mut b = budget(serde_json::json!({
            "alerts": [{"threshold": 50, "actions": ["webhook", "email"]}],
            "emailRecipients": ["lead@example.com"],
        }));
        b.metadata.uid = Some("b-uid".into());
        let world = sixty_dollars();
        let now = ts("2026-08-11T00:00:00Z");
        let mut plan = r.reconcile(&b, &world, now);
        let period = ts("2026-08-01T00:00:00Z").as_second();
        let hook_id = format!("b-uid.{period}.50.webhook");
        let mail_id = format!("b-uid.{period}.50.email");
        assert_eq!(plan.notifications.len(), 1);
        let n = &plan.notifications[0];
        assert_eq!(n.id, hook_id);
        assert_eq!(n.url, "https://alerts.example/budget");
        assert_eq!(
            n.secret,
            Some((
                "gryvia-system".into(),
                "budget-hook".into(),
                "secret".into()
            ))
        );
        assert_eq!(n.body["type"], "budget.threshold");
        assert_eq!(n.body["threshold"], 50);
        assert_eq!(n.body["percent"], 60);
        assert_eq!(n.body["spendUSD"], "60");
        assert_eq!(
            n.body["scope"],
            serde_json::json!({"type": "tenant", "name": "ml"})
        );
        assert_eq!(n.body["actions"], serde_json::json!(["webhook", "email"]));
        assert_eq!(plan.emails.len(), 1);
        let m = &plan.emails[0];
        assert_eq!(m.id, mail_id);
        assert_eq!(
            m.to,
            ["lead@example.com", "ops@example.com"],
            "each once, the budget's first"
        );
        assert_eq!(
            m.subject,
            "[Gryvia] budget ml-monthly: 50 % threshold crossed (60 % of the limit)"
        );
        assert!(
            m.text.contains("Spend: 60 USD (limit: 100 USD)"),
            "{}",
            m.text
        );
        let st = plan.status.as_ref().unwrap();
        assert_eq!(st.deliveries.len(), 2);
        assert!(
            st.deliveries
                .iter()
                .all(|d| d.state == DeliveryState::Pending)
        );

        // The webhook answered, the mail server refused: only the e-mail is tried again, after
        // the backoff.
        assert!(r.record_deliveries(
            &b,
            &mut plan,
            &[
                answer(&hook_id, Some(200), None),
                answer(&mail_id, Some(451), Some("SMTP server mail:25: try later")),
            ],
            now,
        ));
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
        let st = plan.status.clone().unwrap();
        assert_eq!(st.deliveries[0].state, DeliveryState::Delivered);
        assert_eq!(st.deliveries[1].state, DeliveryState::Pending);
        assert_eq!(st.deliveries[1].response_code, Some(451));
        b.status = Some(st);
        let soon = r.reconcile(&b, &world, ts("2026-08-11T00:00:02Z"));
        assert!(soon.notifications.is_empty() && soon.emails.is_empty());
        assert!(soon.events.is_empty(), "the threshold alerts once");
        assert_eq!(soon.requeue_after(), Some(Duration::from_secs(3)));
        let later = r.reconcile(&b, &world, ts("2026-08-11T00:00:05Z"));
        assert!(later.notifications.is_empty());
        assert_eq!(later.emails.len(), 1);
        assert_eq!(
            later.emails[0], plan.emails[0],
            "the same message on every attempt"
        );
    }

    #[test]
    fn a_delivery_out_of_attempts_is_given_up_with_a_warning() {
        let mut r = alerting();
        r.alerts.max_attempts = 1;
        let b = budget(serde_json::json!({"alerts": [{"threshold": 50, "actions": ["webhook"]}]}));
        let now = ts("2026-08-11T00:00:00Z");
        let mut plan = r.reconcile(&b, &sixty_dollars(), now);
        let id = plan.notifications[0].id.clone();
        r.record_deliveries(
            &b,
            &mut plan,
            &[answer(&id, None, Some("connection refused"))],
            now,
        );
        let st = plan.status.clone().unwrap();
        assert_eq!(st.deliveries[0].state, DeliveryState::GaveUp);
        let warning = plan
            .events
            .iter()
            .find(|e| e.reason == "AlertDeliveryFailed")
            .unwrap();
        assert_eq!(
            warning.message,
            "webhook alert of the 50 % threshold: gave up after 1 attempts, last: connection refused"
        );
    }

    #[test]
    fn an_alert_without_its_channel_says_why_and_a_channel_gone_gives_up_its_deliveries() {
        let b = budget(serde_json::json!({
            "alerts": [{"threshold": 50, "actions": ["webhook", "email"]}],
        }));
        let now = ts("2026-08-11T00:00:00Z");
        let plan = BudgetReconciler::default().reconcile(&b, &sixty_dollars(), now);
        let not_sent: Vec<&str> = plan
            .events
            .iter()
            .filter(|e| e.reason == "AlertNotSent")
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(
            not_sent,
            [
                "the 50 % threshold's alert: action webhook, but the quota-operator has no --budget-webhook-url",
                "the 50 % threshold's alert: action email, but the quota-operator has no --smtp-server",
            ]
        );
        assert!(plan.status.unwrap().deliveries.is_empty());

        let mut no_one = alerting();
        no_one.alerts.email_to = Some(Vec::new());
        let plan = no_one.reconcile(&b, &sixty_dollars(), now);
        assert!(
            plan.events
                .iter()
                .any(|e| e.message.contains("nobody to send it to"))
        );

        // Logged while the webhook was configured, then the operator lost the flag.
        let mut logged = b.clone();
        logged.status = alerting().reconcile(&b, &sixty_dollars(), now).status;
        let plan = BudgetReconciler::default().reconcile(&logged, &sixty_dollars(), now);
        let st = plan.status.unwrap();
        assert!(plan.notifications.is_empty() && plan.emails.is_empty());
        assert!(
            st.deliveries
                .iter()
                .all(|d| d.state == DeliveryState::GaveUp)
        );
        assert_eq!(
            st.deliveries[0].error.as_deref(),
            Some("the quota-operator no longer has --budget-webhook-url")
        );
    }

    #[test]
    fn the_next_period_alerts_again_under_new_ids() {
        let r = alerting();
        let mut b =
            budget(serde_json::json!({"alerts": [{"threshold": 50, "actions": ["webhook"]}]}));
        b.metadata.uid = Some("b-uid".into());
        let mut world = sixty_dollars();
        let now = ts("2026-08-11T00:00:00Z");
        let mut plan = r.reconcile(&b, &world, now);
        let id = plan.notifications[0].id.clone();
        r.record_deliveries(&b, &mut plan, &[answer(&id, Some(204), None)], now);
        b.status = plan.status;
        world.records.push(record(
            "ml",
            "h100",
            1,
            "2026-09-01T00:00:00Z",
            Some("2026-09-01T15:00:00Z"),
        ));
        let next = r.reconcile(&b, &world, ts("2026-09-02T00:00:00Z"));
        let ids: Vec<&str> = next.notifications.iter().map(|n| n.id.as_str()).collect();
        let september = ts("2026-09-01T00:00:00Z").as_second();
        assert_eq!(ids, [format!("b-uid.{september}.50.webhook")]);
        assert_eq!(next.status.unwrap().deliveries.len(), 2);
    }

    #[test]
    fn a_limit_of_zero_reads_as_such() {
        assert_eq!(of_limit(42), "42 % of the limit");
        assert_eq!(of_limit(i64::MAX), "at a limit of 0");
    }

    #[test]
    fn gpu_hour_limits_count_too() {
        let b = budget(
            serde_json::json!({"limits": {"gpuHours": 10}, "enforcement": {"enabled": true}}),
        );
        let world = BudgetWorld {
            records: vec![record(
                "ml",
                "unpriced-product",
                2,
                "2026-08-01T00:00:00Z",
                Some("2026-08-01T05:00:00Z"),
            )],
            skus: skus(),
            tenant_emails: Vec::new(),
        };
        let st = BudgetReconciler::default()
            .reconcile(&b, &world, ts("2026-08-11T00:00:00Z"))
            .status
            .unwrap();
        assert_eq!(st.state, Some(BudgetState::Blocked));
        assert_eq!(st.spend_usd.unwrap().as_str(), "0");
    }

    #[test]
    fn blocking_budgets_are_found_by_scope() {
        let mut t = budget(serde_json::json!({}));
        t.status = Some(GryviaBudgetStatus {
            state: Some(BudgetState::Blocked),
            ..Default::default()
        });
        let mut n =
            budget(serde_json::json!({"scope": {"type": "namespace", "name": "tenant-cv"}}));
        n.metadata.name = Some("cv-ns".into());
        n.status = t.status.clone();
        let mut ok = budget(serde_json::json!({"scope": {"type": "cluster", "name": "all"}}));
        ok.metadata.name = Some("cluster".into());
        let all = [t, n, ok];
        assert_eq!(blocking(&all, Some("ml"), "tenant-ml"), ["ml-monthly"]);
        assert_eq!(blocking(&all, Some("cv"), "tenant-cv"), ["cv-ns"]);
        assert!(blocking(&all, None, "default").is_empty());
    }

    fn scoped(type_: &str, name: &str) -> GryviaBudget {
        let mut b = budget(serde_json::json!({"scope": {"type": type_, "name": name}}));
        b.metadata.name = Some(format!("{type_}-{name}"));
        b
    }

    #[test]
    fn a_scope_is_a_tenant_a_namespace_or_the_cluster() {
        assert_eq!(scope(&scoped("team", "ml")), Scope::Tenant("ml"));
        assert_eq!(scope(&scoped("tenant", "ml")), Scope::Tenant("ml"));
        assert_eq!(scope(&scoped("namespace", "ns")), Scope::Namespace("ns"));
        assert_eq!(scope(&scoped("cluster", "all")), Scope::Cluster);
    }

    #[test]
    fn a_budget_covers_its_tenants_work_its_namespace_or_everything() {
        assert!(covers(&scoped("tenant", "ml"), Some("ml"), "x"));
        assert!(!covers(&scoped("tenant", "ml"), None, "ml"));
        assert!(covers(&scoped("namespace", "ns"), None, "ns"));
        assert!(covers(&scoped("cluster", "all"), None, "x"));
    }

    #[test]
    fn a_tenants_budgets_are_those_scoped_to_it_by_name() {
        let all = [
            scoped("tenant", "ml"),
            scoped("cluster", "all"),
            scoped("team", "ml"),
            scoped("tenant", "cv"),
        ];
        let names: Vec<&str> = budgets_of_tenant(&all, "ml")
            .iter()
            .filter_map(|b| b.metadata.name.as_deref())
            .collect();
        assert_eq!(names, vec!["team-ml", "tenant-ml"]);
    }

    #[test]
    fn the_tenants_notification_addresses_get_its_budgets_e_mail_each_once() {
        let channels = AlertChannels {
            email_to: Some(vec!["ops@example.com".into()]),
            ..AlertChannels::default()
        };
        let b: GryviaBudget = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "b"},
            "spec": {"scope": {"type": "tenant", "name": "ml"}, "period": {"type": "monthly"},
                     "limits": {"costUSD": 1}, "emailRecipients": ["lead@example.com"]}
        }))
        .unwrap();
        assert_eq!(
            channels
                .recipients(&b, &["team@example.com".into(), "lead@example.com".into()])
                .unwrap(),
            ["lead@example.com", "team@example.com", "ops@example.com"]
        );
        assert_eq!(
            AlertChannels::default().recipients(&b, &["team@example.com".into()]),
            None,
            "no SMTP server"
        );
    }
}
