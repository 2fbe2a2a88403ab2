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
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use gryvia_types::money::{Decimal, MICROS};
use gryvia_types::{
    AlertAction, BudgetScopeType, BudgetState, EnforcementAction, GryviaBudget, GryviaBudgetStatus,
    GryviaUsageRecord, PeriodType,
};
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::metering::{Sku, sku_of};
use crate::{EventType, Plan, Timestamp};

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
                let micros = i128::from(gpu_seconds) * i128::from(s.price_micros) / 3600;
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

/// The GryviaBudget controller's policy.
#[derive(Clone, Debug, Default)]
pub struct BudgetReconciler;

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
        status.spend_usd = Some(Decimal::from_micros(s.usd_micros));
        status.gpu_hours = Some(Decimal::from_micros(
            i64::try_from(i128::from(s.gpu_seconds) * i128::from(MICROS) / 3600)
                .unwrap_or(i64::MAX),
        ));
        status.uncounted_currencies = s.uncounted;
        let elapsed = now.duration_since(start).as_secs();
        let length = end.duration_since(start).as_secs();
        status.forecast_usd = (elapsed >= 3600).then(|| {
            let f = i128::from(s.usd_micros) * i128::from(length) / i128::from(elapsed);
            Decimal::from_micros(i64::try_from(f).unwrap_or(i64::MAX))
        });

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
        for a in &crossed {
            if !status.alerted_thresholds.contains(&a.threshold) {
                status.alerted_thresholds.push(a.threshold);
                plan.event(
                    EventType::Warning,
                    "BudgetThreshold",
                    format!(
                        "{} of the {:?} budget's scope {} reached {used} % (threshold {} %): spend {} USD, {} GPU-hours",
                        scope_text(budget),
                        budget.spec.period.type_,
                        budget.spec.scope.name,
                        a.threshold,
                        status.spend_usd.as_ref().map_or("0", Decimal::as_str),
                        status.gpu_hours.as_ref().map_or("0", Decimal::as_str),
                    ),
                );
            }
        }
        status.alerted_thresholds.sort_unstable();
        let (cs, reason, message) = match state {
            BudgetState::Blocked => (
                Status::False,
                "Blocked",
                format!(
                    "{used} % of the limit: new jobs in the scope are rejected by the admission gate"
                ),
            ),
            BudgetState::Exceeded => (Status::True, "Exceeded", format!("{used} % of the limit")),
            _ => (Status::True, "Counted", format!("{used} % of the limit")),
        };
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                cs,
                reason,
                message,
                budget.metadata.generation,
                now,
            ),
        );
        plan.set_status_if_changed(budget.status.as_ref(), status);
        let to_end = Duration::try_from(end.duration_since(now)).unwrap_or(REFRESH);
        plan.requeue(REFRESH.min(to_end.max(Duration::from_secs(1))));
        plan
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
        };
        let plan = BudgetReconciler.reconcile(&b, &world, now);
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
        let plan = BudgetReconciler.reconcile(&b, &world, now);
        let st = plan.status.clone().unwrap();
        assert_eq!(st.state, Some(BudgetState::Warning));
        assert_eq!(st.alerted_thresholds, [50]);
        assert_eq!(plan.events.len(), 1);
        assert!(
            plan.events[0]
                .message
                .contains("reached 60 % (threshold 50 %)"),
            "{}",
            plan.events[0].message
        );
        b.status = Some(st);
        let again = BudgetReconciler.reconcile(&b, &world, now);
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
        let st = BudgetReconciler.reconcile(&b, &world, now).status.unwrap();
        assert_eq!(st.state, Some(BudgetState::Exceeded));
        assert_eq!(st.alerted_thresholds, [50, 90]);
        let mut enforced = budget(serde_json::json!({"enforcement": {"enabled": true}}));
        enforced.status = b.status.clone();
        let st = BudgetReconciler
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
            BudgetReconciler
                .reconcile(&alert_blocks, &world, now)
                .status
                .unwrap()
                .state,
            Some(BudgetState::Blocked)
        );

        // Next month: thresholds alert again, the spend starts from zero.
        let mut b2 = enforced.clone();
        b2.status = Some(st);
        let st = BudgetReconciler
            .reconcile(&b2, &world, ts("2026-09-01T00:30:00Z"))
            .status
            .unwrap();
        assert_eq!(st.state, Some(BudgetState::Ok));
        assert!(st.alerted_thresholds.is_empty());
        assert_eq!(st.forecast_usd, None, "no forecast in the first hour");
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
        };
        let st = BudgetReconciler
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
}
