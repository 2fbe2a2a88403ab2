//! Metering, as pure functions: every GPU job leaves a GryviaUsageRecord, and every record is
//! priced from the GryviaGpuSku catalogue.
//!
//! [`MeteringReconciler`] (over GryviaAIJob) writes the record `<job>-<first 8 characters of
//! its uid>` once the job has started: the tenant (its namespace's `gryvia.io/tenant` label, or
//! the namespace's name), the SKU (the catalogue entry of the job's `gpuType`, or of the GPU
//! product of the node its first worker ran on; the product itself when the catalogue has no
//! entry yet, so no usage is lost), GPUs (per worker x workers) and the interval from the job's
//! start to its completion. The record is not owned by the job: it outlives it. A finalizer
//! on the job closes a record that is still open when the job is deleted, at the time of the
//! deletion.
//!
//! [`ReservationMeteringReconciler`] (over GryviaReservation) meters a reservation's idle GPU
//! time for the owner it charges (`billing.chargeWhenIdle`), at its `billing.discount`.
//!
//! [`UsageRecordReconciler`] prices a record: GPU-seconds over its interval (up to now while
//! open, refreshed every minute) and the cost at the SKU's price per GPU-hour less the record's
//! discount, exact in micro-units (rounded down).
//!
//! What it is: an estimate. A job is metered for all its GPUs from its start to its end,
//! retries and pods waiting for a node included.

use std::collections::BTreeMap;
use std::time::Duration;

use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::money::Decimal;
use gryvia_types::{
    GryviaAIJob, GryviaAIJobStatus, GryviaReservation, GryviaReservationStatus, GryviaUsageRecord,
    GryviaUsageRecordSpec, GryviaUsageRecordStatus, OwnerType, RecordUtilisation, ReservationPhase,
    WorkloadRef,
};
use serde::{Deserialize, Serialize};

use crate::facts::PodView;
use crate::{Child, Plan, Timestamp, facts};

/// The finalizer that closes a deleted job's open record.
pub const FINALIZER: &str = gryvia_types::labels::METERING_FINALIZER;
/// How often an open record's GPU-seconds and cost are brought up to date.
pub const REFRESH: Duration = Duration::from_secs(60);

/// A catalogue entry as the metering sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sku {
    /// The GryviaGpuSku's name.
    pub name: String,
    /// Its `gpuProduct`.
    pub gpu_product: String,
    /// Price of one GPU-hour, micro-units.
    pub price_micros: i64,
    /// Currency.
    pub currency: String,
}

impl Sku {
    /// A catalogue entry (`None` when its price is malformed, which the schema prevents).
    pub fn of(sku: &gryvia_types::GryviaGpuSku) -> Option<Self> {
        Some(Sku {
            name: sku.metadata.name.clone()?,
            gpu_product: sku.spec.gpu_product.clone(),
            price_micros: sku.spec.price_per_gpu_hour.micros().ok()?,
            currency: sku.spec.currency.clone(),
        })
    }
}

/// What metering a job needs to know.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MeteringWorld {
    /// The catalogue.
    pub skus: Vec<Sku>,
    /// The `gryvia.io/tenant` label of the job's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The GPU product of the node the job's first worker ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_product: Option<String>,
}

/// The GPU product a job without `spec.gpuType` ran on: that of the node of its first worker
/// (by pod name) bound to one; `None` for a job with a `gpuType` (which names the product),
/// before any worker has a node, or when that node is gone or has no product label.
pub fn node_product<P: PodView>(
    job: &GryviaAIJob,
    pods: &[P],
    nodes: &[ObjectMeta],
) -> Option<String> {
    if job.spec.gpu_type.is_some() {
        return None;
    }
    let node = pods
        .iter()
        .filter(|p| facts::node_of(p).is_some())
        .min_by(|a, b| a.pod_meta().name.cmp(&b.pod_meta().name))
        .and_then(|p| facts::node_of(p))?;
    nodes
        .iter()
        .find(|n| n.name.as_deref() == Some(node))
        .and_then(facts::gpu_product_of)
        .map(str::to_owned)
}

/// The SKU a record of GPU product (or SKU name) `product` names: the catalogue's entry of that
/// name or product (the smallest name when several), else the product itself, so no usage is
/// lost before the catalogue has it.
pub fn sku_name(product: &str, skus: &[Sku]) -> String {
    skus.iter()
        .filter(|s| s.gpu_product == product || s.name == product)
        .map(|s| s.name.clone())
        .min()
        .unwrap_or_else(|| product.to_owned())
}

/// The SKU of a workload's record: that of the GPU product it asked for, else of its node's,
/// else `unknown` (see [`sku_name`]).
pub fn sku_of_workload(asked: Option<&str>, node: Option<&str>, skus: &[Sku]) -> String {
    asked
        .or(node)
        .map_or_else(|| "unknown".to_owned(), |p| sku_name(p, skus))
}

/// The name of a job's usage record.
pub fn record_name(job: &str, uid: &str) -> String {
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("{job}-{short}")
}

/// The labels of `job`'s usage record: its tenant and name, and, when the job has them, its
/// data classification and `spec.type` (so usage can be grouped by either).
fn record_labels(job: &GryviaAIJob, tenant: &str, name: &str) -> BTreeMap<String, String> {
    use gryvia_types::labels;
    let mut out = BTreeMap::from([
        (labels::TENANT.to_owned(), tenant.to_owned()),
        (labels::JOB_NAME.to_owned(), name.to_owned()),
    ]);
    if let Some(c) = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::DATA_CLASSIFICATION))
    {
        out.insert(labels::DATA_CLASSIFICATION.to_owned(), c.clone());
    }
    if let Some(t) = job.spec.type_ {
        out.insert(labels::JOB_TYPE.to_owned(), t.as_str().to_owned());
    }
    out
}

/// The record of `job` with its interval ending at `end` (open when `None`), or `None` for a
/// job that has not started or uses no GPU.
pub fn usage_record(
    job: &GryviaAIJob,
    world: &MeteringWorld,
    end: Option<Timestamp>,
) -> Option<GryviaUsageRecord> {
    let status = job.status.as_ref()?;
    let start = status.start_time.as_ref()?.0;
    let gpus = job.spec.gpus.checked_mul(job.spec.replicas)?;
    if gpus <= 0 {
        return None;
    }
    let name = job.metadata.name.clone()?;
    let namespace = job.metadata.namespace.clone()?;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let sku = sku_of_workload(
        job.spec.gpu_type.as_deref(),
        world.node_product.as_deref(),
        &world.skus,
    );
    let end = status.completion_time.as_ref().map(|t| t.0).or(end);
    let tenant = world.tenant.clone().unwrap_or_else(|| namespace.clone());
    Some(GryviaUsageRecord {
        metadata: ObjectMeta {
            name: Some(record_name(&name, &uid)),
            labels: Some(record_labels(job, &tenant, &name)),
            ..ObjectMeta::default()
        },
        spec: GryviaUsageRecordSpec {
            tenant,
            namespace,
            workload: WorkloadRef {
                kind: "GryviaAIJob".to_owned(),
                name,
                uid: Some(uid),
            },
            sku,
            gpu_count: gpus,
            start_time: Time(start),
            end_time: end.map(|e| Time(e.max(start))),
            discount_percent: None,
            network: None,
            template: job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(gryvia_types::labels::TEMPLATE))
                .cloned(),
        },
        status: None,
    })
}

/// Applies the record (not owned by the job: it outlives it).
fn apply_record(plan: &mut Plan<GryviaAIJobStatus>, record: Option<GryviaUsageRecord>) {
    apply_record_of(plan, record);
}

/// The metering policy over GryviaAIJobs.
#[derive(Clone, Debug, Default)]
pub struct MeteringReconciler;

impl crate::Reconcile for MeteringReconciler {
    type Object = GryviaAIJob;
    type World = MeteringWorld;
    type Status = GryviaAIJobStatus;

    fn name(&self) -> &'static str {
        "gryvia-metering"
    }

    fn reconcile(
        &self,
        job: &GryviaAIJob,
        world: &MeteringWorld,
        _now: Timestamp,
    ) -> Plan<GryviaAIJobStatus> {
        let mut plan = Plan::new();
        apply_record(&mut plan, usage_record(job, world, None));
        plan
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    fn cleanup(
        &self,
        job: &GryviaAIJob,
        world: &MeteringWorld,
        now: Timestamp,
    ) -> Plan<GryviaAIJobStatus> {
        let mut plan = Plan::new();
        let end = job
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        apply_record(&mut plan, usage_record(job, world, Some(end)));
        plan
    }
}

/// What metering a reservation's idle GPU time needs: the open records of the reservation
/// (label `gryvia.io/reservation`) and the catalogue.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ReservationMeteringWorld {
    /// The reservation's records without an end.
    pub open: Vec<GryviaUsageRecord>,
    /// The catalogue.
    pub skus: Vec<Sku>,
}

/// The tenant a reservation charges: its owner, for owner types team and tenant.
pub fn charged_tenant(r: &GryviaReservation) -> Option<&str> {
    let charged = r.spec.billing.as_ref().is_some_and(|b| b.charge_when_idle);
    (charged && matches!(r.spec.owner.type_, OwnerType::Team | OwnerType::Tenant))
        .then_some(r.spec.owner.name.as_str())
}

/// A new open record of `idle` reserved GPUs of `r` from `at`, charged to `tenant`.
fn idle_record(
    r: &GryviaReservation,
    tenant: &str,
    idle: i32,
    at: Timestamp,
    skus: &[Sku],
) -> Option<GryviaUsageRecord> {
    let name = r.metadata.name.clone()?;
    let sku = sku_name(&r.spec.resources.gpu_type, skus);
    let namespace: String = format!("tenant-{tenant}").chars().take(63).collect();
    Some(GryviaUsageRecord {
        metadata: ObjectMeta {
            name: Some(format!("{name}-idle-{}", at.as_second())),
            labels: Some(
                [
                    (gryvia_types::labels::TENANT.to_owned(), tenant.to_owned()),
                    (gryvia_types::labels::RESERVATION.to_owned(), name.clone()),
                ]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: GryviaUsageRecordSpec {
            tenant: tenant.to_owned(),
            namespace,
            workload: WorkloadRef {
                kind: "GryviaReservation".to_owned(),
                name,
                uid: r.metadata.uid.clone(),
            },
            sku,
            gpu_count: idle,
            start_time: Time(at),
            end_time: None,
            template: None,
            discount_percent: r.spec.billing.as_ref().map(|b| b.discount),
            network: None,
        },
        status: None,
    })
}

/// Closes every open record of `world` but `keep` at `at`.
fn close_open(
    plan: &mut Plan<GryviaReservationStatus>,
    world: &ReservationMeteringWorld,
    keep: Option<&str>,
    at: Timestamp,
) {
    for rec in &world.open {
        if rec.metadata.name.as_deref() == keep {
            continue;
        }
        let mut closed = rec.clone();
        closed.metadata = ObjectMeta {
            name: rec.metadata.name.clone(),
            labels: rec.metadata.labels.clone(),
            ..ObjectMeta::default()
        };
        closed.status = None;
        closed.spec.end_time = Some(Time(at.max(rec.spec.start_time.0)));
        apply_record_of(plan, Some(closed));
    }
}

fn apply_record_of<S>(plan: &mut Plan<S>, record: Option<GryviaUsageRecord>) {
    if let Some(r) = record {
        plan.apply_built(Child::from_resource(&r).map(Child::unowned));
    }
}

/// The metering policy over GryviaReservations: while a reservation that charges its owner
/// for idle time (`billing.chargeWhenIdle`, owner type team or tenant) holds GPUs no pod uses
/// (`status.idleGpus`), one open usage record of that many GPUs, from the reservation's sample
/// that saw the count; a new count closes it and opens another, and the end of the window, a
/// reservation no longer charging, or its deletion closes it. The records carry the
/// reservation's `billing.discount` and count like any job's: budgets, invoices, the gate.
#[derive(Clone, Debug, Default)]
pub struct ReservationMeteringReconciler;

impl crate::Reconcile for ReservationMeteringReconciler {
    type Object = GryviaReservation;
    type World = ReservationMeteringWorld;
    type Status = GryviaReservationStatus;

    fn name(&self) -> &'static str {
        "gryvia-reservation-metering"
    }

    fn reconcile(
        &self,
        r: &GryviaReservation,
        world: &ReservationMeteringWorld,
        now: Timestamp,
    ) -> Plan<GryviaReservationStatus> {
        let mut plan = Plan::new();
        let status = r.status.clone().unwrap_or_default();
        let active = matches!(
            status.phase,
            Some(ReservationPhase::Active | ReservationPhase::Partial)
        );
        let idle = if active { status.idle_gpus.max(0) } else { 0 };
        let at = status
            .idle_sampled_at
            .as_ref()
            .map_or(now, |t| t.0)
            .min(now);
        let tenant = charged_tenant(r).filter(|_| idle > 0);
        let keep = tenant.and_then(|_| {
            world
                .open
                .iter()
                .filter(|rec| rec.spec.gpu_count == idle)
                .max_by_key(|rec| rec.spec.start_time.0)
        });
        close_open(
            &mut plan,
            world,
            keep.and_then(|k| k.metadata.name.as_deref()),
            at,
        );
        if let (Some(t), None) = (tenant, keep) {
            apply_record_of(&mut plan, idle_record(r, t, idle, at, &world.skus));
        }
        plan
    }

    fn finalizer(&self) -> Option<&'static str> {
        Some(FINALIZER)
    }

    fn cleanup(
        &self,
        r: &GryviaReservation,
        world: &ReservationMeteringWorld,
        now: Timestamp,
    ) -> Plan<GryviaReservationStatus> {
        let mut plan = Plan::new();
        let at = r.metadata.deletion_timestamp.as_ref().map_or(now, |t| t.0);
        close_open(&mut plan, world, None, at);
        plan
    }
}

/// The priced view of `record`: GPU-seconds up to its end (or `now`) and the cost at `sku`'s
/// price, when there is one.
pub fn price(
    record: &GryviaUsageRecord,
    sku: Option<&Sku>,
    now: Timestamp,
) -> GryviaUsageRecordStatus {
    let start = record.spec.start_time.0;
    let end = record
        .spec
        .end_time
        .as_ref()
        .map_or(now, |t| t.0)
        .max(start);
    let seconds = end.duration_since(start).as_secs();
    let gpu_seconds = seconds.saturating_mul(i64::from(record.spec.gpu_count.max(0)));
    let cost = sku.map(|s| {
        let micros = i128::from(gpu_seconds) * i128::from(unit_price(record, s)) / 3600;
        Decimal::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
    });
    GryviaUsageRecordStatus {
        gpu_seconds,
        cost,
        currency: sku.map(|s| s.currency.clone()),
        utilisation: record.status.as_ref().and_then(|s| s.utilisation.clone()),
    }
}

/// `before` brought up to `at` with a reading of `percent` (the mean utilisation of the record's
/// GPUs now): the time since the last sample counts at this reading. The first reading starts
/// the count; no reading leaves it as it was.
pub fn sample_utilisation(
    before: Option<&RecordUtilisation>,
    percent: Option<i32>,
    gpus: i32,
    at: Timestamp,
) -> Option<RecordUtilisation> {
    let Some(p) = percent.map(|p| p.clamp(0, 100)) else {
        return before.cloned();
    };
    let Some(b) = before else {
        return Some(RecordUtilisation {
            mean_percent: p,
            sampled_seconds: 0,
            percent_seconds: 0,
            idle_gpu_seconds: 0,
            sampled_at: Time(at),
        });
    };
    let dt = (at.as_second() - b.sampled_at.0.as_second()).max(0);
    if dt == 0 {
        return Some(b.clone());
    }
    let sampled_seconds = b.sampled_seconds.saturating_add(dt);
    let percent_seconds = b.percent_seconds.saturating_add(i64::from(p) * dt);
    let idle = i64::from(gpus.max(0)) * dt * i64::from(100 - p) / 100;
    Some(RecordUtilisation {
        mean_percent: i32::try_from(percent_seconds / sampled_seconds).unwrap_or(100),
        sampled_seconds,
        percent_seconds,
        idle_gpu_seconds: b.idle_gpu_seconds.saturating_add(idle),
        sampled_at: Time(at),
    })
}

/// The mean of the node agents' utilisation readings of a record's GPUs, percent (`None`
/// without a reading).
pub fn mean_utilisation(readings: impl IntoIterator<Item = i32>) -> Option<i32> {
    let (sum, n) = readings.into_iter().fold((0_i64, 0_i64), |(s, n), p| {
        (s + i64::from(p.clamp(0, 100)), n + 1)
    });
    (n > 0).then(|| i32::try_from(sum / n).unwrap_or(100))
}

/// What pricing a usage record needs: the catalogue, and the mean utilisation of its job's
/// GPUs now (from the node agents' readings of the nodes its pods ran on), when known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct UsageRecordWorld {
    /// The catalogue.
    pub skus: Vec<Sku>,
    /// Mean utilisation percent of the record's GPUs now.
    pub utilisation: Option<i32>,
}

/// The price of one GPU-hour of `record` at `sku`, micro-units: the SKU's, less the record's
/// `discountPercent`.
pub fn unit_price(record: &GryviaUsageRecord, sku: &Sku) -> i64 {
    let discount = i64::from(record.spec.discount_percent.unwrap_or(0).clamp(0, 100));
    sku.price_micros.saturating_mul(100 - discount) / 100
}

/// The SKU a record names: by name, else by GPU product (a record made before its product was
/// in the catalogue).
pub fn sku_of<'a>(record: &GryviaUsageRecord, skus: &'a [Sku]) -> Option<&'a Sku> {
    skus.iter().find(|s| s.name == record.spec.sku).or_else(|| {
        skus.iter()
            .filter(|s| s.gpu_product == record.spec.sku)
            .min_by(|a, b| a.name.cmp(&b.name))
    })
}

/// The pricing policy over GryviaUsageRecords; its world is the catalogue.
#[derive(Clone, Debug, Default)]
pub struct UsageRecordReconciler;

impl crate::Reconcile for UsageRecordReconciler {
    type Object = GryviaUsageRecord;
    type World = UsageRecordWorld;
    type Status = GryviaUsageRecordStatus;

    fn name(&self) -> &'static str {
        "gryvia-usage-records"
    }

    fn reconcile(
        &self,
        record: &GryviaUsageRecord,
        world: &UsageRecordWorld,
        now: Timestamp,
    ) -> Plan<GryviaUsageRecordStatus> {
        let mut plan = Plan::new();
        // A network record is priced by the GryviaNetworkCost that wrote it.
        if let Some(n) = &record.spec.network {
            let status = GryviaUsageRecordStatus {
                cost: Some(n.amount.clone()),
                currency: Some(n.currency.clone()),
                ..GryviaUsageRecordStatus::default()
            };
            plan.set_status_if_changed(record.status.as_ref(), status);
            return plan;
        }
        let mut status = price(record, sku_of(record, &world.skus), now);
        // Readings count up to the record's end: a closed record is sampled once more at it.
        let end = record.spec.end_time.as_ref().map_or(now, |t| t.0.min(now));
        let last = status.utilisation.as_ref().map(|u| u.sampled_at.0);
        if last.is_none_or(|t| t < end) {
            status.utilisation = sample_utilisation(
                status.utilisation.as_ref(),
                world.utilisation,
                record.spec.gpu_count,
                end,
            );
        }
        plan.set_status_if_changed(record.status.as_ref(), status);
        if record.spec.end_time.is_none() {
            plan.requeue(REFRESH);
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reconcile;
    use k8s_openapi::api::core::v1::Pod;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn job(gpu_type: Option<&str>) -> GryviaAIJob {
        let mut spec =
            serde_json::json!({"image": "registry.local/train:1", "gpus": 4, "replicas": 2});
        if let Some(t) = gpu_type {
            spec["gpuType"] = t.into();
        }
        let mut j: GryviaAIJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": "train", "namespace": "tenant-ml", "uid": "1234abcd-5678-90ef-aaaa-bbbbccccdddd"},
            "spec": spec
        }))
        .unwrap();
        j.status = Some(GryviaAIJobStatus {
            start_time: Some(Time(ts("2026-01-01T10:00:00Z"))),
            ..GryviaAIJobStatus::default()
        });
        j
    }

    fn skus() -> Vec<Sku> {
        vec![Sku {
            name: "h100-80g".into(),
            gpu_product: "NVIDIA-H100-80GB-HBM3".into(),
            price_micros: 4_100_000,
            currency: "USD".into(),
        }]
    }

    fn world() -> MeteringWorld {
        MeteringWorld {
            skus: skus(),
            tenant: Some("ml".into()),
            node_product: None,
        }
    }

    #[test]
    fn a_started_job_gets_an_open_record_that_closes_at_its_completion() {
        let mut j = job(Some("NVIDIA-H100-80GB-HBM3"));
        let plan = MeteringReconciler.reconcile(&j, &world(), ts("2026-01-01T10:30:00Z"));
        assert_eq!(plan.apply.len(), 1);
        let c = &plan.apply[0];
        assert!(!c.owned, "the record outlives the job");
        assert_eq!(c.object_ref.name, "train-1234abcd");
        assert_eq!(c.object_ref.namespace, None, "cluster-scoped");
        assert_eq!(c.object["spec"]["tenant"], "ml");
        assert_eq!(c.object["spec"]["sku"], "h100-80g");
        assert_eq!(c.object["spec"]["gpuCount"], 8);
        assert_eq!(
            c.object["spec"]["workload"]["uid"],
            "1234abcd-5678-90ef-aaaa-bbbbccccdddd"
        );
        assert!(c.object["spec"].get("endTime").is_none());
        j.status.as_mut().unwrap().completion_time = Some(Time(ts("2026-01-01T12:00:00Z")));
        let plan = MeteringReconciler.reconcile(&j, &world(), ts("2026-01-01T12:00:05Z"));
        assert_eq!(
            plan.apply[0].object["spec"]["endTime"],
            "2026-01-01T12:00:00Z"
        );
    }

    #[test]
    fn a_record_is_labelled_with_the_jobs_type_and_classification() {
        use gryvia_types::labels;
        let mut j = job(Some("NVIDIA-H100-80GB-HBM3"));
        j.spec.type_ = Some(gryvia_types::JobType::FineTuning);
        j.metadata.labels.get_or_insert_with(BTreeMap::new).insert(
            labels::DATA_CLASSIFICATION.to_owned(),
            "confidential".to_owned(),
        );
        let l = usage_record(&j, &world(), None)
            .unwrap()
            .metadata
            .labels
            .unwrap();
        assert_eq!(l[labels::JOB_TYPE], "fine-tuning");
        assert_eq!(l[labels::DATA_CLASSIFICATION], "confidential");
        assert!(l.contains_key(labels::TENANT) && l.contains_key(labels::JOB_NAME));
    }

    #[test]
    fn a_record_names_the_template_its_job_was_made_from() {
        let mut j = job(Some("NVIDIA-H100-80GB-HBM3"));
        assert_eq!(
            usage_record(&j, &world(), None).unwrap().spec.template,
            None
        );
        j.metadata.labels = Some(
            [(
                gryvia_types::labels::TEMPLATE.to_owned(),
                "finetune".to_owned(),
            )]
            .into(),
        );
        let r = usage_record(&j, &world(), None).unwrap();
        assert_eq!(r.spec.template.as_deref(), Some("finetune"));
    }

    fn reservation(charge: bool, idle: i32, phase: ReservationPhase) -> GryviaReservation {
        let mut r: GryviaReservation = serde_json::from_value(serde_json::json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation",
            "metadata": {"name": "window", "uid": "res-uid"},
            "spec": {
                "owner": {"type": "tenant", "name": "ml"},
                "resources": {"gpuType": "NVIDIA-H100-80GB-HBM3", "gpuCount": 8},
                "schedule": {"type": "immediate", "endTime": "2026-01-02T00:00:00Z"},
                "billing": {"chargeWhenIdle": charge, "discount": 25}
            }
        }))
        .unwrap();
        r.status = Some(GryviaReservationStatus {
            phase: Some(phase),
            idle_gpus: idle,
            idle_sampled_at: Some(Time(ts("2026-01-01T10:00:00Z"))),
            ..GryviaReservationStatus::default()
        });
        r
    }

    fn applied(plan: &Plan<GryviaReservationStatus>) -> Vec<GryviaUsageRecord> {
        plan.apply
            .iter()
            .map(|c| serde_json::from_value(c.object.clone()).unwrap())
            .collect()
    }

    #[test]
    fn idle_reserved_gpus_are_metered_for_the_owner_at_the_discount() {
        let now = ts("2026-01-01T10:00:20Z");
        let r = reservation(true, 6, ReservationPhase::Active);
        let w = ReservationMeteringWorld {
            open: Vec::new(),
            skus: skus(),
        };
        let plan = ReservationMeteringReconciler.reconcile(&r, &w, now);
        let recs = applied(&plan);
        assert_eq!(recs.len(), 1);
        let rec = &recs[0];
        assert_eq!(rec.metadata.name.as_deref(), Some("window-idle-1767261600"));
        assert_eq!(rec.spec.tenant, "ml");
        assert_eq!(rec.spec.namespace, "tenant-ml");
        assert_eq!(rec.spec.workload.kind, "GryviaReservation");
        assert_eq!(rec.spec.sku, "h100-80g");
        assert_eq!(rec.spec.gpu_count, 6);
        assert_eq!(
            rec.spec.start_time.0,
            ts("2026-01-01T10:00:00Z"),
            "from the sample"
        );
        assert_eq!(rec.spec.end_time, None);
        assert_eq!(rec.spec.discount_percent, Some(25));
        assert!(!plan.apply[0].owned);
        // Priced at 4.10 less 25 %: 6 GPUs for an hour cost 18.45.
        let mut hour = rec.clone();
        hour.spec.end_time = Some(Time(ts("2026-01-01T11:00:00Z")));
        assert_eq!(unit_price(&hour, &skus()[0]), 3_075_000);
        assert_eq!(
            price(&hour, Some(&skus()[0]), now).cost.unwrap().as_str(),
            "18.45"
        );

        // The same count: nothing to do. A new count: the record closes and another opens.
        let w = ReservationMeteringWorld {
            open: vec![rec.clone()],
            skus: skus(),
        };
        assert!(
            ReservationMeteringReconciler
                .reconcile(&r, &w, now)
                .is_noop()
        );
        let mut busier = reservation(true, 2, ReservationPhase::Active);
        busier.status.as_mut().unwrap().idle_sampled_at = Some(Time(ts("2026-01-01T10:30:00Z")));
        let recs = applied(&ReservationMeteringReconciler.reconcile(&busier, &w, now));
        assert_eq!(recs.len(), 2);
        assert_eq!(
            recs[0].spec.end_time,
            Some(Time(ts("2026-01-01T10:00:20Z"))),
            "at most now"
        );
        assert_eq!(recs[1].spec.gpu_count, 2);

        // The window over, or no charge: the open record closes and none opens.
        for r in [
            reservation(true, 6, ReservationPhase::Expired),
            reservation(false, 6, ReservationPhase::Active),
            reservation(true, 0, ReservationPhase::Active),
        ] {
            let recs = applied(&ReservationMeteringReconciler.reconcile(&r, &w, now));
            assert_eq!(recs.len(), 1);
            assert!(recs[0].spec.end_time.is_some());
        }
        // Deleted: closed at the deletion.
        let mut gone = r.clone();
        gone.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T10:00:10Z")));
        let recs = applied(&ReservationMeteringReconciler.cleanup(&gone, &w, now));
        assert_eq!(
            recs[0].spec.end_time,
            Some(Time(ts("2026-01-01T10:00:10Z")))
        );
    }

    #[test]
    fn jobs_without_a_start_or_gpus_leave_no_record() {
        let mut j = job(None);
        j.status = None;
        assert!(
            MeteringReconciler
                .reconcile(&j, &world(), ts("2026-01-01T10:30:00Z"))
                .is_noop()
        );
        let mut j = job(None);
        j.spec.gpus = 0;
        assert!(
            MeteringReconciler
                .reconcile(&j, &world(), ts("2026-01-01T10:30:00Z"))
                .is_noop()
        );
    }

    #[test]
    fn the_sku_comes_from_the_node_or_is_the_product_until_the_catalogue_has_it() {
        let j = job(None);
        let mut w = world();
        w.node_product = Some("NVIDIA-H100-80GB-HBM3".into());
        let r = usage_record(&j, &w, None).unwrap();
        assert_eq!(r.spec.sku, "h100-80g");
        w.node_product = Some("NVIDIA-B200".into());
        let r = usage_record(&j, &w, None).unwrap();
        assert_eq!(r.spec.sku, "NVIDIA-B200");
        assert!(sku_of(&r, &skus()).is_none());
        let mut later = skus();
        later.push(Sku {
            name: "b200".into(),
            gpu_product: "NVIDIA-B200".into(),
            price_micros: 6_000_000,
            currency: "USD".into(),
        });
        assert_eq!(sku_of(&r, &later).map(|s| s.name.as_str()), Some("b200"));
        w.tenant = None;
        assert_eq!(usage_record(&j, &w, None).unwrap().spec.tenant, "tenant-ml");
    }

    #[test]
    fn a_deleted_job_closes_its_record_at_its_deletion() {
        let mut j = job(Some("NVIDIA-H100-80GB-HBM3"));
        j.metadata.deletion_timestamp = Some(Time(ts("2026-01-01T11:00:00Z")));
        let plan = MeteringReconciler.cleanup(&j, &world(), ts("2026-01-01T11:00:03Z"));
        assert_eq!(
            plan.apply[0].object["spec"]["endTime"],
            "2026-01-01T11:00:00Z"
        );
        assert_eq!(MeteringReconciler.finalizer(), Some(FINALIZER));
    }

    #[test]
    fn a_network_record_is_priced_by_its_own_amount() {
        let j = job(Some("NVIDIA-H100-80GB-HBM3"));
        let mut r = usage_record(&j, &world(), None).unwrap();
        r.spec.gpu_count = 0;
        r.spec.sku = String::new();
        r.spec.network = Some(gryvia_types::NetworkUsage {
            egress_bytes: 5,
            cross_zone_bytes: 7,
            amount: Decimal::parse("1.5").unwrap(),
            currency: "EUR".into(),
        });
        let plan = UsageRecordReconciler.reconcile(
            &r,
            &UsageRecordWorld::default(),
            ts("2026-01-01T11:30:00Z"),
        );
        let st = plan.status.clone().unwrap();
        assert_eq!(
            (
                st.gpu_seconds,
                st.cost.unwrap().as_str(),
                st.currency.as_deref()
            ),
            (0, "1.5", Some("EUR"))
        );
        assert_eq!(plan.requeue_after(), None);
    }

    #[test]
    fn records_are_priced_exactly_and_open_ones_refreshed() {
        let j = job(Some("NVIDIA-H100-80GB-HBM3"));
        let mut r = usage_record(&j, &world(), None).unwrap();
        // 8 GPUs for 90 minutes at 4.10 a GPU-hour: 12 GPU-hours, 49.20.
        let priced = UsageRecordWorld {
            skus: skus(),
            utilisation: None,
        };
        let plan = UsageRecordReconciler.reconcile(&r, &priced, ts("2026-01-01T11:30:00Z"));
        let st = plan.status.clone().unwrap();
        assert_eq!(st.gpu_seconds, 8 * 5400);
        assert_eq!(st.cost.unwrap().as_str(), "49.2");
        assert_eq!(st.currency.as_deref(), Some("USD"));
        assert_eq!(plan.requeue_after(), Some(REFRESH));
        // 7 seconds of one GPU at 4.10: 0.007972 (rounded down to the micro-unit).
        r.spec.gpu_count = 1;
        r.spec.end_time = Some(Time(ts("2026-01-01T10:00:07Z")));
        let plan = UsageRecordReconciler.reconcile(&r, &priced, ts("2026-01-01T11:30:00Z"));
        assert_eq!(
            plan.status.clone().unwrap().cost.unwrap().as_str(),
            "0.007972"
        );
        assert_eq!(plan.requeue_after(), None, "a closed record is final");
        r.status = plan.status;
        assert!(
            UsageRecordReconciler
                .reconcile(&r, &priced, ts("2026-01-02T00:00:00Z"))
                .is_noop()
        );
        // Unpriced while the catalogue lacks its SKU.
        r.spec.sku = "NVIDIA-B200".into();
        let st = price(&r, sku_of(&r, &skus()), ts("2026-01-02T00:00:00Z"));
        assert_eq!((st.gpu_seconds, st.cost, st.currency), (7, None, None));
    }

    #[test]
    fn the_mean_utilisation_is_of_every_reading_or_none() {
        assert_eq!(mean_utilisation([40, 60, 101]), Some(66));
        assert_eq!(mean_utilisation(Vec::new()), None);
    }

    #[test]
    fn utilisation_is_sampled_while_open_and_once_more_at_the_end() {
        let j = job(Some("NVIDIA-H100-80GB-HBM3"));
        let mut r = usage_record(&j, &world(), None).unwrap();
        let reading = |p: Option<i32>| UsageRecordWorld {
            skus: skus(),
            utilisation: p,
        };
        // The first reading starts the count at 10:00:30 (8 GPUs).
        let st = UsageRecordReconciler
            .reconcile(&r, &reading(Some(90)), ts("2026-01-01T10:00:30Z"))
            .status
            .unwrap();
        let u = st.utilisation.clone().unwrap();
        assert_eq!(
            (u.mean_percent, u.sampled_seconds, u.idle_gpu_seconds),
            (90, 0, 0)
        );
        r.status = Some(st);
        // A minute at 40 %, then no reading (the count stays), then a minute at 100 %.
        let st = UsageRecordReconciler
            .reconcile(&r, &reading(Some(40)), ts("2026-01-01T10:01:30Z"))
            .status
            .unwrap();
        r.status = Some(st);
        let plan = UsageRecordReconciler.reconcile(&r, &reading(None), ts("2026-01-01T10:02:00Z"));
        assert_eq!(
            plan.status.unwrap().utilisation,
            r.status.as_ref().unwrap().utilisation
        );
        // Closed at 10:02:30: the last reading counts up to the end, not to now.
        r.spec.end_time = Some(Time(ts("2026-01-01T10:02:30Z")));
        let st = UsageRecordReconciler
            .reconcile(&r, &reading(Some(100)), ts("2026-01-01T10:05:00Z"))
            .status
            .unwrap();
        let u = st.utilisation.clone().unwrap();
        assert_eq!(u.sampled_seconds, 120);
        assert_eq!(u.mean_percent, 70, "(60 x 40 + 60 x 100) / 120");
        assert_eq!(
            u.idle_gpu_seconds,
            8 * 60 * 60 / 100,
            "60 % idle for a minute on 8 GPUs"
        );
        assert_eq!(u.sampled_at.0, ts("2026-01-01T10:02:30Z"));
        r.status = Some(st);
        assert!(
            UsageRecordReconciler
                .reconcile(&r, &reading(Some(0)), ts("2026-01-01T11:00:00Z"))
                .is_noop(),
            "a closed record sampled at its end is final"
        );
    }

    #[test]
    fn the_product_is_that_of_the_first_bound_worker_by_name() {
        let pod = |name: &str, node: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name}, "spec": {"nodeName": node, "containers": []}}))
            .unwrap()
        };
        let nodes: Vec<ObjectMeta> = serde_json::from_value(serde_json::json!([
            {"name": "n1", "labels": {"nvidia.com/gpu.product": "H100"}},
            {"name": "n2", "labels": {"nvidia.com/gpu.product": "A100"}}
        ]))
        .unwrap();
        let pods = vec![
            pod("w-2", Some("n1")),
            pod("w-0", None),
            pod("w-1", Some("n2")),
        ];
        let mut job = gryvia_types::testing::ai_job("ns", "w", "img");
        assert_eq!(node_product(&job, &pods, &nodes).as_deref(), Some("A100"));
        assert_eq!(
            node_product(&job, &pods[..2], &nodes).as_deref(),
            Some("H100")
        );
        assert_eq!(node_product(&job, &pods[1..2], &nodes), None);
        job.spec.gpu_type = Some("H100".into());
        assert_eq!(node_product(&job, &pods, &nodes), None);
    }
}
