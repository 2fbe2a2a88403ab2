//! Invoices, as pure functions: a GryviaInvoice lists a tenant's charges for a period from
//! its GryviaUsageRecords, priced at the GryviaGpuSku catalogue, and is issued once the period
//! has ended.
//!
//! A record counts for the part of its interval inside the period (an open record up to now),
//! so consecutive invoices split a record at their boundary and never count a second of it
//! twice. Money is exact in micro-units: the charge of a record from `a` to `b` is
//! `F(b) - F(a)`, where `F(t)` is the record's cost from its start to `t` rounded down to the
//! micro-unit, so the pieces of a record in any split of a period add up to exactly what the
//! whole period charges ([`piece`]). Usage priced in another currency than the invoice's is
//! listed per currency, not added; usage of a SKU missing from the catalogue is listed in
//! GPU-hours, not priced.
//!
//! Network usage records (written by the network-operator from a GryviaNetworkCost with
//! `usageRecords`) are priced already: each covers one hour and counts whole in the period its
//! start falls in, as a network line per GryviaNetworkCost ([`network_in_span`]).
//!
//! An invoice is `Open` while its period runs (its lines grow) and `Issued` once the period
//! has ended and [`InvoiceReconciler::grace`] has passed (records of jobs that ran up to the end
//! are closed by then); from then on nothing changes it. An invoice whose period overlaps an
//! earlier invoice of the same tenant is refused (`Ready=False`, `Overlaps`): a record is never
//! in two invoices.
//!
//! [`monthly`] is the monthly issuing: the invoices a tenant has for the current and the
//! previous UTC month, named `<tenant>-<yyyy>-<mm>`.

use std::collections::BTreeMap;
use std::time::Duration;

use gryvia_types::conditions::{self, Status};
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use gryvia_types::money::{Decimal, MICROS};
use gryvia_types::{
    CurrencyAmount, DeliveryState, GryviaGpuSku, GryviaInvoice, GryviaInvoiceSpec,
    GryviaInvoiceStatus, GryviaTenant, GryviaUsageRecord, InvoiceJob, InvoiceLine,
    InvoiceNetworkLine, InvoicePhase, PeriodType, UnpricedUsage, WebhookDelivery,
};
use serde::{Deserialize, Serialize};

use crate::budget::period;
use crate::delivery;
use crate::metering::{Sku, sku_of};
use crate::{Child, Delivery, EventType, Notification, Plan, Timestamp};

/// How often an open invoice is brought up to date.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How long after its period an invoice is issued, unless the operator says otherwise.
pub const GRACE: Duration = Duration::from_secs(300);
/// Attempts of an invoice's webhook delivery before it is given up.
pub const WEBHOOK_ATTEMPTS: i32 = 10;
/// The label naming an invoice's tenant.
pub const TENANT_LABEL: &str = "gryvia.io/tenant";

/// What the invoice reconcile knows: every usage record, the catalogue, every invoice.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InvoiceWorld {
    /// Usage records (the reconcile picks its tenant's).
    pub records: Vec<GryviaUsageRecord>,
    /// The catalogue.
    pub skus: Vec<Sku>,
    /// Invoices (the reconcile looks for its tenant's that overlap it).
    pub invoices: Vec<GryviaInvoice>,
}

/// The charge of a record's interval from `a` to `b` (seconds since the epoch): GPU-seconds
/// and micro-units, for a record that started at `start` with `gpus` GPUs at `price_micros` a
/// GPU-hour.
///
/// # Guarantees
/// For `a <= m <= b`, `piece(a, m) + piece(m, b) == piece(a, b)` exactly, in both GPU-seconds
/// and micro-units.
pub fn piece(start: i64, gpus: i64, price_micros: i64, a: i64, b: i64) -> (i64, i64) {
    let cost = |t: i64| -> i128 {
        i128::from(gpus) * i128::from(t - start) * i128::from(price_micros) / 3600
    };
    let seconds = gpus.saturating_mul(b - a);
    let micros = i64::try_from(cost(b) - cost(a)).unwrap_or(i64::MAX);
    (seconds, micros)
}

/// A record's part in a span, priced.
struct Piece<'a> {
    record: &'a GryviaUsageRecord,
    sku: Option<&'a Sku>,
    price: i64,
    seconds: i64,
    micros: i64,
}

/// The parts of `tenant`'s records from `from` to `to` (an open record counts up to `to`).
fn pieces<'a>(
    tenant: &'a str,
    from: Timestamp,
    to: Timestamp,
    records: impl IntoIterator<Item = &'a GryviaUsageRecord> + 'a,
    skus: &'a [Sku],
) -> impl Iterator<Item = Piece<'a>> + 'a {
    let (from, to) = (from.as_second(), to.as_second());
    records
        .into_iter()
        .filter(move |r| r.spec.tenant == tenant && r.spec.network.is_none())
        .filter_map(move |r| {
            let start = r.spec.start_time.0.as_second();
            let end = r.spec.end_time.as_ref().map_or(to, |t| t.0.as_second());
            let (a, b) = (start.max(from), end.min(to));
            if b <= a {
                return None;
            }
            let sku = sku_of(r, skus);
            let price = sku.map_or(0, |s| crate::metering::unit_price(r, s));
            let (seconds, micros) = piece(start, i64::from(r.spec.gpu_count.max(0)), price, a, b);
            Some(Piece {
                record: r,
                sku,
                price,
                seconds,
                micros,
            })
        })
}

/// `tenant`'s spend in `currency` (micro-units, network records included) and GPU-seconds
/// from `from` to `to`: the totals of [`charges`] without its per-job detail (what the admission gate needs per
/// review).
pub fn totals<'a>(
    tenant: &'a str,
    from: Timestamp,
    to: Timestamp,
    records: impl IntoIterator<Item = &'a GryviaUsageRecord> + Clone + 'a,
    skus: &'a [Sku],
    currency: &str,
) -> (i64, i64) {
    let network = records
        .clone()
        .into_iter()
        .filter(|r| r.spec.tenant == tenant && network_in_span(r, from, to))
        .filter_map(|r| r.spec.network.as_ref())
        .filter(|n| n.currency == currency)
        .fold(0_i64, |m, n| {
            m.saturating_add(n.amount.micros().unwrap_or(0))
        });
    pieces(tenant, from, to, records, skus).fold((network, 0_i64), |(m, g), p| {
        let m = if p.sku.is_some_and(|s| s.currency == currency) {
            m.saturating_add(p.micros)
        } else {
            m
        };
        (m, g.saturating_add(p.seconds))
    })
}

/// One job's charge on one SKU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobCharge {
    /// GPU-seconds.
    pub gpu_seconds: i64,
    /// Micro-units of the SKU's currency (0 when unpriced).
    pub micros: i64,
    /// The SKU's currency (`None` when the SKU is missing from the catalogue).
    pub currency: Option<String>,
    /// The SKU's price a GPU-hour, micro-units.
    pub price_micros: i64,
    /// GPU-seconds with a utilisation reading (of the records' measured mean).
    pub measured_gpu_seconds: i64,
    /// Utilisation percent times those GPU-seconds.
    pub percent_gpu_seconds: i64,
    /// Of the measured GPU-seconds, those the GPUs idled.
    pub idle_gpu_seconds: i64,
}

impl JobCharge {
    /// The mean utilisation of the measured GPU-seconds, percent.
    pub fn mean_percent(&self) -> Option<i32> {
        (self.measured_gpu_seconds > 0).then(|| {
            i32::try_from(self.percent_gpu_seconds / self.measured_gpu_seconds).unwrap_or(100)
        })
    }
}

/// The network transfer one GryviaNetworkCost priced in one currency.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkCharge {
    /// Bytes sent out of the cluster.
    pub egress_bytes: i64,
    /// Bytes exchanged with other zones.
    pub cross_zone_bytes: i64,
    /// Micro-units.
    pub micros: i64,
}

/// A tenant's charges over a span: per (namespace, workload kind, workload name, SKU), and
/// its network records' per (GryviaNetworkCost, currency).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charges {
    /// Per job and SKU.
    pub jobs: BTreeMap<(String, String, String, String), JobCharge>,
    /// Per GryviaNetworkCost and currency.
    pub network: BTreeMap<(String, String), NetworkCharge>,
    /// Records with a part in the span.
    pub records: usize,
}

/// Whether network record `r` counts in the span from `from` to `to`: a network record is
/// counted whole, in the span its start falls in (its interval is one hour, priced as one).
pub fn network_in_span(r: &GryviaUsageRecord, from: Timestamp, to: Timestamp) -> bool {
    let start = r.spec.start_time.0;
    r.spec.network.is_some() && from <= start && start < to
}

/// `tenant`'s network records in the span from `from` to `to` (see [`network_in_span`]).
fn network_charges<'a>(
    tenant: &'a str,
    from: Timestamp,
    to: Timestamp,
    records: &'a [GryviaUsageRecord],
) -> impl Iterator<Item = (&'a str, &'a gryvia_types::NetworkUsage)> + 'a {
    records
        .iter()
        .filter(move |r| r.spec.tenant == tenant && network_in_span(r, from, to))
        .filter_map(|r| Some((r.spec.workload.name.as_str(), r.spec.network.as_ref()?)))
}

impl Charges {
    /// Micro-units per currency.
    pub fn totals(&self) -> BTreeMap<String, i64> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for c in self.jobs.values() {
            if let Some(cur) = &c.currency {
                let t = out.entry(cur.clone()).or_default();
                *t = t.saturating_add(c.micros);
            }
        }
        for ((_, cur), n) in &self.network {
            let t = out.entry(cur.clone()).or_default();
            *t = t.saturating_add(n.micros);
        }
        out
    }

    /// GPU-seconds in all.
    pub fn gpu_seconds(&self) -> i64 {
        self.jobs.values().map(|c| c.gpu_seconds).sum()
    }
}

/// The charges of `tenant`'s records from `from` to `to` (an open record counts up to `to`).
pub fn charges(
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
    records: &[GryviaUsageRecord],
    skus: &[Sku],
) -> Charges {
    let mut out = Charges::default();
    for Piece {
        record: r,
        sku,
        price,
        seconds,
        micros,
    } in pieces(tenant, from, to, records, skus)
    {
        out.records += 1;
        let w = &r.spec.workload;
        let key = (
            r.spec.namespace.clone(),
            w.kind.clone(),
            w.name.clone(),
            sku.map_or_else(|| r.spec.sku.clone(), |s| s.name.clone()),
        );
        let c = out.jobs.entry(key).or_default();
        c.gpu_seconds = c.gpu_seconds.saturating_add(seconds);
        c.micros = c.micros.saturating_add(micros);
        c.currency = sku.map(|s| s.currency.clone());
        c.price_micros = price;
        // The record's measured mean stands for its whole interval's piece here.
        if let Some(u) = r
            .status
            .as_ref()
            .and_then(|s| s.utilisation.as_ref())
            .filter(|u| u.sampled_seconds > 0)
        {
            let mean = i64::from(u.mean_percent.clamp(0, 100));
            c.measured_gpu_seconds = c.measured_gpu_seconds.saturating_add(seconds);
            c.percent_gpu_seconds = c.percent_gpu_seconds.saturating_add(seconds * mean);
            c.idle_gpu_seconds = c
                .idle_gpu_seconds
                .saturating_add(seconds * (100 - mean) / 100);
        }
    }
    for (source, n) in network_charges(tenant, from, to, records) {
        out.records += 1;
        let c = out
            .network
            .entry((source.to_owned(), n.currency.clone()))
            .or_default();
        c.egress_bytes = c.egress_bytes.saturating_add(n.egress_bytes);
        c.cross_zone_bytes = c.cross_zone_bytes.saturating_add(n.cross_zone_bytes);
        c.micros = c.micros.saturating_add(n.amount.micros().unwrap_or(0));
    }
    out
}

/// GPU-seconds as GPU-hours, to the micro-unit (rounded down).
pub fn hours(gpu_seconds: i64) -> Decimal {
    Decimal::from_micros(
        i64::try_from(i128::from(gpu_seconds) * i128::from(MICROS) / 3600).unwrap_or(i64::MAX),
    )
}

/// What an invoice in `currency` lists for `charges`: the lines, the jobs, the other
/// currencies, the unpriced usage, the total and GPU-hours, written into `status`.
pub fn fill(status: &mut GryviaInvoiceStatus, currency: &str, charges: &Charges) {
    // Per SKU and unit price (a reservation's discounted idle time is a line of its own).
    let mut lines: BTreeMap<(&str, i64), (i64, i64)> = BTreeMap::new();
    let mut unpriced: BTreeMap<&str, i64> = BTreeMap::new();
    status.jobs.clear();
    for ((namespace, kind, name, sku), c) in &charges.jobs {
        match &c.currency {
            None => *unpriced.entry(sku).or_default() += c.gpu_seconds,
            Some(cur) => {
                if cur == currency {
                    let l = lines.entry((sku, c.price_micros)).or_default();
                    l.0 += c.gpu_seconds;
                    l.1 += c.micros;
                }
                status.jobs.push(InvoiceJob {
                    namespace: namespace.clone(),
                    kind: kind.clone(),
                    name: name.clone(),
                    sku: sku.clone(),
                    gpu_hours: hours(c.gpu_seconds),
                    amount: Decimal::from_micros(c.micros),
                    currency: cur.clone(),
                    mean_utilisation_percent: c.mean_percent(),
                    idle_gpu_hours: c.mean_percent().map(|_| hours(c.idle_gpu_seconds)),
                });
            }
        }
    }
    status.line_items = lines
        .iter()
        .map(|((sku, price), (seconds, micros))| InvoiceLine {
            sku: (*sku).to_owned(),
            gpu_hours: hours(*seconds),
            unit_price: Decimal::from_micros(*price),
            amount: Decimal::from_micros(*micros),
        })
        .collect();
    status.network_lines = charges
        .network
        .iter()
        .filter(|((_, cur), _)| cur == currency)
        .map(|((source, _), n)| InvoiceNetworkLine {
            source: source.clone(),
            egress_bytes: n.egress_bytes,
            cross_zone_bytes: n.cross_zone_bytes,
            amount: Decimal::from_micros(n.micros),
        })
        .collect();
    status.unpriced = unpriced
        .iter()
        .map(|(sku, seconds)| UnpricedUsage {
            sku: (*sku).to_owned(),
            gpu_hours: hours(*seconds),
        })
        .collect();
    let totals = charges.totals();
    status.total = Some(Decimal::from_micros(
        totals.get(currency).copied().unwrap_or(0),
    ));
    status.other_currencies = totals
        .iter()
        .filter(|(c, _)| c.as_str() != currency)
        .map(|(c, m)| CurrencyAmount {
            currency: c.clone(),
            amount: Decimal::from_micros(*m),
        })
        .collect();
    status.gpu_hours = Some(hours(charges.gpu_seconds()));
    let measured = charges.jobs.values().any(|c| c.measured_gpu_seconds > 0);
    status.idle_gpu_hours =
        measured.then(|| hours(charges.jobs.values().map(|c| c.idle_gpu_seconds).sum()));
    status.records = i32::try_from(charges.records).unwrap_or(i32::MAX);
}

/// The earlier invoice of the same tenant whose period overlaps `invoice`'s, if any (earlier:
/// created before it, or at the same time with a smaller name).
pub fn overlapping<'a>(
    invoice: &GryviaInvoice,
    invoices: &'a [GryviaInvoice],
) -> Option<&'a GryviaInvoice> {
    let key = |i: &GryviaInvoice| {
        (
            i.metadata.creation_timestamp.as_ref().map(|t| t.0),
            i.metadata.name.clone(),
        )
    };
    let (s, e) = (&invoice.spec.period_start.0, &invoice.spec.period_end.0);
    invoices
        .iter()
        .filter(|o| {
            o.spec.tenant == invoice.spec.tenant && o.metadata.name != invoice.metadata.name
        })
        .filter(|o| o.spec.period_start.0 < *e && *s < o.spec.period_end.0)
        .filter(|o| key(o) < key(invoice))
        .min_by_key(|o| key(o))
}

/// The JSON body of an issued invoice's webhook (the same on every attempt).
pub fn webhook_body(invoice: &GryviaInvoice, id: &str) -> serde_json::Value {
    let st = invoice.status.clone().unwrap_or_default();
    serde_json::json!({
        "id": id,
        "type": "invoice.issued",
        "invoice": {"name": invoice.metadata.name, "uid": invoice.metadata.uid},
        "tenant": invoice.spec.tenant,
        "periodStart": invoice.spec.period_start,
        "periodEnd": invoice.spec.period_end,
        "issuedAt": st.issued_at,
        "currency": invoice.spec.currency,
        "total": st.total,
        "gpuHours": st.gpu_hours,
        "lineItems": st.line_items,
        "jobs": st.jobs,
        "otherCurrencies": st.other_currencies,
        "unpriced": st.unpriced,
    })
}

/// The GryviaInvoice controller's policy.
#[derive(Clone, Debug)]
pub struct InvoiceReconciler {
    /// How long after its period an invoice is issued.
    pub grace: Duration,
    /// Attempts of a webhook delivery.
    pub max_attempts: i32,
    /// The namespace of the webhook's signing Secrets (the operator's).
    pub secret_namespace: String,
}

impl Default for InvoiceReconciler {
    fn default() -> Self {
        InvoiceReconciler {
            grace: GRACE,
            max_attempts: WEBHOOK_ATTEMPTS,
            secret_namespace: "default".to_owned(),
        }
    }
}

fn ready(
    invoice: &GryviaInvoice,
    status: Status,
    reason: &str,
    message: String,
    now: Timestamp,
) -> Condition {
    conditions::new(
        conditions::READY,
        status,
        reason,
        message,
        invoice.metadata.generation,
        now,
    )
}

/// The status of `invoice` refused for overlapping `other`: no lines, a condition saying why.
fn refused(
    invoice: &GryviaInvoice,
    other: &GryviaInvoice,
    current: &GryviaInvoiceStatus,
    now: Timestamp,
) -> GryviaInvoiceStatus {
    let mut status = GryviaInvoiceStatus {
        conditions: current.conditions.clone(),
        ..GryviaInvoiceStatus::default()
    };
    conditions::set(
        &mut status.conditions,
        ready(
            invoice,
            Status::False,
            "Overlaps",
            format!(
                "its period overlaps invoice {} of tenant {} ({} to {}): a usage record is never in two invoices; delete one of them",
                other.metadata.name.as_deref().unwrap_or_default(),
                invoice.spec.tenant,
                other.spec.period_start.0,
                other.spec.period_end.0
            ),
            now,
        ),
    );
    status
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    delivery::plus(t, d)
}

fn wait_until(t: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
}

impl InvoiceReconciler {
    /// The webhook of an issued invoice: its delivery sent when due.
    fn send_webhook(
        &self,
        plan: &mut Plan<GryviaInvoiceStatus>,
        invoice: &GryviaInvoice,
        status: &mut GryviaInvoiceStatus,
        now: Timestamp,
    ) {
        let Some(hook) = &invoice.spec.webhook else {
            return;
        };
        let uid = invoice.metadata.uid.clone().unwrap_or_default();
        let d = status
            .webhook_delivery
            .get_or_insert_with(|| WebhookDelivery {
                id: format!("{uid}.issued"),
                attempts: 0,
                last_attempt: None,
                response_code: None,
                error: None,
                state: DeliveryState::Pending,
            })
            .clone();
        let (send, wake) = delivery::due(std::slice::from_ref(&d), now);
        if !send.is_empty() {
            let mut issued = invoice.clone();
            issued.status = Some(status.clone());
            plan.notifications.push(Notification {
                id: d.id.clone(),
                url: hook.url.clone(),
                secret: Some((
                    self.secret_namespace.clone(),
                    hook.secret_ref.name.clone(),
                    hook.secret_ref.key.clone(),
                )),
                body: webhook_body(&issued, &d.id),
                timeout_ms: None,
            });
        }
        if let Some(wait) = wake {
            plan.requeue(wait);
        }
    }
}

impl crate::Reconcile for InvoiceReconciler {
    type Object = GryviaInvoice;
    type World = InvoiceWorld;
    type Status = GryviaInvoiceStatus;

    fn name(&self) -> &'static str {
        "gryvia-invoices"
    }

    fn reconcile(
        &self,
        invoice: &GryviaInvoice,
        world: &InvoiceWorld,
        now: Timestamp,
    ) -> Plan<GryviaInvoiceStatus> {
        let mut plan = Plan::new();
        let current = invoice.status.clone().unwrap_or_default();
        let mut status = current.clone();
        let spec = &invoice.spec;
        if current.phase == Some(InvoicePhase::Issued) {
            // Final: only its webhook may still be owed.
            self.send_webhook(&mut plan, invoice, &mut status, now);
            plan.set_status_if_changed(invoice.status.as_ref(), status);
            return plan;
        }
        if let Some(other) = overlapping(invoice, &world.invoices) {
            plan.set_status_if_changed(
                invoice.status.as_ref(),
                refused(invoice, other, &current, now),
            );
            return plan;
        }
        let end = spec.period_end.0;
        let until = end.min(now).max(spec.period_start.0);
        let charges = charges(
            &spec.tenant,
            spec.period_start.0,
            until,
            &world.records,
            &world.skus,
        );
        fill(&mut status, &spec.currency, &charges);
        let issue_at = after(end, self.grace);
        let total = status
            .total
            .clone()
            .unwrap_or_else(|| Decimal::from_micros(0));
        if now >= issue_at {
            status.phase = Some(InvoicePhase::Issued);
            status.issued_at = Some(Time(now));
            conditions::set(
                &mut status.conditions,
                ready(
                    invoice,
                    Status::True,
                    "Issued",
                    format!(
                        "issued: {} {} for {} usage records",
                        total.as_str(),
                        spec.currency,
                        charges.records
                    ),
                    now,
                ),
            );
            plan.event(
                EventType::Normal,
                "Issued",
                format!(
                    "invoice of tenant {} from {} to {} issued: {} {}, {} GPU-hours, {} usage records",
                    spec.tenant,
                    spec.period_start.0,
                    end,
                    total.as_str(),
                    spec.currency,
                    status.gpu_hours.as_ref().map_or("0", Decimal::as_str),
                    charges.records
                ),
            );
            self.send_webhook(&mut plan, invoice, &mut status, now);
        } else {
            status.phase = Some(InvoicePhase::Open);
            conditions::set(
                &mut status.conditions,
                ready(
                    invoice,
                    Status::True,
                    "Open",
                    format!(
                        "open until {end}, issued at {issue_at}; {} {} so far",
                        total.as_str(),
                        spec.currency
                    ),
                    now,
                ),
            );
            plan.requeue(
                REFRESH
                    .min(wait_until(issue_at, now))
                    .max(Duration::from_secs(1)),
            );
        }
        plan.set_status_if_changed(invoice.status.as_ref(), status);
        plan
    }

    fn record_deliveries(
        &self,
        invoice: &GryviaInvoice,
        plan: &mut Plan<GryviaInvoiceStatus>,
        deliveries: &[Delivery],
        now: Timestamp,
    ) -> bool {
        let status = plan
            .status
            .get_or_insert_with(|| invoice.status.clone().unwrap_or_default());
        let Some(d) = status.webhook_delivery.as_mut() else {
            return true;
        };
        let outcomes =
            delivery::record_all(std::slice::from_mut(d), deliveries, self.max_attempts, now);
        status.webhook_delivered = d.state == DeliveryState::Delivered;
        let gave_up = outcomes.gave_up.first().map(|(_, why)| {
            format!(
                "the invoice's webhook: gave up after {} attempts, last: {why}",
                d.attempts
            )
        });
        if let Some(wait) = outcomes.retry_in {
            plan.requeue(wait);
        }
        if let Some(message) = gave_up {
            plan.event(EventType::Warning, "DeliveryFailed", message);
        }
        true
    }
}

/// The name of `tenant`'s invoice for the month starting at `start`: `<tenant>-<yyyy>-<mm>`.
pub fn monthly_name(tenant: &str, start: Timestamp) -> String {
    let d = start.to_zoned(jiff::tz::TimeZone::UTC).date();
    format!("{tenant}-{:04}-{:02}", d.year(), d.month())
}

/// The monthly invoices `tenant` should have at `now`: the current UTC month's and, when the
/// tenant existed before it began, the previous month's (so an operator started on the first
/// of a month still issues the last one). Unowned: an invoice outlives its tenant.
pub fn monthly(tenant: &GryviaTenant, now: Timestamp) -> Vec<Child> {
    let Some(name) = tenant.metadata.name.as_deref() else {
        return Vec::new();
    };
    let created = tenant
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let (start, end) = period(PeriodType::Monthly, now);
    let (prev_start, _) = period(
        PeriodType::Monthly,
        delivery::minus(start, Duration::from_secs(1)),
    );
    let mut months = vec![(start, end)];
    if created < start {
        months.insert(0, (prev_start, start));
    }
    months
        .into_iter()
        .filter_map(|(s, e)| {
            let mut invoice = GryviaInvoice::new(
                &monthly_name(name, s),
                GryviaInvoiceSpec {
                    tenant: name.to_owned(),
                    period_start: Time(s),
                    period_end: Time(e),
                    currency: "USD".to_owned(),
                    webhook: None,
                },
            );
            invoice
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(TENANT_LABEL.to_owned(), name.to_owned());
            Child::from_resource(&invoice).ok().map(Child::unowned)
        })
        .collect()
}

/// When the monthly invoices change next: the start of the next UTC month.
pub fn next_month(now: Timestamp) -> Timestamp {
    period(PeriodType::Monthly, now).1
}

/// The monthly issuing's policy: every GryviaTenant has its invoices for the current and the
/// previous UTC month ([`monthly`]); it writes no status.
#[derive(Clone, Debug, Default)]
pub struct MonthlyInvoices;

impl crate::Reconcile for MonthlyInvoices {
    type Object = GryviaTenant;
    type World = ();
    type Status = gryvia_types::GryviaTenantStatus;

    fn name(&self) -> &'static str {
        "gryvia-monthly-invoices"
    }

    fn reconcile(
        &self,
        tenant: &GryviaTenant,
        _world: &(),
        now: Timestamp,
    ) -> Plan<gryvia_types::GryviaTenantStatus> {
        let mut plan = Plan::new();
        for child in monthly(tenant, now) {
            plan.apply_child(child);
        }
        let wait = wait_until(next_month(now), now);
        plan.requeue(wait.clamp(Duration::from_secs(1), Duration::from_secs(3600)));
        plan
    }
}

/// A tenant's spend in a period so far, as `gryvia cost` and the gateway show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Tenant.
    pub tenant: String,
    /// `month` or `week`.
    pub period: String,
    /// Start of the period.
    pub period_start: String,
    /// End of the period.
    pub period_end: String,
    /// Spend so far, US dollars.
    #[serde(rename = "spendUSD")]
    pub spend_usd: Decimal,
    /// GPU-hours so far.
    pub gpu_hours: Decimal,
    /// The spend so far extrapolated to the end of the period (from one hour into it).
    #[serde(rename = "forecastUSD", skip_serializing_if = "Option::is_none")]
    pub forecast_usd: Option<Decimal>,
    /// Usage records counted.
    pub records: i32,
    /// Lines per SKU, charges per job, other currencies and unpriced usage (with `--detailed`
    /// the tables show them; JSON and YAML always carry them).
    pub detail: GryviaInvoiceStatus,
}

/// The cost of tenant `name` in the `which` period containing `now` (a month unless weekly).
pub fn cost_of(
    name: &str,
    which: PeriodType,
    records: &[GryviaUsageRecord],
    skus: &[GryviaGpuSku],
    now: jiff::Timestamp,
) -> Cost {
    let (kind, label) = match which {
        PeriodType::Weekly => (PeriodType::Weekly, "week"),
        _ => (PeriodType::Monthly, "month"),
    };
    let (start, end) = period(kind, now);
    let mut catalogue: Vec<_> = skus.iter().filter_map(Sku::of).collect();
    catalogue.sort_by(|a, b| a.name.cmp(&b.name));
    let counted = charges(name, start, now, records, &catalogue);
    let mut detail = GryviaInvoiceStatus::default();
    fill(&mut detail, "USD", &counted);
    let spend_micros = counted.totals().get("USD").copied().unwrap_or(0);
    let forecast_usd = crate::budget::forecast(spend_micros, start, end, now);
    Cost {
        tenant: name.to_owned(),
        period: label.to_owned(),
        period_start: start.to_string(),
        period_end: end.to_string(),
        spend_usd: Decimal::from_micros(spend_micros),
        gpu_hours: detail
            .gpu_hours
            .clone()
            .unwrap_or_else(|| Decimal::from_micros(0)),
        forecast_usd,
        records: detail.records,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reconcile;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn record(
        tenant: &str,
        job: &str,
        sku: &str,
        gpus: i32,
        start: &str,
        end: Option<&str>,
    ) -> GryviaUsageRecord {
        let mut spec = serde_json::json!({
            "tenant": tenant, "namespace": format!("tenant-{tenant}"),
            "workload": {"kind": "GryviaAIJob", "name": job}, "sku": sku,
            "gpuCount": gpus, "startTime": start,
        });
        if let Some(e) = end {
            spec["endTime"] = e.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord",
            "metadata": {"name": format!("{job}-r")}, "spec": spec
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
                price_micros: 1_500_000,
                currency: "EUR".into(),
            },
        ]
    }

    fn invoice(name: &str, start: &str, end: &str, created: &str) -> GryviaInvoice {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaInvoice",
            "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1, "creationTimestamp": created},
            "spec": {"tenant": "ml", "periodStart": start, "periodEnd": end}
        }))
        .unwrap()
    }

    fn world() -> InvoiceWorld {
        InvoiceWorld {
            records: vec![
                // 2 GPUs, 10 h, 5 of them in August: 10 GPU-hours at 4.00.
                record(
                    "ml",
                    "train",
                    "h100",
                    2,
                    "2026-07-31T19:00:00Z",
                    Some("2026-08-01T05:00:00Z"),
                ),
                // Still running: counts up to now.
                record("ml", "serve", "h100", 1, "2026-08-10T00:00:00Z", None),
                record(
                    "ml",
                    "euro",
                    "eu",
                    1,
                    "2026-08-02T00:00:00Z",
                    Some("2026-08-02T02:00:00Z"),
                ),
                record(
                    "ml",
                    "odd",
                    "A100",
                    1,
                    "2026-08-03T00:00:00Z",
                    Some("2026-08-03T01:30:00Z"),
                ),
                record(
                    "cv",
                    "other",
                    "h100",
                    8,
                    "2026-08-03T00:00:00Z",
                    Some("2026-08-03T01:00:00Z"),
                ),
            ],
            skus: skus(),
            invoices: Vec::new(),
        }
    }

    #[test]
    fn an_open_invoice_lists_its_tenants_charges_in_the_period_so_far() {
        let inv = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        let now = ts("2026-08-10T06:00:00Z");
        let plan = InvoiceReconciler::default().reconcile(&inv, &world(), now);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.phase, Some(InvoicePhase::Open));
        assert_eq!(st.records, 4, "the cv record is another tenant's");
        assert_eq!(st.line_items.len(), 1);
        let l = &st.line_items[0];
        assert_eq!(
            (
                l.sku.as_str(),
                l.gpu_hours.as_str(),
                l.unit_price.as_str(),
                l.amount.as_str()
            ),
            ("h100", "16", "4", "64")
        );
        assert_eq!(
            st.total.unwrap().as_str(),
            "64",
            "10 GPU-hours of train in August, 6 of serve so far"
        );
        assert_eq!(
            st.other_currencies,
            [CurrencyAmount {
                currency: "EUR".into(),
                amount: Decimal::from_micros(3_000_000)
            }]
        );
        assert_eq!(
            st.unpriced,
            [UnpricedUsage {
                sku: "A100".into(),
                gpu_hours: Decimal::from_micros(1_500_000)
            }]
        );
        let jobs: Vec<(&str, &str, &str)> = st
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.amount.as_str(), j.currency.as_str()))
            .collect();
        assert_eq!(
            jobs,
            [
                ("euro", "3", "EUR"),
                ("serve", "24", "USD"),
                ("train", "40", "USD")
            ]
        );
        assert_eq!(st.gpu_hours.unwrap().as_str(), "19.5");
        assert!(plan.events.is_empty());
        assert_eq!(plan.requeue_after(), Some(REFRESH));
    }

    fn network(
        name: &str,
        start: &str,
        end: Option<&str>,
        egress: i64,
        amount: &str,
    ) -> GryviaUsageRecord {
        let mut spec = serde_json::json!({
            "tenant": "ml", "namespace": "tenant-ml",
            "workload": {"kind": "GryviaNetworkCost", "name": "egress"},
            "gpuCount": 0, "startTime": start,
            "network": {"egressBytes": egress, "crossZoneBytes": 0, "amount": amount, "currency": "USD"},
        });
        if let Some(e) = end {
            spec["endTime"] = e.into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn network_records_are_network_lines_counted_whole_in_the_period_they_start_in() {
        let mut w = world();
        w.records.extend([
            // Starts in July: July's, though it ends in August.
            network(
                "n1",
                "2026-07-31T23:00:00Z",
                Some("2026-08-01T00:00:00Z"),
                100,
                "1.5",
            ),
            network(
                "n2",
                "2026-08-01T00:00:00Z",
                Some("2026-08-01T01:00:00Z"),
                200,
                "0.25",
            ),
            // Open (the hour runs): counted as it stands.
            network("n3", "2026-08-10T05:00:00Z", None, 300, "0.5"),
        ]);
        let inv = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        let now = ts("2026-08-10T06:00:00Z");
        let st = InvoiceReconciler::default()
            .reconcile(&inv, &w, now)
            .status
            .unwrap();
        assert_eq!(
            st.network_lines,
            [InvoiceNetworkLine {
                source: "egress".into(),
                egress_bytes: 500,
                cross_zone_bytes: 0,
                amount: Decimal::from_micros(750_000),
            }]
        );
        assert_eq!(st.total.unwrap().as_str(), "64.75");
        assert_eq!(st.records, 6);
        assert_eq!(
            st.gpu_hours.unwrap().as_str(),
            "19.5",
            "no GPU-hours of network"
        );
        assert!(st.unpriced.iter().all(|u| !u.sku.is_empty()));
        // The admission gate's month spend counts them too.
        let refs: Vec<&GryviaUsageRecord> = w.records.iter().collect();
        let (usd, _) = totals(
            "ml",
            ts("2026-08-01T00:00:00Z"),
            now,
            refs.iter().copied(),
            &w.skus,
            "USD",
        );
        assert_eq!(usd, 64_750_000);
    }

    #[test]
    fn the_idle_share_of_a_jobs_gpus_is_listed_where_readings_measured_it() {
        let mut w = world();
        // train's GPUs were 25 % busy: of its 10 August GPU-hours, 7.5 idled.
        w.records[0].status = Some(gryvia_types::GryviaUsageRecordStatus {
            utilisation: Some(gryvia_types::RecordUtilisation {
                mean_percent: 25,
                sampled_seconds: 36_000,
                percent_seconds: 900_000,
                idle_gpu_seconds: 54_000,
                sampled_at: Time(ts("2026-08-01T05:00:00Z")),
            }),
            ..Default::default()
        });
        let inv = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        let st = InvoiceReconciler::default()
            .reconcile(&inv, &w, ts("2026-08-10T06:00:00Z"))
            .status
            .unwrap();
        let train = st.jobs.iter().find(|j| j.name == "train").unwrap();
        assert_eq!(train.mean_utilisation_percent, Some(25));
        assert_eq!(train.idle_gpu_hours.as_ref().unwrap().as_str(), "7.5");
        let serve = st.jobs.iter().find(|j| j.name == "serve").unwrap();
        assert_eq!(
            (serve.mean_utilisation_percent, serve.idle_gpu_hours.clone()),
            (None, None)
        );
        assert_eq!(st.idle_gpu_hours.unwrap().as_str(), "7.5");
    }

    #[test]
    fn an_invoice_is_issued_once_after_its_period_and_the_grace_then_never_changes() {
        let mut inv = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        let r = InvoiceReconciler::default();
        let mut w = world();
        let before_grace = r.reconcile(&inv, &w, ts("2026-09-01T00:04:00Z"));
        assert_eq!(
            before_grace.status.as_ref().unwrap().phase,
            Some(InvoicePhase::Open)
        );
        assert_eq!(before_grace.requeue_after(), Some(Duration::from_secs(60)));
        let at = ts("2026-09-01T00:05:00Z");
        let plan = r.reconcile(&inv, &w, at);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.phase, Some(InvoicePhase::Issued));
        assert_eq!(st.issued_at, Some(Time(at)));
        // serve ran 22 days of August: 528 GPU-hours.
        assert_eq!(st.total.as_ref().unwrap().as_str(), "2152");
        assert_eq!(plan.events.len(), 1);
        assert!(plan.events[0].message.starts_with("invoice of tenant ml from 2026-08-01T00:00:00Z to 2026-09-01T00:00:00Z issued: 2152 USD"), "{}", plan.events[0].message);
        inv.status = Some(st);
        // A late record, an edited catalogue, any time later: nothing changes.
        w.records.push(record(
            "ml",
            "late",
            "h100",
            4,
            "2026-08-30T00:00:00Z",
            Some("2026-08-31T00:00:00Z"),
        ));
        w.skus[0].price_micros = 9_000_000;
        let again = r.reconcile(&inv, &w, ts("2026-10-05T00:00:00Z"));
        assert!(again.is_noop(), "{:?}", again.summary());
    }

    #[test]
    fn an_invoice_overlapping_an_earlier_one_of_its_tenant_is_refused() {
        let month = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        let week = invoice(
            "ml-week",
            "2026-08-10T00:00:00Z",
            "2026-08-17T00:00:00Z",
            "2026-08-12T00:00:00Z",
        );
        let mut w = world();
        w.invoices = vec![month.clone(), week.clone()];
        let plan = InvoiceReconciler::default().reconcile(&week, &w, ts("2026-08-12T00:00:00Z"));
        let st = plan.status.unwrap();
        assert!(st.line_items.is_empty() && st.total.is_none() && st.phase.is_none());
        let c = conditions::find(&st.conditions, conditions::READY).unwrap();
        assert_eq!(c.reason, "Overlaps");
        assert!(
            c.message
                .starts_with("its period overlaps invoice ml-2026-08 of tenant ml"),
            "{}",
            c.message
        );
        // The earlier one is not refused, and another tenant's or an adjacent period is no overlap.
        assert!(overlapping(&month, &w.invoices).is_none());
        let next = invoice(
            "ml-2026-09",
            "2026-09-01T00:00:00Z",
            "2026-10-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
        );
        assert!(overlapping(&next, &[month, week]).is_none());
    }

    #[test]
    fn an_issued_invoice_with_a_webhook_posts_it_once_with_its_lines() {
        let mut inv = invoice(
            "ml-2026-08",
            "2026-08-01T00:00:00Z",
            "2026-09-01T00:00:00Z",
            "2026-08-01T00:00:00Z",
        );
        inv.spec.webhook = Some(gryvia_types::InvoiceWebhook {
            url: "https://billing.example/in".into(),
            allow_insecure: false,
            secret_ref: gryvia_types::SecretKeyRef {
                name: "billing".into(),
                key: "secret".into(),
            },
        });
        let r = InvoiceReconciler {
            secret_namespace: "gryvia-system".into(),
            ..InvoiceReconciler::default()
        };
        let now = ts("2026-09-02T00:00:00Z");
        let mut plan = r.reconcile(&inv, &world(), now);
        assert_eq!(plan.notifications.len(), 1);
        let n = plan.notifications[0].clone();
        assert_eq!(n.id, "ml-2026-08-uid.issued");
        assert_eq!(
            n.secret,
            Some(("gryvia-system".into(), "billing".into(), "secret".into()))
        );
        assert_eq!(n.body["type"], "invoice.issued");
        assert_eq!(n.body["total"], "2152");
        assert_eq!(n.body["lineItems"][0]["sku"], "h100");
        r.record_deliveries(
            &inv,
            &mut plan,
            &[Delivery {
                id: n.id.clone(),
                status: Some(503),
                error: None,
            }],
            now,
        );
        let st = plan.status.clone().unwrap();
        assert!(!st.webhook_delivered);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(5)));
        inv.status = Some(st);
        let mut retry = r.reconcile(&inv, &world(), ts("2026-09-02T00:00:05Z"));
        assert_eq!(
            retry.notifications,
            std::slice::from_ref(&n),
            "the same delivery"
        );
        r.record_deliveries(
            &inv,
            &mut retry,
            &[Delivery {
                id: n.id.clone(),
                status: Some(200),
                error: None,
            }],
            now,
        );
        inv.status = retry.status;
        assert!(inv.status.as_ref().unwrap().webhook_delivered);
        assert!(
            r.reconcile(&inv, &world(), ts("2026-09-03T00:00:00Z"))
                .is_noop()
        );
    }

    #[test]
    fn a_tenant_has_this_months_invoice_and_last_months_when_it_existed_then() {
        let mut t: GryviaTenant = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
            "metadata": {"name": "ml", "creationTimestamp": "2026-07-15T00:00:00Z"},
            "spec": {"displayName": "ML"}
        }))
        .unwrap();
        let now = ts("2026-09-01T00:10:00Z");
        let names: Vec<String> = monthly(&t, now)
            .iter()
            .map(|c| c.object_ref.name.clone())
            .collect();
        assert_eq!(names, ["ml-2026-08", "ml-2026-09"]);
        let aug = &monthly(&t, now)[0];
        assert!(!aug.owned, "an invoice outlives its tenant");
        assert_eq!(aug.object["spec"]["periodStart"], "2026-08-01T00:00:00Z");
        assert_eq!(aug.object["spec"]["periodEnd"], "2026-09-01T00:00:00Z");
        assert_eq!(aug.object["metadata"]["labels"][TENANT_LABEL], "ml");
        t.metadata.creation_timestamp = Some(Time(ts("2026-09-01T00:05:00Z")));
        let names: Vec<String> = monthly(&t, now)
            .iter()
            .map(|c| c.object_ref.name.clone())
            .collect();
        assert_eq!(names, ["ml-2026-09"]);
        let plan = MonthlyInvoices.reconcile(&t, &(), now);
        assert_eq!(plan.requeue_after(), Some(Duration::from_secs(3600)));
        assert!(plan.status.is_none());
    }
}
