//! `gryvia invoice list|get`: tenants' invoices as the quota-operator's `--invoices` priced them.

use anyhow::Context;
use clap::Subcommand;
use gryvia_types::money::Decimal;
use gryvia_types::{GryviaInvoice, InvoicePhase};
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
    let mut jobs = Table::new(&["NAMESPACE", "KIND", "NAME", "SKU", "GPU-HOURS", "AMOUNT"]);
    for j in &st.jobs {
        jobs.row(vec![
            j.namespace.clone(),
            j.kind.clone(),
            j.name.clone(),
            j.sku.clone(),
            j.gpu_hours.as_str().to_owned(),
            format!("{} {}", j.amount.as_str(), j.currency),
        ]);
    }
    let _ = crate::print_out("\n");
    jobs.print();
}
