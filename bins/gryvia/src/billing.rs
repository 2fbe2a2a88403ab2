//! `gryvia invoice list|get`: tenants' invoices as the quota-operator's `--invoices` priced them;
//! `gryvia cost`: a tenant's spend in the current period, from the usage records.

use anyhow::Context;
use clap::Subcommand;
use gryvia_reconcile::invoice::{Cost, cost_of};
use gryvia_types::money::Decimal;
use gryvia_types::{
    GryviaGpuSku, GryviaInvoice, GryviaInvoiceStatus, GryviaUsageRecord, InvoicePhase, PeriodType,
};
use kube::api::{Api, ListParams};

use crate::output::{Output, Table, print_objects};

/// `gryvia invoice ...`.
#[derive(Subcommand, Debug)]
pub enum InvoiceCommand {
    /// List invoices, newest period first.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show one invoice: its lines per SKU and its charges per job.
    Get {
        /// Invoice name.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

fn phase(i: &GryviaInvoice) -> String {
    let st = i.status.clone().unwrap_or_default();
    match (
        st.phase,
        gryvia_types::conditions::find(&st.conditions, "Ready"),
    ) {
        (Some(InvoicePhase::Issued), _) => "Issued".to_owned(),
        (Some(InvoicePhase::Open), _) => "Open".to_owned(),
        (None, Some(c)) if c.status == "False" => c.reason.clone(),
        _ => "-".to_owned(),
    }
}

fn amount(d: Option<&Decimal>, currency: &str) -> String {
    d.map_or_else(|| "-".to_owned(), |d| format!("{} {currency}", d.as_str()))
}

/// Runs `cmd`.
///
/// # Errors
/// A one-line error when the API server cannot be reached or the invoice does not exist.
pub async fn run(cmd: InvoiceCommand) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let api: Api<GryviaInvoice> = Api::all(client);
    match cmd {
        InvoiceCommand::List { tenant, output } => {
            let mut invoices = api
                .list(&ListParams::default())
                .await
                .context("list invoices")?
                .items;
            invoices.retain(|i| tenant.as_ref().is_none_or(|t| &i.spec.tenant == t));
            invoices.sort_by(|a, b| {
                (b.spec.period_start.0, &a.spec.tenant)
                    .cmp(&(a.spec.period_start.0, &b.spec.tenant))
            });
            if output != Output::Table {
                return print_objects(&invoices, output);
            }
            let mut table = Table::new(&[
                "NAME",
                "TENANT",
                "FROM",
                "TO",
                "PHASE",
                "GPU-HOURS",
                "TOTAL",
            ]);
            for i in &invoices {
                let st = i.status.clone().unwrap_or_default();
                table.row(vec![
                    i.metadata.name.clone().unwrap_or_default(),
                    i.spec.tenant.clone(),
                    i.spec.period_start.0.to_string(),
                    i.spec.period_end.0.to_string(),
                    phase(i),
                    st.gpu_hours
                        .as_ref()
                        .map_or("-", Decimal::as_str)
                        .to_owned(),
                    amount(st.total.as_ref(), &i.spec.currency),
                ]);
            }
            table.print();
            Ok(())
        }
        InvoiceCommand::Get { name, output } => {
            let invoice = api
                .get_opt(&name)
                .await
                .with_context(|| format!("read invoice {name}"))?
                .with_context(|| format!("invoice {name} not found"))?;
            if output != Output::Table {
                return print_objects(&[invoice], output);
            }
            print_invoice(&invoice);
            Ok(())
        }
    }
}

fn print_invoice(i: &GryviaInvoice) {
    let st = i.status.clone().unwrap_or_default();
    let cur = &i.spec.currency;
    let mut head = format!(
        "Invoice:    {}\nTenant:     {}\nPeriod:     {} to {}\nPhase:      {}\n",
        i.metadata.name.as_deref().unwrap_or_default(),
        i.spec.tenant,
        i.spec.period_start.0,
        i.spec.period_end.0,
        phase(i),
    );
    if let Some(t) = &st.issued_at {
        head.push_str(&format!("Issued at:  {}\n", t.0));
    }
    head.push_str(&format!(
        "Total:      {}\nGPU-hours:  {}\nRecords:    {}\n",
        amount(st.total.as_ref(), cur),
        st.gpu_hours.as_ref().map_or("-", Decimal::as_str),
        st.records
    ));
    if let Some(idle) = &st.idle_gpu_hours {
        head.push_str(&format!(
            "Idle:       {} GPU-hours (measured by the node agents)\n",
            idle.as_str()
        ));
    }
    for o in &st.other_currencies {
        head.push_str(&format!(
            "Also:       {} {} (not in the total)\n",
            o.amount.as_str(),
            o.currency
        ));
    }
    for u in &st.unpriced {
        head.push_str(&format!(
            "Unpriced:   {} GPU-hours of {} (not in the catalogue)\n",
            u.gpu_hours.as_str(),
            u.sku
        ));
    }
    if let Some(c) = gryvia_types::conditions::find(&st.conditions, "Ready") {
        head.push_str(&format!(
            "Condition:  Ready={} {}: {}\n",
            c.status, c.reason, c.message
        ));
    }
    let _ = crate::print_out(&head);
    print_details(&st, cur);
}

/// The lines per SKU, the network lines and the charges per job of `st`, as tables (a line
/// when there are none).
fn print_details(st: &GryviaInvoiceStatus, cur: &str) {
    if st.jobs.is_empty() && st.network_lines.is_empty() {
        let _ = crate::print_out("\nNo priced usage in the period.\n");
        return;
    }
    if !st.network_lines.is_empty() {
        let mut network =
            Table::new(&["NETWORK COST", "EGRESS BYTES", "CROSS-ZONE BYTES", "AMOUNT"]);
        for n in &st.network_lines {
            network.row(vec![
                n.source.clone(),
                n.egress_bytes.to_string(),
                n.cross_zone_bytes.to_string(),
                format!("{} {cur}", n.amount.as_str()),
            ]);
        }
        let _ = crate::print_out("\n");
        network.print();
    }
    if st.jobs.is_empty() {
        return;
    }
    let mut lines = Table::new(&["SKU", "GPU-HOURS", "UNIT PRICE", "AMOUNT"]);
    for l in &st.line_items {
        lines.row(vec![
            l.sku.clone(),
            l.gpu_hours.as_str().to_owned(),
            format!("{} {cur}", l.unit_price.as_str()),
            format!("{} {cur}", l.amount.as_str()),
        ]);
    }
    let _ = crate::print_out("\n");
    lines.print();
    let mut jobs = Table::new(&[
        "NAMESPACE",
        "KIND",
        "NAME",
        "SKU",
        "GPU-HOURS",
        "UTIL",
        "IDLE GPU-HOURS",
        "AMOUNT",
    ]);
    for j in &st.jobs {
        jobs.row(vec![
            j.namespace.clone(),
            j.kind.clone(),
            j.name.clone(),
            j.sku.clone(),
            j.gpu_hours.as_str().to_owned(),
            j.mean_utilisation_percent
                .map_or_else(|| "-".to_owned(), |p| format!("{p}%")),
            j.idle_gpu_hours
                .as_ref()
                .map_or("-", Decimal::as_str)
                .to_owned(),
            format!("{} {}", j.amount.as_str(), j.currency),
        ]);
    }
    let _ = crate::print_out("\n");
    jobs.print();
}

/// The period `gryvia cost` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CostPeriod {
    /// The current UTC month.
    Month,
    /// The current week (from Monday, UTC).
    Week,
}

impl CostPeriod {
    fn period_type(self) -> PeriodType {
        match self {
            CostPeriod::Month => PeriodType::Monthly,
            CostPeriod::Week => PeriodType::Weekly,
        }
    }
}

/// `gryvia cost NAME`: what tenant `name` spent in the current `period` so far, from its usage
/// records priced at the catalogue, and the forecast for the whole period.
///
/// # Errors
/// A one-line error when the API server cannot be reached.
pub async fn cost(
    name: &str,
    which: CostPeriod,
    detailed: bool,
    output: Output,
) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let records = Api::<GryviaUsageRecord>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list usage records")?
        .items;
    let skus = Api::<GryviaGpuSku>::all(client)
        .list(&ListParams::default())
        .await
        .context("list GPU SKUs")?
        .items;
    let now = jiff::Timestamp::now();
    let c = cost_of(name, which.period_type(), &records, &skus, now);
    if output != Output::Table {
        return print_objects(&[c], output);
    }
    print_cost(&c, detailed);
    Ok(())
}

fn print_cost(c: &Cost, detailed: bool) {
    let mut head = format!(
        "Tenant:     {}\nPeriod:     {} to {} (this {})\nSpend:      {} USD\nGPU-hours:  {}\n",
        c.tenant,
        c.period_start,
        c.period_end,
        c.period,
        c.spend_usd.as_str(),
        c.gpu_hours.as_str(),
    );
    head.push_str(&match &c.forecast_usd {
        Some(f) => format!(
            "Forecast:   {} USD by the end of the {}\n",
            f.as_str(),
            c.period
        ),
        None => "Forecast:   none yet (from one hour into the period)\n".to_owned(),
    });
    head.push_str(&format!("Records:    {}\n", c.records));
    if let Some(idle) = &c.detail.idle_gpu_hours {
        head.push_str(&format!(
            "Idle:       {} GPU-hours (measured by the node agents)\n",
            idle.as_str()
        ));
    }
    for o in &c.detail.other_currencies {
        head.push_str(&format!(
            "Also:       {} {} (not in the spend)\n",
            o.amount.as_str(),
            o.currency
        ));
    }
    for u in &c.detail.unpriced {
        head.push_str(&format!(
            "Unpriced:   {} GPU-hours of {} (not in the catalogue)\n",
            u.gpu_hours.as_str(),
            u.sku
        ));
    }
    let _ = crate::print_out(&head);
    if detailed {
        print_details(&c.detail, "USD");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tenant: &str, start: &str, end: Option<&str>) -> GryviaUsageRecord {
        let mut spec = serde_json::json!({
            "tenant": tenant, "namespace": format!("tenant-{tenant}"),
            "workload": {"kind": "GryviaAIJob", "name": "train"}, "sku": "h100",
            "gpuCount": 2, "startTime": start,
        });
        if let Some(e) = end {
            spec["endTime"] = e.into();
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": "r"}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn cost_counts_the_period_so_far_and_forecasts_its_end() {
        let skus: Vec<GryviaGpuSku> =
            vec![serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h100"}, "spec": {"gpuProduct": "H100", "pricePerGpuHour": "4"}
        }))
        .unwrap()];
        let records = [
            // 2 GPUs from November into December: 10 of its hours in December.
            record("ml", "2026-11-30T20:00:00Z", Some("2026-12-01T10:00:00Z")),
            // Still running.
            record("ml", "2026-12-02T00:00:00Z", None),
            record("cv", "2026-12-02T00:00:00Z", None),
        ];
        let now: jiff::Timestamp = "2026-12-03T00:00:00Z".parse().unwrap();
        let c = cost_of("ml", PeriodType::Monthly, &records, &skus, now);
        assert_eq!(c.period_start, "2026-12-01T00:00:00Z");
        assert_eq!(c.gpu_hours.as_str(), "68", "20 + 48");
        assert_eq!(c.spend_usd.as_str(), "272");
        assert_eq!(
            c.forecast_usd.unwrap().as_str(),
            "4216",
            "272 in 2 days of 31"
        );
        assert_eq!(c.records, 2);
        assert_eq!(c.detail.jobs.len(), 1, "both records are job train on h100");
        let week = cost_of("ml", PeriodType::Weekly, &records, &skus, now);
        assert_eq!(week.period_start, "2026-11-30T00:00:00Z", "from Monday");
        assert_eq!(week.gpu_hours.as_str(), "76");
    }
}
