//! `gryvia tenant ...` and `gryvia quota ...`: flags and presentation; the work is in
//! `gryvia_client::ops::tenants`.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use gryvia_types::validation::Validator;
use gryvia_types::{GryviaTenant, TenantNetworkPolicy, TenantQuotas};
use kube::ResourceExt;

use crate::output::{Output, Table, print_objects};

/// Tenant commands.
#[derive(Subcommand, Debug)]
pub enum TenantCommand {
    /// Create or update a tenant (its namespace is tenant-NAME).
    Create(CreateArgs),
    /// List tenants.
    List {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Show one tenant.
    Get {
        /// Tenant name.
        name: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Flags of `gryvia tenant create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// Tenant name.
    name: String,
    /// Name shown to people (default: the tenant name).
    #[arg(long)]
    display_name: Option<String>,
    /// A GPU SKU the tenant may use (repeat for several; any when none).
    #[arg(long = "allowed-sku")]
    allowed_skus: Vec<String>,
    /// GPUs the tenant's pods may request at once.
    #[arg(long)]
    max_gpus: Option<i32>,
    /// Isolate the tenant's namespace from other tenants.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new())]
    isolated: Option<bool>,
    /// Parent tenant (GPU limits are allocated from it).
    #[arg(long)]
    parent: Option<String>,
    /// A member as USER:ROLE with ROLE admin, member or viewer (repeat for several).
    #[arg(long = "member")]
    members: Vec<String>,
}

fn build(args: &CreateArgs) -> anyhow::Result<GryviaTenant> {
    let mut members = Vec::new();
    for m in &args.members {
        let Some((user, role)) = m.split_once(':') else {
            bail!("--member {m:?}: expected USER:ROLE, for example alice:admin");
        };
        members.push(serde_json::json!({ "username": user, "role": role }));
    }
    let mut spec = serde_json::json!({
        "displayName": args.display_name.clone().unwrap_or_else(|| args.name.clone()),
    });
    if !members.is_empty() {
        spec["members"] = serde_json::Value::Array(members);
    }
    if let Some(g) = args.max_gpus {
        spec["quotas"] = serde_json::to_value(TenantQuotas {
            concurrent_gpus: Some(g),
            ..Default::default()
        })?;
    }
    if let Some(i) = args.isolated {
        spec["networkPolicy"] = serde_json::to_value(TenantNetworkPolicy {
            isolated: i,
            allowed_tenants: Vec::new(),
        })?;
    }
    if let Some(p) = &args.parent {
        spec["parentTenant"] = serde_json::Value::String(p.clone());
    }
    if !args.allowed_skus.is_empty() {
        spec["allowedSkus"] = serde_json::to_value(&args.allowed_skus)?;
    }
    let object = serde_json::json!({
        "apiVersion": gryvia_types::API_VERSION, "kind": "GryviaTenant",
        "metadata": { "name": args.name }, "spec": spec,
    });
    // The same checks as the API server, before anything is sent, with the field named.
    Validator::new()?
        .decode(&object)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs a tenant command.
pub async fn run(cmd: TenantCommand) -> anyhow::Result<()> {
    match cmd {
        TenantCommand::Create(args) => {
            let tenant = build(&args)?;
            let client = gryvia_client::connect().await?;
            let applied = gryvia_client::ops::tenants::apply_tenant(&client, &tenant).await?;
            println!(
                "tenant {} applied (namespace tenant-{})",
                applied.name_any(),
                applied.name_any()
            );
            Ok(())
        }
        TenantCommand::List { output } => {
            let client = gryvia_client::connect().await?;
            let tenants = gryvia_client::ops::tenants::list_tenants(&client).await?;
            if output != Output::Table {
                return print_objects(&tenants, output);
            }
            let mut table = Table::new(&[
                "NAME",
                "DISPLAY NAME",
                "NAMESPACE",
                "GPU LIMIT",
                "GPUS IN USE",
                "READY",
            ]);
            for t in &tenants {
                let s = t.status.clone().unwrap_or_default();
                table.row(vec![
                    t.name_any(),
                    t.spec.display_name.clone(),
                    s.namespace.unwrap_or_else(|| "-".into()),
                    s.gpu_limit.map_or("none".into(), |g| g.to_string()),
                    s.gpus_in_use.to_string(),
                    ready(t),
                ]);
            }
            table.print();
            Ok(())
        }
        TenantCommand::Get { name, output } => {
            let client = gryvia_client::connect().await?;
            let Some(t) = gryvia_client::ops::tenants::get_tenant(&client, &name).await? else {
                bail!("tenant {name:?} not found");
            };
            if output != Output::Table {
                return print_objects(std::slice::from_ref(&t), output);
            }
            describe(&t);
            Ok(())
        }
    }
}

/// `gryvia tenant get NAME` as text: spec and status, one line each.
fn describe(t: &GryviaTenant) {
    let s = t.status.clone().unwrap_or_default();
    let q = t.spec.quotas.clone().unwrap_or_default();
    println!("Name:           {}", t.name_any());
    println!("Display name:   {}", t.spec.display_name);
    println!("Namespace:      {}", s.namespace.as_deref().unwrap_or("-"));
    println!(
        "Parent:         {}",
        t.spec.parent_tenant.as_deref().unwrap_or("-")
    );
    println!(
        "GPUs asked:     {}",
        q.concurrent_gpus
            .map_or("no limit".into(), |g| g.to_string())
    );
    println!(
        "GPU limit:      {}",
        s.gpu_limit.map_or("none".into(), |g| g.to_string())
    );
    println!("GPUs in use:    {}", s.gpus_in_use);
    println!("Pods:           {}", s.pods);
    println!(
        "Allowed SKUs:   {}",
        if t.spec.allowed_skus.is_empty() {
            "any".into()
        } else {
            t.spec.allowed_skus.join(", ")
        }
    );
    println!(
        "Isolated:       {}",
        t.spec.network_policy.as_ref().is_some_and(|n| n.isolated)
    );
    println!("Deletion:       {:?}", t.spec.deletion_policy);
    println!(
        "Members:        {}",
        t.spec
            .members
            .iter()
            .map(|m| format!("{} ({:?})", m.username, m.role).to_lowercase())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("Conditions:");
    for c in &s.conditions {
        println!(
            "  {:<12} {:<6} {:<20} {}",
            c.type_, c.status, c.reason, c.message
        );
    }
}

fn ready(t: &GryviaTenant) -> String {
    t.status
        .as_ref()
        .and_then(|s| {
            gryvia_types::conditions::find(&s.conditions, gryvia_types::conditions::READY)
        })
        .map_or("Unknown".into(), |c| {
            if c.status == "True" {
                "True".into()
            } else {
                format!("False ({})", c.reason)
            }
        })
}

/// `gryvia quota NAME [--budget]`.
pub async fn quota(name: &str, budget: bool, output: Output) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let Some(t) = gryvia_client::ops::tenants::get_tenant(&client, name).await? else {
        bail!("tenant {name:?} not found");
    };
    if output != Output::Table {
        return print_objects(std::slice::from_ref(&t), output);
    }
    let s = t.status.clone().unwrap_or_default();
    let q = t.spec.quotas.clone().unwrap_or_default();
    let mut table = Table::new(&["RESOURCE", "LIMIT", "USED"]);
    table.row(vec![
        "nvidia.com/gpu".into(),
        s.gpu_limit.map_or("none".into(), |g| g.to_string()),
        s.gpus_in_use.to_string(),
    ]);
    for (class, qty) in &t.spec.storage_quotas {
        table.row(vec![
            format!("storage ({class})"),
            qty.0.clone(),
            "-".into(),
        ]);
    }
    if let Some(h) = q.gpu_hours.as_ref().and_then(|h| h.monthly) {
        table.row(vec!["gpu-hours / month".into(), h.to_string(), "-".into()]);
    }
    table.print();
    if budget {
        let budgets = gryvia_client::ops::tenants::budgets_of(&client, name)
            .await
            .context("read budgets")?;
        println!();
        if budgets.is_empty() {
            println!("Budget: no GryviaBudget names tenant {name:?}.");
        }
        for b in budgets {
            let limit = b
                .spec
                .limits
                .cost_usd
                .map_or("-".into(), |c| format!("${c}"));
            let st = b.status.clone().unwrap_or_default();
            let hours = b
                .spec
                .limits
                .gpu_hours
                .map_or(String::new(), |h| format!(", {h} GPU-hours"));
            let state = st.state.map_or("not counted yet".to_owned(), |s| {
                format!("{s:?}").to_lowercase()
            });
            let amount = |d: Option<&gryvia_types::money::Decimal>| {
                d.map_or("-".to_owned(), |d| format!("${d}"))
            };
            println!(
                "Budget {}: limit {limit}{hours} per {:?} period: {state}; spend {} ({} GPU-hours), forecast {}",
                b.name_any(),
                b.spec.period.type_,
                amount(st.spend_usd.as_ref()),
                st.gpu_hours
                    .as_ref()
                    .map_or("-".to_owned(), ToString::to_string),
                amount(st.forecast_usd.as_ref()),
            );
        }
    }
    Ok(())
}
