//! End-to-end: `gryvia invoice list|get` and `gryvia cost` against a real control plane
//! (testenv/), with the quota-operator's invoice controller running in this process: a tenant's
//! usage (GPU-hours and a network usage record) priced into an issued invoice, shown as a
//! table and as JSON, its spend this month, and bad input as one line (and a usage record
//! that is neither a GPU record nor a network one refused by the API server).

use std::time::Duration;

use gryvia_reconcile::invoice::InvoiceReconciler;
use gryvia_testsupport::{unique, wait_for};
use gryvia_types::{GryviaGpuSku, GryviaInvoice, GryviaUsageRecord, InvoicePhase};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

async fn gryvia(args: &[&str]) -> (bool, String, String) {
    gryvia_testsupport::run_binary(env!("CARGO_BIN_EXE_gryvia"), args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn invoice_and_cost_show_a_tenants_priced_usage_and_bad_input_is_one_line() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let (tenant, sku, record, invoice) = (
        unique("cli-bill"),
        unique("cli-bill-sku"),
        unique("cli-bill-usage"),
        unique("cli-bill-invoice"),
    );
    let now = jiff::Timestamp::now().as_second();
    let at = |s: i64| jiff::Timestamp::from_second(s).unwrap().to_string();
    let skus: Api<GryviaGpuSku> = Api::all(client.clone());
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let invoices: Api<GryviaInvoice> = Api::all(client.clone());
    let pp = PostParams::default();
    skus.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": sku},
            "spec": {"gpuProduct": unique("CLI-BILL-GPU"), "pricePerGpuHour": "1.25"}}))
        .unwrap(),
    )
    .await
    .unwrap();
    // 2 GPUs for 4 hours at 1.25: 10 USD, 8 GPU-hours, within the invoice's (ended) period.
    records
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": record},
                "spec": {"tenant": tenant, "namespace": format!("tenant-{tenant}"),
                         "workload": {"kind": "GryviaAIJob", "name": "train"}, "sku": sku,
                         "gpuCount": 2, "startTime": at(now - 5 * 3600), "endTime": at(now - 3600)}}))
            .unwrap(),
        )
        .await
        .unwrap();
    // The network-operator's record of one hour of the tenant's network transfer (as a
    // GryviaNetworkCost with usageRecords writes it): priced already, 0.5 USD.
    let network_record = format!("{record}-net");
    records
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": network_record},
                "spec": {"tenant": tenant, "namespace": format!("tenant-{tenant}"),
                         "workload": {"kind": "GryviaNetworkCost", "name": "egress"},
                         "gpuCount": 0, "startTime": at(now - 3 * 3600), "endTime": at(now - 2 * 3600),
                         "network": {"egressBytes": 1_073_741_824_i64, "crossZoneBytes": 0,
                                     "amount": "0.5", "currency": "USD"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    // A GPU record needs its SKU; a network record has no GPUs.
    for (spec, message) in [
        (
            json!({"gpuCount": 1}),
            "spec.sku is required on a GPU usage record",
        ),
        (
            json!({"gpuCount": 1, "network": {"egressBytes": 1, "crossZoneBytes": 0, "amount": "1", "currency": "USD"}}),
            "a network usage record (spec.network) has spec.gpuCount 0",
        ),
    ] {
        let mut body = json!({"metadata": {"name": unique("cli-bill-bad")},
            "spec": {"tenant": tenant, "namespace": "x", "workload": {"kind": "GryviaAIJob", "name": "t"},
                     "startTime": at(now - 3600)}});
        body["spec"]
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        let err = records
            .create(&pp, &serde_json::from_value(body).unwrap())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(message), "{err}");
    }
    invoices
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": invoice},
                "spec": {"tenant": tenant, "periodStart": at(now - 6 * 3600), "periodEnd": at(now - 60)}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let reconciler = InvoiceReconciler {
        grace: Duration::ZERO,
        ..InvoiceReconciler::default()
    };
    let controllers = gryvia_client::operators::ControllerSet::new()
        .with(move |s| gryvia_client::controllers::invoice::controller(s, reconciler.clone()))
        .into_controllers(
            client.clone(),
            gryvia_client::metrics::Metrics::new(),
            false,
        );
    let running = tokio::spawn(controllers());
    let issued = wait_for("the invoice issued", Duration::from_secs(60), || {
        let (invoices, name) = (invoices.clone(), invoice.clone());
        async move {
            let i = invoices.get(&name).await.ok()?;
            (i.status.as_ref()?.phase == Some(InvoicePhase::Issued)).then_some(i)
        }
    })
    .await;
    running.abort();
    issued.unwrap();

    let (ok, stdout, stderr) = gryvia(&["invoice", "list", "--tenant", &tenant]).await;
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("NAME"), "{stdout}");
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[0], invoice);
    assert_eq!(row[1], tenant);
    assert_eq!(&row[4..], ["Issued", "8", "10.5", "USD"], "{stdout}");

    let (ok, stdout, stderr) = gryvia(&["invoice", "get", &invoice]).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("Phase:      Issued"), "{stdout}");
    assert!(stdout.contains("Total:      10.5 USD"), "{stdout}");
    let network_line = stdout
        .lines()
        .find(|l| l.starts_with("egress "))
        .unwrap_or_else(|| panic!("no network line: {stdout}"));
    assert_eq!(
        network_line.split_whitespace().collect::<Vec<_>>()[1..],
        ["1073741824", "0", "0.5", "USD"]
    );
    let sku_line = stdout
        .lines()
        .find(|l| l.starts_with(&sku))
        .unwrap_or_else(|| panic!("no line of {sku}: {stdout}"));
    assert_eq!(
        sku_line.split_whitespace().collect::<Vec<_>>()[1..],
        ["8", "1.25", "USD", "10", "USD"]
    );
    let job_line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("tenant-{tenant}")))
        .unwrap_or_else(|| panic!("no job line: {stdout}"));
    assert_eq!(
        job_line.split_whitespace().collect::<Vec<_>>()[1..],
        [
            "GryviaAIJob",
            "train",
            sku.as_str(),
            "8",
            "-",
            "-",
            "10",
            "USD"
        ]
    );

    let (ok, stdout, _) = gryvia(&["invoice", "get", &invoice, "-o", "json"]).await;
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["status"]["total"], "10.5");
    assert_eq!(json["status"]["networkLines"][0]["amount"], "0.5");
    assert_eq!(json["status"]["jobs"][0]["name"], "train");

    // `gryvia cost`: this month's spend from the same record (all of it when the month began
    // before the record did, as on every day but the first hours of a month).
    let (ok, stdout, stderr) = gryvia(&["cost", &tenant, "-o", "json"]).await;
    assert!(ok, "{stderr}");
    let c: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(c["tenant"], tenant.as_str());
    assert_eq!(c["period"], "month");
    let month_start =
        gryvia_reconcile::budget::period(gryvia_types::PeriodType::Monthly, jiff::Timestamp::now())
            .0
            .as_second();
    if month_start <= now - 5 * 3600 {
        assert_eq!(c["spendUSD"], "10.5", "{c}");
        assert_eq!(c["gpuHours"], "8", "{c}");
        assert_eq!(c["records"], 2, "{c}");
    }
    let (ok, stdout, stderr) = gryvia(&["cost", &tenant, "--detailed"]).await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(&format!("Tenant:     {tenant}\n")),
        "{stdout}"
    );
    assert!(stdout.contains("Spend:      "), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&format!("tenant-{tenant} ")) && l.contains(" train ")),
        "{stdout}"
    );
    let (ok, _, stderr) = gryvia(&["cost", &tenant, "--period", "year"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("invalid value 'year' for '--period <PERIOD>'"),
        "{stderr}"
    );

    let (ok, stdout, stderr) = gryvia(&["invoice", "get", "no-such-invoice"]).await;
    assert!(!ok && stdout.is_empty());
    assert_eq!(stderr.trim(), "error: invoice no-such-invoice not found");

    let dp = DeleteParams::default();
    let _ = invoices.delete(&invoice, &dp).await;
    let _ = records.delete(&record, &dp).await;
    let _ = records.delete(&network_record, &dp).await;
    let _ = skus.delete(&sku, &dp).await;
}
