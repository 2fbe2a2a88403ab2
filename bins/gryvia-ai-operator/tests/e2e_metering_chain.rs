//! End-to-end: the whole metering -> budget -> alerts -> admission gate -> invoice chain against
//! a real control plane (testenv/), with both operator binaries running: the quota-operator with
//! `--metering --invoices` and its budget alerts going to real receivers (a Standard Webhooks
//! verifier and an SMTP server), and the ai-operator (under the RBAC of `deploy/ai-operator`)
//! with its admission webhooks and `--admission-gate`. The test writes only a GryviaGpuSku, a
//! GryviaBudget, two GryviaTenants, an invoice, the webhook's signing Secret and the jobs; the
//! usage record, its price, the budget's state, the alerts, the rejection, the invoices' lines
//! and phases are the operators' work.
//!
//! The quota-operator binary is the one cargo built next to this package's ai-operator
//! (`cargo test --workspace` builds both; with `-p gryvia-ai-operator` build it first with
//! `cargo build -p gryvia-quota-operator`).

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::receivers::{SmtpReceiver, StandardReceiver};
use gryvia_testsupport::{
    KwokNodes, NODE_GROUP_TAINT, Process, TestNamespace, free_port, unique, wait_for,
};
use gryvia_types::{
    AlertChannel, BudgetState, DeliveryState, GryviaAIJob, GryviaBudget, GryviaBudgetStatus,
    GryviaGpuSku, GryviaInvoice, GryviaReservation, GryviaTenant, GryviaUsageRecord, InvoicePhase,
    JobPhase,
};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The quota-operator binary cargo built beside the ai-operator.
fn quota_operator_binary() -> PathBuf {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_gryvia-ai-operator"))
        .with_file_name("gryvia-quota-operator");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p gryvia-quota-operator` first (`cargo test --workspace` builds it)",
        path.display()
    );
    path
}

/// The test's cluster-scoped objects, deleted when dropped (also when the test panics).
struct ClusterObjects {
    sku: String,
    budget: String,
    records: Vec<String>,
    webhook: String,
    invoices: Vec<String>,
    tenants: Vec<String>,
    reservation_sku: String,
    reservation: String,
}

impl Drop for ClusterObjects {
    fn drop(&mut self) {
        let (reservation_sku, reservation) =
            (self.reservation_sku.clone(), self.reservation.clone());
        let (sku, budget, records, webhook, invoices, tenants) = (
            self.sku.clone(),
            self.budget.clone(),
            self.records.clone(),
            self.webhook.clone(),
            self.invoices.clone(),
            self.tenants.clone(),
        );
        gryvia_testsupport::on_drop(|client| async move {
            let dp = DeleteParams::default();
            let _ = gryvia_client::admission::unregister(&client, &webhook).await;
            let _ = Api::<GryviaBudget>::all(client.clone())
                .delete(&budget, &dp)
                .await;
            for s in [sku, reservation_sku] {
                let _ = Api::<GryviaGpuSku>::all(client.clone())
                    .delete(&s, &dp)
                    .await;
            }
            let _ = Api::<GryviaReservation>::all(client.clone())
                .delete(&reservation, &dp)
                .await;
            for r in records {
                let _ = Api::<GryviaUsageRecord>::all(client.clone())
                    .delete(&r, &dp)
                    .await;
            }
            for i in invoices {
                let _ = Api::<GryviaInvoice>::all(client.clone())
                    .delete(&i, &dp)
                    .await;
            }
            for t in tenants {
                let _ = Api::<GryviaTenant>::all(client.clone())
                    .delete(&t, &dp)
                    .await;
            }
        });
    }
}

/// Removes the finalizers of the jobs in a namespace when dropped: once the quota-operator is
/// stopped, nothing else would remove the metering finalizer, and the namespace could not go.
struct JobFinalizers(String);

impl Drop for JobFinalizers {
    fn drop(&mut self) {
        let ns = self.0.clone();
        gryvia_testsupport::on_drop(|client| async move {
            let jobs: Api<GryviaAIJob> = Api::namespaced(client, &ns);
            for j in jobs
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                if let Some(name) = j.metadata.name {
                    let _ = jobs
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                        )
                        .await;
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_metered_gpu_job_alerts_and_blocks_its_budget_the_gate_rejects_new_jobs_and_its_invoice_lists_it()
 {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let quota_operator = quota_operator_binary();
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "chain-ops").await.unwrap();
    let ns = TestNamespace::create(&client, "chain").await.unwrap();
    // A GPU product of the test's own: its SKU prices only this test's jobs, which run on
    // these nodes.
    let product = unique("E2E-CHAIN-GPU");
    let nodes = KwokNodes::create_with_product(&client, "chain", 1, 8, &product)
        .await
        .unwrap();
    // A node agent reports the node's GPUs (a replayed trace): 40 % busy, which metering
    // samples into the job's record.
    let trace =
        std::env::temp_dir().join(format!("gryvia-chain-trace-{}.yaml", std::process::id()));
    std::fs::write(
        &trace,
        "gpuCount: 8\ndefaults:\n  utilizationPercent: 40\nframes:\n  - gpus: []\n",
    )
    .unwrap();
    let agent = gryvia_client::gpu_agent::Agent::new(
        client.clone(),
        gryvia_client::gpu_agent::AgentConfig::new(&nodes.names[0], Duration::from_secs(1)),
        Box::new(gryvia_client::gpu_agent::TraceSource::open(&trace, &nodes.names[0]).unwrap()),
        std::sync::Arc::new(gryvia_client::gpu_agent::DryRunExecutor {
            log: None,
            duration: Duration::ZERO,
        }),
    );
    let agent = tokio::spawn(async move { agent.run(std::future::pending()).await });
    let gpu_nodes: Api<gryvia_types::GryviaGpuNode> = Api::all(client.clone());
    wait_for(
        "the node agent's first report",
        Duration::from_secs(30),
        || {
            let (gpu_nodes, name) = (gpu_nodes.clone(), nodes.names[0].clone());
            async move {
                let g = gpu_nodes.get(&name).await.ok()?;
                (g.status?.gpus.len() == 8).then_some(())
            }
        },
    )
    .await
    .unwrap();
    // A node of another product, for a reservation that charges its tenant for idle time.
    let reserved_product = unique("E2E-CHAIN-RESERVED");
    let _reserved_nodes =
        KwokNodes::create_with_product(&client, "chainres", 1, 8, &reserved_product)
            .await
            .unwrap();
    let mut objects = ClusterObjects {
        sku: unique("e2e-chain-sku"),
        budget: unique("e2e-chain-budget"),
        webhook: unique("gryvia-e2e-chain"),
        records: Vec::new(),
        invoices: Vec::new(),
        tenants: Vec::new(),
        reservation_sku: unique("e2e-chain-reserved-sku"),
        reservation: unique("e2e-chain-window"),
    };
    // The jobs' namespace belongs to a tenant (by the label metering and admission read), with
    // an invoice made by hand for a period from a minute ago to 45 s from now, which the
    // metered job falls in: made before the tenant, so the tenant's monthly invoice, which
    // would count the same records, is refused for overlapping it.
    let tenant = unique("e2e-chain");
    let invoices: Api<GryviaInvoice> = Api::all(client.clone());
    // The receiver of the budget alerts and of the invoice's webhook verifies every delivery
    // with the Standard Webhooks reference library.
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    gryvia_testsupport::record_secret("the budget alerts' signing key", secret);
    let hooks = StandardReceiver::start(secret);
    let invoice_name = unique("e2e-chain-invoice");
    objects.invoices.push(invoice_name.clone());
    let now = jiff::Timestamp::now().as_second();
    invoices
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": invoice_name},
                "spec": {"tenant": tenant,
                         "periodStart": jiff::Timestamp::from_second(now - 60).unwrap(),
                         "periodEnd": jiff::Timestamp::from_second(now + 45).unwrap(),
                         "webhook": {"url": hooks.url, "allowInsecure": true,
                                     "secretRef": {"name": "budget-alerts", "key": "secret"}}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    // Creation times have whole seconds: the monthly invoices come a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    // The jobs' tenant may spend 20 USD a month (the gate's money quota, checked once the
    // budget is gone); the second tenant (named like the SKU, unique too) has no jobs: its
    // monthly invoice stays open and empty.
    for (t, spec) in [
        (
            &tenant,
            json!({"displayName": tenant, "quotas": {"costUSD": {"monthly": 20}},
                   "notifications": {"email": ["team@gryvia.test"]}}),
        ),
        (&objects.sku, json!({"displayName": objects.sku})),
    ] {
        objects.tenants.push(t.clone());
        tenants
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": t}, "spec": spec})).unwrap(),
            )
            .await
            .unwrap();
    }
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gryvia.io/tenant": tenant}}})),
        )
        .await
        .unwrap();
    let _finalizers = JobFinalizers(ns.name.clone());

    // 3600 a GPU-hour is 1 USD a GPU-second: one GPU for ten seconds costs 10 USD, twice the
    // budget's limit of 5 USD.
    let skus: Api<GryviaGpuSku> = Api::all(client.clone());
    skus.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": objects.sku},
            "spec": {"gpuProduct": product, "pricePerGpuHour": "3600"}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let budgets: Api<GryviaBudget> = Api::all(client.clone());
    budgets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": objects.budget},
                "spec": {"scope": {"type": "tenant", "name": tenant}, "period": {"type": "monthly"},
                         "limits": {"costUSD": 5}, "enforcement": {"enabled": true, "action": "block"},
                         "alerts": [{"threshold": 50, "actions": ["webhook", "email"]},
                                    {"threshold": 100, "actions": ["block", "webhook", "email"]}],
                         "emailRecipients": ["finance@gryvia.test"]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // The alerts' receivers: a webhook receiver that verifies every delivery with the Standard
    // Webhooks reference library (up now), and an SMTP server on a port chosen now but started
    // only once an e-mail has failed (so the log's retry is seen).
    let smtp_port = free_port();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &lease_ns.name)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "budget-alerts"}, "stringData": {"secret": secret}
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // The operators.
    let smtp_server = format!("127.0.0.1:{smtp_port}");
    let quota_args = [
        "--metering",
        "--invoices",
        "--invoice-grace-seconds",
        "0",
        "--budget-webhook-url",
        &hooks.url,
        "--budget-webhook-allow-http",
        "--budget-webhook-secret",
        "budget-alerts",
        "--smtp-server",
        &smtp_server,
        "--smtp-tls",
        "none",
        "--smtp-from",
        "Gryvia <alerts@gryvia.test>",
        "--budget-email-to",
        "ops@gryvia.test",
    ];
    let (quota_operator_process, _) = Process::operator(
        quota_operator.to_str().unwrap(),
        &lease_ns.name,
        &quota_args,
        None,
        "quota-operator-chain",
    )
    .unwrap();
    let access = common::operator_access(&client, &lease_ns.name).await;
    let hook_addr = format!("127.0.0.1:{}", free_port());
    let hook_url = format!("https://{hook_addr}");
    let selector = format!("kubernetes.io/metadata.name={}", ns.name);
    let (_ai_operator, _) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &[
            "--webhook-addr",
            &hook_addr,
            "--webhook-url",
            &hook_url,
            "--webhook-name",
            &objects.webhook,
            "--webhook-namespace-selector",
            &selector,
            "--admission-gate",
            "--enable-reservations",
        ],
        Some(&access.kubeconfig),
        "ai-operator-chain",
    )
    .unwrap();
    let vwc: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("webhooks registered", Duration::from_secs(60), || {
        let (vwc, name) = (vwc.clone(), objects.webhook.clone());
        async move { vwc.get(&name).await.ok() }
    })
    .await
    .unwrap();
    let budget_in = |want: BudgetState| {
        let (budgets, name) = (budgets.clone(), objects.budget.clone());
        async move {
            let r = wait_for(&format!("budget {want:?}"), Duration::from_secs(90), || {
                let (budgets, name) = (budgets.clone(), name.clone());
                async move {
                    let st = budgets.get(&name).await.ok()?.status?;
                    (st.state == Some(want)).then_some(st)
                }
            })
            .await;
            match r {
                Ok(st) => st,
                Err(e) => panic!("{e:#}; now: {:?}", budgets.get(&name).await),
            }
        }
    };
    let st = budget_in(BudgetState::Ok).await;
    assert_eq!(st.spend_usd.unwrap().as_str(), "0");

    // A GPU job on the product, running ten seconds: admitted while the budget is ok.
    let jobs: Api<GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    let job = |name: &str| -> GryviaAIJob {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {"image": "registry.local/train:1", "gpus": 1, "gpuType": product,
                     "tolerations": [{"key": NODE_GROUP_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                     "podAnnotations": {"gryvia.io/testenv-duration": "10s"}}
        }))
        .unwrap()
    };
    let first = jobs
        .create(&PostParams::default(), &job("first"))
        .await
        .unwrap();
    let record_name =
        gryvia_reconcile::metering::record_name("first", first.metadata.uid.as_deref().unwrap());
    objects.records.push(record_name.clone());

    // Metered: a record closed at the job's end, priced exactly.
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let record = wait_for(
        "the job's usage record to close, priced",
        Duration::from_secs(90),
        || {
            let (records, name) = (records.clone(), record_name.clone());
            async move {
                let r = records.get(&name).await.ok()?;
                (r.spec.end_time.is_some() && r.status.as_ref()?.cost.is_some()).then_some(r)
            }
        },
    )
    .await;
    let record = match record {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}; job now: {:?}; record now: {:?}",
            jobs.get("first").await.map(|j| j.status),
            records.get_opt(&record_name).await
        ),
    };
    assert_eq!(record.spec.namespace, ns.name);
    assert_eq!(record.spec.sku, objects.sku);
    assert_eq!(record.spec.gpu_count, 1);
    let done = jobs.get("first").await.unwrap().status.unwrap();
    assert_eq!(done.phase, Some(JobPhase::Succeeded), "{done:?}");
    let priced = record.status.unwrap();
    assert!(
        priced.gpu_seconds >= 10,
        "the pod ran ten seconds: {priced:?}"
    );
    let cost = priced.cost.clone().unwrap();
    // Utilisation: the node agent's 40 % over the job's run, and the idle GPU-seconds with it.
    let measured = wait_for(
        "the record's GPU utilisation",
        Duration::from_secs(60),
        || {
            let (records, name) = (records.clone(), record_name.clone());
            async move {
                let u = records.get(&name).await.ok()?.status?.utilisation?;
                (u.sampled_seconds > 0).then_some(u)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(measured.mean_percent, 40, "{measured:?}");
    // Each sample rounds its idle GPU-seconds down.
    assert!(
        measured
            .idle_gpu_seconds
            .abs_diff(measured.sampled_seconds * 60 / 100)
            <= 1,
        "{measured:?}"
    );
    assert!(
        measured.sampled_seconds <= priced.gpu_seconds,
        "{measured:?} {priced:?}"
    );
    assert_eq!(
        cost.as_str(),
        priced.gpu_seconds.to_string(),
        "1 USD a GPU-second"
    );

    // Counted: the budget is past its limit, with enforcement: blocked.
    let st = budget_in(BudgetState::Blocked).await;
    assert_eq!(st.spend_usd.as_ref().unwrap(), &cost);
    let ready = gryvia_types::conditions::find(&st.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "Blocked");

    // Gated: a new GPU job in the namespace is rejected by the webhook, naming the budget.
    let want = format!(
        "GryviaBudget {} is blocked (spend {} USD of its limit)",
        objects.budget,
        cost.as_str()
    );
    let message = wait_for("the gate to reject", Duration::from_secs(30), || async {
        match jobs.create(&PostParams::default(), &job("second")).await {
            Err(kube::Error::Api(e)) => Some((e.code, e.message)),
            Err(_) => None,
            Ok(_) => {
                // The ai-operator's cache has not seen the state yet: try again.
                let _ = jobs.delete("second", &DeleteParams::default()).await;
                let _ = wait_for(
                    "the admitted job to go",
                    Duration::from_secs(30),
                    || async { matches!(jobs.get_opt("second").await, Ok(None)).then_some(()) },
                )
                .await;
                None
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(message.0, 403, "{message:?}");
    assert!(message.1.contains(&want), "{}", message.1);
    assert!(jobs.get_opt("second").await.unwrap().is_none());

    // Alerted: both thresholds were crossed; the webhook got each alert once, verified, and
    // the e-mails, refused while no SMTP server listened, went once it did.
    let budget_uid = budgets
        .get(&objects.budget)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let deliveries =
        |st: &GryviaBudgetStatus, channel: AlertChannel| -> Vec<(i32, DeliveryState, i32)> {
            let mut out: Vec<_> = st
                .deliveries
                .iter()
                .filter(|d| d.channel == channel)
                .map(|d| (d.threshold, d.state, d.attempts))
                .collect();
            out.sort_unstable_by_key(|d| d.0);
            out
        };
    let failed_mail = wait_for("an e-mail attempt to fail", Duration::from_secs(60), || {
        let (budgets, name) = (budgets.clone(), objects.budget.clone());
        async move {
            let st = budgets.get(&name).await.ok()?.status?;
            st.deliveries
                .iter()
                .find(|d| d.channel == AlertChannel::Email && d.attempts >= 1)
                .cloned()
        }
    })
    .await
    .unwrap();
    assert_eq!(failed_mail.state, DeliveryState::Pending, "{failed_mail:?}");
    assert!(
        failed_mail
            .error
            .as_deref()
            .unwrap_or_default()
            .contains(&smtp_server),
        "{failed_mail:?}"
    );
    let smtp = SmtpReceiver::start(smtp_port);
    let st = wait_for("every alert delivered", Duration::from_secs(90), || {
        let (budgets, name) = (budgets.clone(), objects.budget.clone());
        async move {
            let st = budgets.get(&name).await.ok()?.status?;
            (st.deliveries.len() == 4
                && st
                    .deliveries
                    .iter()
                    .all(|d| d.state == DeliveryState::Delivered))
            .then_some(st)
        }
    })
    .await
    .unwrap();
    let webhooks = deliveries(&st, AlertChannel::Webhook);
    assert_eq!(
        webhooks,
        [
            (50, DeliveryState::Delivered, 1),
            (100, DeliveryState::Delivered, 1)
        ]
    );
    assert!(
        deliveries(&st, AlertChannel::Email)
            .iter()
            .all(|d| d.2 >= 2)
    );
    let got: Vec<_> = hooks
        .got()
        .into_iter()
        .filter(|g| g.id.starts_with(&budget_uid))
        .collect();
    assert_eq!(got.len(), 2, "each alert once: {got:?}");
    let period = st.period_start.clone().unwrap().0.as_second();
    for (g, threshold) in got.iter().zip([50, 100]) {
        let body: serde_json::Value = serde_json::from_slice(&g.body).unwrap();
        assert_eq!(g.answer, 200, "verified by standardwebhooks: {g:?}");
        assert_eq!(g.id, format!("{budget_uid}.{period}.{threshold}.webhook"));
        assert_eq!(body["type"], "budget.threshold");
        assert_eq!(body["threshold"], threshold);
        assert_eq!(body["budget"]["name"], objects.budget.as_str());
        // Spend when the threshold was crossed: the job's cost, or part of it when a refresh
        // came while it ran.
        let spend: f64 = body["spendUSD"].as_str().unwrap().parse().unwrap();
        let total: f64 = cost.as_str().parse().unwrap();
        assert!(
            spend >= f64::from(threshold) * 5.0 / 100.0 && spend <= total,
            "{body}"
        );
    }
    let mut mails = smtp.got();
    mails.sort_by(|a, b| a.message_id.cmp(&b.message_id));
    assert_eq!(mails.len(), 2, "each e-mail once: {mails:?}");
    for (m, threshold) in mails.iter().zip([100, 50]) {
        assert_eq!(m.from, "alerts@gryvia.test");
        assert_eq!(
            m.to,
            ["finance@gryvia.test", "team@gryvia.test", "ops@gryvia.test"],
            "the budget's, its tenant's notifications.email, the operator's"
        );
        assert_eq!(
            m.message_id,
            format!("<{budget_uid}.{period}.{threshold}.email@gryvia.io>")
        );
        assert!(
            m.subject.starts_with(&format!(
                "[Gryvia] budget {}: {threshold} % threshold crossed",
                objects.budget
            )),
            "{m:?}"
        );
        assert!(m.text.contains(" USD (limit: 5 USD)"), "{m:?}");
    }
    assert!(
        mails[0]
            .text
            .contains("New GPU jobs in this scope are rejected"),
        "{:?}",
        mails[0]
    );

    // Invoiced: once its period has ended, the invoice of the jobs' tenant lists exactly the
    // metered job, priced as its record, and is issued.
    let issued = wait_for("the invoice issued", Duration::from_secs(120), || {
        let (invoices, name) = (invoices.clone(), invoice_name.clone());
        async move {
            let i = invoices.get(&name).await.ok()?;
            (i.status.as_ref()?.phase == Some(InvoicePhase::Issued)).then_some(i)
        }
    })
    .await
    .unwrap();
    let st = issued.status.clone().unwrap();
    assert_eq!(st.records, 1, "{st:?}");
    let jobs_listed: Vec<(&str, &str, &str, &str)> = st
        .jobs
        .iter()
        .map(|j| {
            (
                j.namespace.as_str(),
                j.kind.as_str(),
                j.name.as_str(),
                j.sku.as_str(),
            )
        })
        .collect();
    assert_eq!(
        jobs_listed,
        [(
            ns.name.as_str(),
            "GryviaAIJob",
            "first",
            objects.sku.as_str()
        )]
    );
    assert_eq!(st.jobs[0].amount, cost);
    assert_eq!(st.jobs[0].mean_utilisation_percent, Some(40), "{st:?}");
    assert!(st.idle_gpu_hours.is_some(), "{st:?}");
    assert_eq!(st.total.as_ref(), Some(&cost));
    assert_eq!(st.line_items.len(), 1);
    assert_eq!(st.line_items[0].sku, objects.sku);
    assert_eq!(st.line_items[0].unit_price.as_str(), "3600");
    assert_eq!(st.line_items[0].amount, cost);
    // Its webhook: the issued invoice, posted once, verified by the reference library.
    let invoice_uid = issued.metadata.uid.clone().unwrap();
    let want_id = format!("{invoice_uid}.issued");
    let posted = wait_for("the invoice's webhook", Duration::from_secs(60), || {
        let found = hooks.got().into_iter().find(|g| g.id == want_id);
        async move { found }
    })
    .await
    .unwrap();
    assert_eq!(
        posted.answer, 200,
        "verified by standardwebhooks: {posted:?}"
    );
    let body: serde_json::Value = serde_json::from_slice(&posted.body).unwrap();
    assert_eq!(body["type"], "invoice.issued");
    assert_eq!(body["tenant"], tenant.as_str());
    assert_eq!(body["total"], cost.as_str());
    assert_eq!(body["jobs"][0]["name"], "first");
    let delivered = wait_for("webhookDelivered", Duration::from_secs(30), || {
        let (invoices, name) = (invoices.clone(), invoice_name.clone());
        async move {
            invoices
                .get(&name)
                .await
                .ok()?
                .status?
                .webhook_delivered
                .then_some(())
        }
    })
    .await;
    delivered.unwrap();

    // Monthly: each tenant gets its invoice for this UTC month: the jobs' tenant's is refused
    // for overlapping the one made by hand, the other tenant's is open.
    let month_start =
        gryvia_reconcile::budget::period(gryvia_types::PeriodType::Monthly, jiff::Timestamp::now())
            .0;
    let monthly = |t: &str| gryvia_reconcile::invoice::monthly_name(t, month_start);
    objects.invoices.push(monthly(&tenant));
    objects.invoices.push(monthly(&objects.sku));
    let refused = wait_for(
        "the overlapping monthly invoice refused",
        Duration::from_secs(60),
        || {
            let (invoices, name) = (invoices.clone(), monthly(&tenant));
            async move {
                let st = invoices.get(&name).await.ok()?.status?;
                let c = gryvia_types::conditions::find(&st.conditions, "Ready")?.clone();
                (c.reason == "Overlaps").then_some((st, c.message))
            }
        },
    )
    .await
    .unwrap();
    assert!(
        refused.0.line_items.is_empty() && refused.0.total.is_none(),
        "{refused:?}"
    );
    assert!(
        refused.1.starts_with(&format!(
            "its period overlaps invoice {invoice_name} of tenant {tenant}"
        )),
        "{}",
        refused.1
    );
    let open = wait_for(
        "the other tenant's monthly invoice",
        Duration::from_secs(60),
        || {
            let (invoices, name) = (invoices.clone(), monthly(&objects.sku));
            async move {
                let i = invoices.get(&name).await.ok()?;
                (i.status.as_ref()?.phase == Some(InvoicePhase::Open)).then_some(i)
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(open.spec.period_start.0, month_start);
    assert_eq!(open.status.unwrap().total.unwrap().as_str(), "0");

    // Issued means final: a new quota-operator reconciles every invoice again and changes
    // nothing.
    let version = issued.metadata.resource_version.clone();
    drop(quota_operator_process);
    let (_quota_operator, port) = Process::operator(
        quota_operator.to_str().unwrap(),
        &lease_ns.name,
        &quota_args,
        None,
        "quota-operator-chain-again",
    )
    .unwrap();
    let all = invoices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    wait_for(
        "the new operator to reconcile every invoice",
        Duration::from_secs(60),
        || async move {
            let (_, text) = gryvia_testsupport::http_get(port, "/metrics").await?;
            let n = gryvia_testsupport::metric_sample(
                &text,
                "gryvia_reconciles_total",
                "gryvia-invoices",
            )?;
            #[expect(clippy::cast_precision_loss, reason = "a count of invoices")]
            let all = all as f64;
            (n >= all).then_some(())
        },
    )
    .await
    .unwrap();
    let again = invoices.get(&invoice_name).await.unwrap();
    assert_eq!(
        again.metadata.resource_version, version,
        "{:?}",
        again.status
    );

    // The money quota: with the budget gone, the gate weighs a new job's estimate (GPUs x
    // activeDeadlineSeconds x price) plus this month's metered spend against the tenant's 20 USD.
    budgets
        .delete(&objects.budget, &DeleteParams::default())
        .await
        .unwrap();
    let with_deadline = |name: &str, seconds: i64| {
        let mut j = job(name);
        j.spec.active_deadline_seconds = Some(seconds);
        j
    };
    let want = format!(
        "tenant {tenant}'s monthly spend quota (spec.quotas.costUSD.monthly) is 20 USD: {} USD spent this month, and this job's estimate of 30 USD (1 GPUs for 30 s, activeDeadlineSeconds, at 3600 USD a GPU-hour) would exceed it",
        cost.as_str()
    );
    let mut attempt = 0;
    let refused = wait_for("the money quota to refuse", Duration::from_secs(30), || {
        attempt += 1;
        let (jobs, name) = (jobs.clone(), format!("third-{attempt}"));
        let j = with_deadline(&name, 30);
        async move {
            match jobs.create(&PostParams::default(), &j).await {
                Err(kube::Error::Api(e)) if !e.message.contains("GryviaBudget") => Some(e),
                Err(_) => None,
                Ok(_) => {
                    // The webhook's cache has not seen the budget go yet, or the gate was open.
                    let _ = jobs.delete(&name, &DeleteParams::default()).await;
                    None
                }
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(refused.code, 403, "{refused:?}");
    assert!(refused.message.contains(&want), "{}", refused.message);
    // A short job fits: 11 or so spent, 3 estimated, of 20.
    let fits = jobs
        .create(&PostParams::default(), &with_deadline("fourth", 3))
        .await
        .unwrap();
    jobs.delete("fourth", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(fits.spec.active_deadline_seconds, Some(3));

    // Reservation charges: a reservation of the tenant that charges for idle time holds the
    // other product's node (8 GPUs, no pod): its idle GPUs are metered to the tenant at its
    // 25 % discount, and its deletion closes the record.
    skus.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": objects.reservation_sku},
            "spec": {"gpuProduct": reserved_product, "pricePerGpuHour": "3600"}
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    let reservations: Api<GryviaReservation> = Api::all(client.clone());
    reservations
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": objects.reservation},
                "spec": {"owner": {"type": "tenant", "name": tenant},
                         "resources": {"gpuType": reserved_product, "gpuCount": 8},
                         "schedule": {"type": "immediate",
                                      "endTime": jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 3600).unwrap()},
                         "billing": {"chargeWhenIdle": true, "discount": 25}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let by_reservation =
        ListParams::default().labels(&format!("gryvia.io/reservation={}", objects.reservation));
    let idle = wait_for(
        "the reservation's idle record",
        Duration::from_secs(60),
        || {
            // The open one: a sample the operator's cache had not yet seen its own record of
            // can open a second record, which closes the first at its start (split, never
            // overlapping).
            let (records, lp) = (records.clone(), by_reservation.clone());
            async move {
                records
                    .list(&lp)
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|r| r.spec.end_time.is_none())
            }
        },
    )
    .await
    .unwrap();
    let idle_name = idle.metadata.name.clone().unwrap();
    objects.records.push(idle_name.clone());
    assert_eq!(idle.spec.tenant, tenant);
    assert_eq!(idle.spec.workload.kind, "GryviaReservation");
    assert_eq!(idle.spec.workload.name, objects.reservation);
    assert_eq!(idle.spec.sku, objects.reservation_sku);
    assert_eq!(idle.spec.gpu_count, 8);
    assert_eq!(idle.spec.discount_percent, Some(25));
    assert_eq!(idle.spec.end_time, None);
    reservations
        .delete(&objects.reservation, &DeleteParams::default())
        .await
        .unwrap();
    let closed = wait_for(
        "the idle record closed and priced",
        Duration::from_secs(60),
        || {
            let (records, name) = (records.clone(), idle_name.clone());
            async move {
                let r = records.get(&name).await.ok()?;
                let st = r.status.clone()?;
                (r.spec.end_time.is_some()
                    && st.gpu_seconds
                        == (r.spec.end_time.as_ref()?.0.as_second()
                            - r.spec.start_time.0.as_second())
                            * 8)
                .then_some(st)
            }
        },
    )
    .await
    .unwrap();
    // 8 GPUs at 3600 USD a GPU-hour less 25 %: 0.75 USD a GPU-second.
    let want = gryvia_types::money::Decimal::from_micros(closed.gpu_seconds * 750_000);
    assert_eq!(closed.cost, Some(want), "{closed:?}");
    // Every record of the reservation is closed now (and cleaned up after the test).
    for r in records.list(&by_reservation).await.unwrap().items {
        assert!(r.spec.end_time.is_some(), "{r:?}");
        let name = r.metadata.name.clone().unwrap();
        if name != idle_name {
            objects.records.push(name);
        }
    }

    agent.abort();
    let _ = std::fs::remove_file(&trace);

    // The job goes while the quota-operator runs: it removes its metering finalizer.
    jobs.delete("first", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the job to go", Duration::from_secs(60), || async {
        matches!(jobs.get_opt("first").await, Ok(None)).then_some(())
    })
    .await
    .unwrap();
}
