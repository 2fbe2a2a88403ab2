//! End-to-end: `gryvia submit`, `status`, `queue`, `capacity` and `logs` against a real
//! control plane (testenv/), with the ai-operator's controllers running in this process.

use std::time::Duration;

use gryvia_testsupport::{KwokNodes, NODE_GROUP_TAINT, TestNamespace, unique, wait_for};
use gryvia_types::GryviaTemplate;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// The tests of this file run one at a time: each starts the ai-operator's controllers in
/// this process, and two sets (one with the native queue scheduler, one without) would both
/// act on every job.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn gryvia(args: &[&str]) -> (bool, String, String) {
    gryvia_testsupport::run_binary(env!("CARGO_BIN_EXE_gryvia"), args).await
}

/// The ai-operator's controllers, in this process, for as long as the guard lives.
struct Controllers(tokio::task::JoinHandle<()>);

impl Controllers {
    fn start(client: &kube::Client) -> Self {
        Self::with_flags(client, &[])
    }

    /// The controllers the ai-operator runs with `flags`.
    fn with_flags(client: &kube::Client, flags: &[&str]) -> Self {
        let mut args = vec!["gryvia-ai-operator"];
        args.extend_from_slice(flags);
        let start = gryvia_client::operators::ai::controllers(
            &<gryvia_client::operators::ai::Flags as clap::Parser>::parse_from(args),
        )
        .into_controllers(
            client.clone(),
            gryvia_client::metrics::Metrics::new(),
            false,
        );
        Controllers(tokio::spawn(start()))
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn submit_wait_status_queue_and_capacity_from_the_command_line() {
    let _serial = SERIAL.lock().await;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "cli-jobs").await.unwrap();
    let _controllers = Controllers::start(&client);
    let dir = std::env::temp_dir().join(format!("gryvia-cli-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();

    // submit --file --wait: runs to Succeeded and says so.
    let file = dir.join("job.yaml");
    std::fs::write(
        &file,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: hello\nspec:\n  image: registry.local/hello:1\n  gpus: 1\n",
    )
    .unwrap();
    let (ok, out, err) = gryvia(&[
        "submit",
        "-f",
        file.to_str().unwrap(),
        "-n",
        &ns.name,
        "--wait",
        "--timeout",
        "90",
    ])
    .await;
    assert!(ok, "{out}{err}");
    assert_eq!(out.trim(), format!("gryviaaijob {}/hello created", ns.name));
    assert!(err.contains("hello: Succeeded"), "{err}");

    let (ok, out, _) = gryvia(&["status", "hello", "-n", &ns.name]).await;
    assert!(ok);
    assert!(out.contains("Phase:      Succeeded"), "{out}");
    assert!(out.contains("Retries:    0 of 3 used"), "{out}");
    assert!(out.contains("Succeeded   True"), "{out}");
    // logs: testenv's KWOK serves a simulated training log for every container, through the
    // API server's pods/log (kubelet API over TLS).
    let (ok, out, err) = gryvia(&["logs", "hello", "-n", &ns.name]).await;
    assert!(ok, "{err}");
    assert!(out.contains("epoch 3/3 step 300"), "{out}");
    assert!(
        !out.starts_with("[hello-"),
        "one worker: no pod prefix: {out}"
    );
    let (ok, out, _) = gryvia(&["logs", "hello", "-n", &ns.name, "--tail", "1"]).await;
    assert!(ok);
    assert_eq!(out.trim(), "checkpoint written to /data/checkpoint-300");
    let (ok, out, _) = gryvia(&["status", "hello", "-n", &ns.name, "-o", "json"]).await;
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["phase"], "Succeeded");

    // An invalid file is refused before anything is sent, naming the field.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: bad\nspec:\n  image: x\n  gpus: 100\n",
    )
    .unwrap();
    let (ok, _, err) = gryvia(&["submit", "-f", bad.to_str().unwrap(), "-n", &ns.name]).await;
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("spec.gpus"), "{err}");

    // A failing job: --wait exits non-zero with the reason.
    std::fs::write(
        &file,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: crash\nspec:\n  image: x\n  gpus: 1\n  retryLimit: 0\n  podAnnotations:\n    gryvia.io/testenv-fail: \"true\"\n",
    )
    .unwrap();
    let (ok, _, err) = gryvia(&[
        "submit",
        "-f",
        file.to_str().unwrap(),
        "-n",
        &ns.name,
        "--wait",
        "--timeout",
        "90",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("error: job failed: crash: 1 failed pods used up retryLimit 0"),
        "{err}"
    );

    // A template with parameters.
    let tpl_name = format!("{}-tpl", ns.name);
    let tpl: GryviaTemplate = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate", "metadata": {"name": tpl_name},
        "spec": {"category": "fine-tuning",
                 "defaults": {"image": "registry.local/ft:{{ .version }}", "gpus": 1, "args": ["--lr={{ .lr }}"]},
                 "parameters": [{"name": "version", "required": true},
                                {"name": "lr", "type": "number", "default": "0.001", "validation": {"min": 0, "max": 1}}]}
    }))
    .unwrap();
    let tpls: Api<GryviaTemplate> = Api::all(client.clone());
    tpls.create(&PostParams::default(), &tpl).await.unwrap();
    let (ok, _, err) = gryvia(&[
        "submit",
        "--template",
        &tpl_name,
        "--param",
        "version=v1",
        "--param",
        "lr=2",
        "-n",
        &ns.name,
    ])
    .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!("error: template {tpl_name}: parameters.lr: 2 is above the maximum 1")
    );
    let (ok, _, err) = gryvia(&["submit", "--template", &tpl_name, "-n", &ns.name]).await;
    assert!(!ok);
    assert!(err.contains("parameters.version: required"), "{err}");
    let (ok, out, err) = gryvia(&[
        "submit",
        "--template",
        &tpl_name,
        "--param",
        "version=v3",
        "-n",
        &ns.name,
        "--wait",
        "--timeout",
        "90",
    ])
    .await;
    assert!(ok, "{out}{err}");
    let created = out
        .trim()
        .strip_prefix("gryviaaijob ")
        .unwrap()
        .strip_suffix(" created")
        .unwrap();
    let name = created.split('/').nth(1).unwrap().to_owned();
    assert!(name.starts_with(&format!("{tpl_name}-")), "{name}");
    let job = gryvia_client::ops::jobs::get(&client, &ns.name, &name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.spec.image, "registry.local/ft:v3");
    assert_eq!(job.spec.args, vec!["--lr=0.001"]);

    // queue: a job that cannot be placed, with the scheduler's reason.
    std::fs::write(
        &file,
        "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: huge\nspec:\n  image: x\n  gpus: 64\n  priority: 90\n",
    )
    .unwrap();
    let (ok, _, err) = gryvia(&["submit", "-f", file.to_str().unwrap(), "-n", &ns.name]).await;
    assert!(ok, "{err}");
    let queue = wait_for(
        "huge in the queue as Unschedulable",
        Duration::from_secs(60),
        || {
            let ns = ns.name.clone();
            async move {
                let (ok, out, _) = gryvia(&["queue", "-n", &ns]).await;
                (ok && out.contains("Unschedulable")).then_some(out)
            }
        },
    )
    .await
    .unwrap();
    assert!(queue.contains("huge"), "{queue}");
    assert!(queue.contains("Insufficient nvidia.com/gpu"), "{queue}");
    assert!(queue.contains("1 x 64"), "{queue}");

    // capacity: free GPUs by type and node.
    let (ok, out, _) = gryvia(&["capacity", "--nodes"]).await;
    assert!(ok);
    assert!(out.starts_with("GPU TYPE"), "{out}");
    assert!(out.contains("gpu-node-0"), "{out}");

    // logs of a job whose workers never started: one line, non-zero.
    let (ok, _, err) = gryvia(&["logs", "huge", "-n", &ns.name]).await;
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("has no started worker yet"), "{err}");

    let _ = tpls.delete(&tpl_name, &DeleteParams::default()).await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn quota_with_budget_shows_the_budgets_spend_and_state() {
    let _serial = SERIAL.lock().await;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let suffix = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros()
            % 0xff_ffff
    );
    let (tenant, sku, record, budget) = (
        format!("cli-budget-{suffix}"),
        format!("cli-sku-{suffix}"),
        format!("cli-usage-{suffix}"),
        format!("cli-budget-{suffix}"),
    );
    let create = |body: serde_json::Value| {
        let client = client.clone();
        async move {
            let obj: kube::api::DynamicObject = serde_json::from_value(body).unwrap();
            let gvk = kube::api::GroupVersionKind::try_from(obj.types.as_ref().unwrap()).unwrap();
            let (ar, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
            Api::<kube::api::DynamicObject>::all_with(client.clone(), &ar)
                .create(&PostParams::default(), &obj)
                .await
                .unwrap();
            ar
        }
    };
    let (start, _) =
        gryvia_reconcile::budget::period(gryvia_types::PeriodType::Monthly, jiff::Timestamp::now());
    let tenant_ar = create(
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
        "metadata": {"name": tenant}, "spec": {"displayName": "cli"}}),
    )
    .await;
    let sku_ar = create(json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku",
        "metadata": {"name": sku}, "spec": {"gpuProduct": format!("CLI-GPU-{suffix}"), "pricePerGpuHour": "1.25"}}))
    .await;
    // 2 GPUs for 4 hours at 1.25: 10 USD, 8 GPU-hours.
    let record_ar = create(
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord",
        "metadata": {"name": record},
        "spec": {"tenant": tenant, "namespace": format!("tenant-{tenant}"),
                 "workload": {"kind": "GryviaAIJob", "name": "j"}, "sku": sku, "gpuCount": 2,
                 "startTime": start.to_string(),
                 "endTime": (start + jiff::SignedDuration::from_hours(4)).to_string()}}),
    )
    .await;
    let budget_ar = create(
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget",
        "metadata": {"name": budget},
        "spec": {"scope": {"type": "tenant", "name": tenant}, "period": {"type": "monthly"},
                 "limits": {"costUSD": 40}, "alerts": [{"threshold": 20}]}}),
    )
    .await;
    let controllers = gryvia_client::operators::ControllerSet::new()
        .with(|s| gryvia_client::controllers::budget::controller(s, Default::default()))
        .into_controllers(
            client.clone(),
            gryvia_client::metrics::Metrics::new(),
            false,
        );
    let running = tokio::spawn(controllers());
    let line = wait_for(
        "the budget in gryvia quota --budget",
        Duration::from_secs(60),
        || {
            let tenant = tenant.clone();
            let budget = budget.clone();
            async move {
                let (ok, stdout, _) = gryvia(&["quota", &tenant, "--budget"]).await;
                let line = stdout
                    .lines()
                    .find(|l| l.starts_with(&format!("Budget {budget}:")))?;
                (ok && line.contains("warning")).then(|| line.to_owned())
            }
        },
    )
    .await;
    running.abort();
    let line = line.unwrap();
    assert_eq!(
        line,
        format!(
            "Budget {budget}: limit $40 per Monthly period: warning; spend $10 (8 GPU-hours), forecast {}",
            line.rsplit("forecast ").next().unwrap()
        )
    );
    for (ar, name) in [
        (&budget_ar, &budget),
        (&record_ar, &record),
        (&sku_ar, &sku),
        (&tenant_ar, &tenant),
    ] {
        let _ = Api::<kube::api::DynamicObject>::all_with(client.clone(), ar)
            .delete(name, &DeleteParams::default())
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn queue_shows_position_reason_and_eta_and_what_if_answers_without_creating() {
    let _serial = SERIAL.lock().await;
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "cli-queue").await.unwrap();
    let product = unique("GPU-CLI");
    let _nodes = KwokNodes::create_with_product(&client, "cliq", 1, 8, &product)
        .await
        .unwrap();
    let queue_name = unique("cli");
    let queues: Api<gryvia_types::scheduling::GryviaQueue> = Api::all(client.clone());
    let q: gryvia_types::scheduling::GryviaQueue = serde_json::from_value(json!({
        "metadata": {"name": queue_name},
        "spec": {"namespaces": [ns.name], "resources": [{"gpuType": product, "nominal": 8}]}
    }))
    .unwrap();
    queues.create(&PostParams::default(), &q).await.unwrap();
    let _controllers = Controllers::with_flags(&client, &["--native-queue-scheduler"]);
    let dir = std::env::temp_dir().join(format!("gryvia-cli-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let job_yaml = |name: &str, gpus: u32, deadline: Option<u32>| {
        let mut y = format!(
            "apiVersion: gryvia.io/v1alpha1\nkind: GryviaAIJob\nmetadata:\n  name: {name}\nspec:\n  image: x\n  gpus: {gpus}\n  gpuType: {product}\n  tolerations:\n  - {{key: {NODE_GROUP_TAINT}, operator: Exists, effect: NoSchedule}}\n  podAnnotations:\n    gryvia.io/testenv-duration: 600s\n"
        );
        if let Some(d) = deadline {
            y.push_str(&format!("  activeDeadlineSeconds: {d}\n"));
        }
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, y).unwrap();
        file.to_str().unwrap().to_owned()
    };

    // Nothing runs: an 8-GPU job would start now, and nothing is created.
    let big = job_yaml("big", 8, Some(3600));
    let (ok, out, err) = gryvia(&["queue", "--what-if", "-f", &big, "-n", &ns.name]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("would start now") && out.contains(&queue_name) && out.contains("8 GPUs"),
        "{out}"
    );
    let jobs: Api<gryvia_types::GryviaAIJob> = Api::namespaced(client.clone(), &ns.name);
    assert!(
        jobs.get_opt("big").await.unwrap().is_none(),
        "what-if created nothing"
    );

    // It runs; a 2-GPU job would wait behind quota, with the expected start from big's
    // deadline.
    let (ok, _, err) = gryvia(&["submit", "-f", &big, "-n", &ns.name]).await;
    assert!(ok, "{err}");
    wait_for("big admitted", Duration::from_secs(60), || async {
        let j = jobs.get("big").await.ok()?;
        j.status?.admission.map(|_| ())
    })
    .await
    .unwrap();
    let small = job_yaml("small", 2, None);
    let (ok, out, err) = gryvia(&["queue", "--what-if", "-f", &small, "-n", &ns.name]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("would wait in queue")
            && out.contains("position 1")
            && out.contains("needs 2 GPUs")
            && (out.contains("in 59m") || out.contains("in 1h00m")),
        "{out}"
    );
    let (ok, out, _) = gryvia(&[
        "queue",
        "--what-if",
        "-f",
        &small,
        "-n",
        &ns.name,
        "-o",
        "json",
    ])
    .await;
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "waits");
    assert_eq!(v["standing"]["position"], 1);

    // Submitted, it waits: `gryvia queue` shows its queue, position, ETA and why.
    let (ok, _, err) = gryvia(&["submit", "-f", &small, "-n", &ns.name]).await;
    assert!(ok, "{err}");
    let listed = wait_for("small in the queue", Duration::from_secs(60), || {
        let ns = ns.name.clone();
        async move {
            let (ok, out, _) = gryvia(&["queue", "-n", &ns]).await;
            (ok && out.contains("needs 2 GPUs")).then_some(out)
        }
    })
    .await
    .unwrap();
    let header = listed.lines().next().unwrap();
    for col in ["QUEUE", "POS", "EXPECTED START", "WHY"] {
        assert!(header.contains(col), "{listed}");
    }
    let row = listed.lines().find(|l| l.contains("small")).unwrap();
    assert!(
        row.contains(&queue_name) && (row.contains("in 59m") || row.contains("in 1h00m")),
        "{listed}"
    );

    // Bad input: one line, non-zero.
    let (ok, _, err) = gryvia(&["queue", "--what-if", "-n", &ns.name]).await;
    assert!(!ok);
    assert!(err.contains("--file"), "{err}");
    let other = TestNamespace::create(&client, "cli-noqueue").await.unwrap();
    let (ok, out, _) = gryvia(&["queue", "--what-if", "-f", &small, "-n", &other.name]).await;
    assert!(ok);
    assert!(out.contains("no GryviaQueue covers"), "{out}");

    let _ = queues.delete(&queue_name, &DeleteParams::default()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
