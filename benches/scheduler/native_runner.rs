//! Runs Kueue's scheduler performance scenario (the generator YAML of
//! `test/performance/scheduler/configs/`, e.g. `baseline/generator.yaml`) against Gryvia's
//! native queue scheduler, the way Kueue's own runner runs it against Kueue: per cohort and
//! queue a GryviaQueue (nominal quota, borrowing limit, reclaim and within-queue preemption as
//! the scenario says) covering a namespace of its own; per workload set a stream of one-worker
//! GryviaAIJobs of `request` GPUs of one product, one every `creationIntervalMs`; each job is
//! finished (deleted, so its quota is free) `runtimeMs` after its admission. A job preempted
//! (its `status.preemption` set, or its admission withdrawn) stops: its runtime starts again at
//! its next admission, and the eviction is counted.
//!
//! Writes `wlStates.csv` in the columns of Kueue's runner (id, class name, namespace, name, ms
//! to admitted, ms to finish, num evictions; then ms from the start to its creation, for a
//! timeline) and `summary.txt` (wall time, queue usage) into
//! `--out`, so `benches/scheduler/run` reads both runners the same way.
//!
//!   native-scheduler-runner --config FILE --product PRODUCT --out DIR [--prefix P] [--timeout SECONDS]
//!
//! `--prefix` (default `nq`) starts the names of its namespaces, queues and cohorts, so two
//! runs on one control plane do not share them.
//!
//! `--finish-by-pods` (for an operator that makes each admitted job's batch Job and pod) lets
//! the jobs end as jobs do: each pod runs `runtimeMs` on its KWOK node and succeeds, and a job
//! is finished when its status says `Succeeded` (the quota and the node room come back through
//! the Job, the AI job controller and the queue); finished jobs are left in place. Without it, a
//! pod would run on after its job is deleted and hold its node's GPUs until the garbage
//! collector removes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use gryvia_types::GryviaAIJob;
use gryvia_types::scheduling::GryviaQueue;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;
use serde_json::json;

/// Label on everything the runner makes.
const LABEL: &str = "gryvia.io/scheduler-bench";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    cohorts: Vec<CohortSet>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CohortSet {
    count: usize,
    queues_sets: Vec<QueueSet>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueSet {
    count: usize,
    nominal_quota: i32,
    borrowing_limit: i32,
    reclaim_within_cohort: String,
    within_cluster_queue: String,
    workloads_sets: Vec<WorkloadSet>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct WorkloadSet {
    count: usize,
    creation_interval_ms: u64,
    workloads: Vec<Workload>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Workload {
    class_name: String,
    runtime_ms: u64,
    priority: i32,
    request: i32,
}

/// What the runner knows of one job.
#[derive(Clone, Default)]
struct Record {
    class: String,
    namespace: String,
    created: Option<Instant>,
    /// First admission.
    admitted: Option<Instant>,
    /// Start of the admission it runs under now (none while waiting or preempted).
    running_since: Option<Instant>,
    /// Admissions so far: a finish scheduled under an earlier one is void.
    admissions: u32,
    evictions: u32,
    /// Unit-seconds of quota held under earlier admissions.
    held: f64,
    finished: Option<Instant>,
    runtime: Duration,
    request: i32,
}

impl Record {
    /// An admission starts its run at `now` (the first one is its time to admission).
    fn start(&mut self, now: Instant) {
        self.admitted.get_or_insert(now);
        self.running_since = Some(now);
        self.admissions += 1;
    }

    /// Its run stops at `now`: what it held counts. Whether it was running.
    fn stop(&mut self, now: Instant) -> bool {
        let Some(since) = self.running_since.take() else {
            return false;
        };
        self.held += f64::from(self.request) * now.saturating_duration_since(since).as_secs_f64();
        true
    }
}

type Records = Arc<Mutex<HashMap<(String, String), Record>>>;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: native-scheduler-runner --config FILE --product PRODUCT --out DIR [--prefix P] [--timeout SECONDS] [--finish-by-pods]";
    let by_pods = args.iter().any(|a| a == "--finish-by-pods");
    let prefix = arg(&args, "--prefix").unwrap_or_else(|| "nq".to_owned());
    let config_path = arg(&args, "--config").ok_or_else(|| anyhow::anyhow!(usage))?;
    let product = arg(&args, "--product").ok_or_else(|| anyhow::anyhow!(usage))?;
    let out = std::path::PathBuf::from(arg(&args, "--out").ok_or_else(|| anyhow::anyhow!(usage))?);
    let timeout = Duration::from_secs(
        arg(&args, "--timeout")
            .map(|t| t.parse())
            .transpose()?
            .unwrap_or(1800),
    );
    let config: Config = serde_saphyr::from_str(&std::fs::read_to_string(&config_path)?)?;
    let client = kube::Client::try_default().await?;
    std::fs::create_dir_all(&out)?;

    let (streams, nominal_total) = create_queues(&client, &config, &product, &prefix).await?;
    let records: Records = Arc::default();
    let total: usize = streams
        .iter()
        .map(|(_, _, s)| s.count * s.workloads.len())
        .sum();
    let start = Instant::now();

    let watch = watch_admissions(client.clone(), records.clone(), by_pods);

    create_jobs(&client, streams, &records, &product, by_pods).await?;
    eprintln!(
        "created {total} jobs in {:.1} s",
        start.elapsed().as_secs_f64()
    );

    // Until every job finished (or the timeout).
    loop {
        let done = records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .filter(|r| r.finished.is_some())
            .count();
        if done == total || start.elapsed() > timeout {
            eprintln!(
                "{done} of {total} jobs finished after {:.1} s",
                start.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    watch.abort();

    report(&records, start, nominal_total, total, &out)?;
    Ok(())
}

/// A namespace and a GryviaQueue per queue of the scenario; the workload streams of each and
/// the total nominal quota.
async fn create_queues(
    client: &kube::Client,
    config: &Config,
    product: &str,
    prefix: &str,
) -> anyhow::Result<(Vec<(String, usize, WorkloadSet)>, i64)> {
    let mut streams = Vec::new();
    let mut nominal_total: i64 = 0;
    for (c, cohort) in config.cohorts.iter().enumerate() {
        for ci in 0..cohort.count {
            for qs in &cohort.queues_sets {
                for qi in 0..qs.count {
                    let name = format!("{prefix}-{c}-{ci}-{qi}");
                    let ns: Namespace = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {LABEL: "true"}}
                    }))?;
                    Api::<Namespace>::all(client.clone())
                        .create(&PostParams::default(), &ns)
                        .await?;
                    let queue: GryviaQueue = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {LABEL: "true"}},
                        "spec": {
                            "namespaces": [name],
                            "cohort": format!("{prefix}-cohort-{c}-{ci}"),
                            "queueingStrategy": "BestEffortFIFO",
                            "resources": [{"gpuType": product, "nominal": qs.nominal_quota,
                                           "borrowingLimit": qs.borrowing_limit}],
                            "preemption": {
                                "withinQueue": if qs.within_cluster_queue == "Never" { "Never" } else { "LowerPriority" },
                                "reclaimWithinCohort": qs.reclaim_within_cohort != "Never",
                            },
                        }
                    }))?;
                    Api::<GryviaQueue>::all(client.clone())
                        .create(&PostParams::default(), &queue)
                        .await?;
                    nominal_total += i64::from(qs.nominal_quota);
                    for (si, set) in qs.workloads_sets.iter().enumerate() {
                        streams.push((name.clone(), si, set.clone()));
                    }
                }
            }
        }
    }

    Ok((streams, nominal_total))
}

/// A watch of every job: each admitted job is finished (deleted) after its runtime, or with
/// `by_pods` counted finished when its status says it succeeded.
fn watch_admissions(
    client: kube::Client,
    records: Records,
    by_pods: bool,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<GryviaAIJob> = Api::all(client.clone());
        let cfg = watcher::Config::default().labels(&format!("{LABEL}=true"));
        let mut events = watcher(api, cfg).applied_objects().boxed();
        while let Ok(Some(job)) = events.try_next().await {
            let (Some(ns), Some(name)) =
                (job.metadata.namespace.clone(), job.metadata.name.clone())
            else {
                continue;
            };
            let status = job.status.as_ref();
            let succeeded = status.and_then(|s| s.phase) == Some(gryvia_types::JobPhase::Succeeded);
            let runs = status.is_some_and(|s| s.admission.is_some() && s.preemption.is_none());
            let (runtime, admission) = {
                let mut r = records
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some(rec) = r.get_mut(&(ns.clone(), name.clone())) else {
                    continue;
                };
                if by_pods {
                    let now = Instant::now();
                    if succeeded && rec.finished.is_none() {
                        // Its admission may show only with the end (both seen in one event).
                        rec.admitted.get_or_insert(now);
                        rec.stop(now);
                        rec.finished = Some(now);
                    } else if runs && rec.running_since.is_none() && rec.finished.is_none() {
                        rec.start(now);
                    } else if !runs && !succeeded && rec.stop(now) {
                        rec.evictions += 1;
                    }
                    continue;
                }
                match (runs, rec.running_since) {
                    (true, None) if rec.finished.is_none() => {
                        rec.start(Instant::now());
                        (rec.runtime, rec.admissions)
                    }
                    (false, Some(_)) => {
                        // Preempted: what it held so far counts, its runtime starts again.
                        rec.stop(Instant::now());
                        rec.evictions += 1;
                        continue;
                    }
                    _ => continue,
                }
            };
            let client = client.clone();
            let records = records.clone();
            tokio::spawn(async move {
                tokio::time::sleep(runtime).await;
                {
                    let r = records
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let current = r.get(&(ns.clone(), name.clone())).is_some_and(|rec| {
                        rec.admissions == admission && rec.running_since.is_some()
                    });
                    if !current {
                        return;
                    }
                }
                let api: Api<GryviaAIJob> = Api::namespaced(client, &ns);
                let _ = api.delete(&name, &DeleteParams::background()).await;
                let mut r = records
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(rec) = r.get_mut(&(ns, name)) {
                    let now = Instant::now();
                    rec.stop(now);
                    rec.finished = Some(now);
                }
            });
        }
    })
}

/// Creates the jobs: one task per queue and workload set, as Kueue's generator does.
async fn create_jobs(
    client: &kube::Client,
    streams: Vec<(String, usize, WorkloadSet)>,
    records: &Records,
    product: &str,
    by_pods: bool,
) -> anyhow::Result<()> {
    let mut creators = Vec::new();
    for (ns, si, set) in streams {
        let client = client.clone();
        let records = records.clone();
        let product = product.to_owned();
        creators.push(tokio::spawn(async move {
            let api: Api<GryviaAIJob> = Api::namespaced(client, &ns);
            for k in 0..set.count {
                for w in &set.workloads {
                    let name = format!("{}-{si}-{k}", w.class_name);
                    // KWOK keeps the pod running this long (a Go duration), then it succeeds.
                    let duration = if by_pods {
                        format!("{}ms", w.runtime_ms)
                    } else {
                        "3600s".to_owned()
                    };
                    let job: GryviaAIJob = serde_json::from_value(json!({
                        "metadata": {"name": name, "namespace": ns, "labels": {LABEL: "true"}},
                        "spec": {
                            "image": "registry.local/bench:1", "gpus": w.request,
                            "gpuType": product,
                            // Kueue's priorities (50, 100, 200) in spec.priority's 0-100.
                            "priority": (w.priority / 2).clamp(0, 100),
                            "podAnnotations": {"gryvia.io/testenv-duration": duration},
                        }
                    }))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                    records
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(
                            (ns.clone(), name.clone()),
                            Record {
                                class: w.class_name.clone(),
                                namespace: ns.clone(),
                                created: Some(Instant::now()),
                                runtime: Duration::from_millis(w.runtime_ms),
                                request: w.request,
                                ..Record::default()
                            },
                        );
                    api.create(&PostParams::default(), &job).await?;
                }
                tokio::time::sleep(Duration::from_millis(set.creation_interval_ms)).await;
            }
            anyhow::Ok(())
        }));
    }
    for c in creators {
        c.await??;
    }
    Ok(())
}

/// Writes `wlStates.csv` and `summary.txt` into `out`.
fn report(
    records: &Records,
    start: Instant,
    nominal_total: i64,
    total: usize,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let records = records
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let ms = |from: Option<Instant>, to: Option<Instant>| match (from, to) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_millis().to_string(),
        _ => String::new(),
    };
    let mut csv = String::from(
        "id,class name,namespace,name,ms to admitted,ms to finish,num evictions,ms to created\n",
    );
    let mut used: f64 = 0.0;
    let mut last = start;
    let mut first = None::<Instant>;
    for (i, ((_, name), r)) in records.iter().enumerate() {
        csv.push_str(&format!(
            "{i},{},{},{name},{},{},{},{}\n",
            r.class,
            r.namespace,
            ms(r.created, r.admitted),
            ms(r.created, r.finished),
            r.evictions,
            ms(Some(start), r.created),
        ));
        used += r.held;
        if let Some(f) = r.finished {
            last = last.max(f);
        }
        if let Some(c) = r.created {
            first = Some(first.map_or(c, |f: Instant| f.min(c)));
        }
    }
    std::fs::write(out.join("wlStates.csv"), csv)?;
    let wall = last
        .saturating_duration_since(first.unwrap_or(start))
        .as_secs_f64();
    #[expect(clippy::cast_precision_loss, reason = "quota totals are small")]
    let usage = 100.0 * used / (nominal_total as f64 * wall.max(f64::EPSILON));
    std::fs::write(
        out.join("summary.txt"),
        format!("wall_s {wall:.2}\nusage_pct {usage:.1}\njobs {total}\n"),
    )?;
    Ok(())
}
