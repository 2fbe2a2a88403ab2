//! `gryvia submit`, `status`, `logs`, `queue` and `capacity`: AI jobs from the command line.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::{AsyncBufReadExt, TryStreamExt};
use gryvia_types::{GryviaAIJob, JobPhase};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, LogParams};

use crate::output::{Output, Table, print_objects};

/// Where a job comes from.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// A YAML file with one or more GryviaAIJobs (`-` for standard input).
    #[arg(short = 'f', long = "file", conflicts_with = "template")]
    pub file: Option<PathBuf>,
    /// Render this GryviaTemplate into a job.
    #[arg(long)]
    pub template: Option<String>,
    /// A template parameter, `name=value` (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE", requires = "template")]
    pub params: Vec<String>,
    /// Name of the job rendered from a template (generated when absent).
    #[arg(long, requires = "template")]
    pub name: Option<String>,
    /// Namespace (default: the job's, else the kubeconfig's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Wait until the job finishes, printing its progress; exit 1 when it fails.
    #[arg(long)]
    pub wait: bool,
    /// Seconds to wait with --wait.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
}

fn phase(j: &GryviaAIJob) -> String {
    j.status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or_else(|| "New".to_owned(), |p| format!("{p:?}"))
}

fn parse_params(params: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    params
        .iter()
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                .with_context(|| format!("--param {p:?}: expected NAME=VALUE"))
        })
        .collect()
}

/// `gryvia submit`.
pub async fn submit(args: SubmitArgs) -> anyhow::Result<()> {
    let jobs: Vec<GryviaAIJob> = match (&args.file, &args.template) {
        (Some(file), _) => jobs_from_file(file)?,
        (None, Some(_)) => Vec::new(),
        (None, None) => bail!("give a job: --file FILE or --template NAME"),
    };
    let params = parse_params(&args.params)?;
    let client = gryvia_client::connect().await?;
    let default_ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let mut to_create = jobs;
    if let Some(tpl) = &args.template {
        to_create.push(
            gryvia_client::ops::jobs::render_template(
                &client,
                tpl,
                args.name.as_deref(),
                &default_ns,
                &params,
            )
            .await?,
        );
    }
    let mut created = Vec::new();
    for mut job in to_create {
        if let Some(ns) = &args.namespace {
            job.metadata.namespace = Some(ns.clone());
        } else if job.metadata.namespace.is_none() {
            job.metadata.namespace = Some(default_ns.clone());
        }
        let job = gryvia_client::ops::jobs::submit(&client, &job).await?;
        println!(
            "gryviaaijob {}/{} created",
            job.namespace().unwrap_or_default(),
            job.name_any()
        );
        created.push(job);
    }
    if !args.wait {
        return Ok(());
    }
    let mut failed = Vec::new();
    for job in created {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let mut progress = crate::progress::Progress::start(&name);
        let done = gryvia_client::ops::jobs::wait_finished(
            &client,
            &ns,
            &name,
            Duration::from_secs(args.timeout),
            |j| {
                let msg = j
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default();
                progress.state(format!("{name}: {} {msg}", phase(j)).trim_end());
            },
        )
        .await;
        progress.finish();
        let done = done?;
        if done.status.as_ref().and_then(|s| s.phase) == Some(JobPhase::Failed) {
            failed.push(format!(
                "{name}: {}",
                done.status.and_then(|s| s.message).unwrap_or_default()
            ));
        }
    }
    if !failed.is_empty() {
        bail!("job failed: {}", failed.join("; "));
    }
    Ok(())
}

fn jobs_from_file(file: &std::path::Path) -> anyhow::Result<Vec<GryviaAIJob>> {
    let docs = crate::read_documents(file)?;
    if docs.is_empty() {
        bail!("{}: no object in the file", file.display());
    }
    let validator = gryvia_types::validation::Validator::new()?;
    let mut jobs = Vec::new();
    for doc in docs {
        if doc["kind"] != "GryviaAIJob" {
            bail!(
                "{}: kind {} is not a GryviaAIJob (apply other kinds with kubectl)",
                file.display(),
                doc["kind"]
            );
        }
        validator
            .validate(&doc)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        jobs.push(serde_json::from_value(doc).with_context(|| format!("read {}", file.display()))?);
    }
    Ok(jobs)
}

/// `gryvia status JOB`.
pub async fn status(name: &str, namespace: Option<String>, output: Output) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    let job = gryvia_client::ops::jobs::get(&client, &ns, name)
        .await?
        .with_context(|| format!("job {ns}/{name} not found"))?;
    if output != Output::Table {
        return print_objects(&[job], output);
    }
    let st = job.status.clone().unwrap_or_default();
    let mut out = String::new();
    out.push_str(&format!("Job:        {ns}/{name}\n"));
    out.push_str(&format!("Phase:      {}\n", phase(&job)));
    if let Some(m) = &st.message {
        out.push_str(&format!("Message:    {m}\n"));
    }
    out.push_str(&format!(
        "Workers:    {} x {} GPU {} (active {}, succeeded {})\n",
        job.spec.replicas,
        job.spec.gpus,
        job.spec.gpu_type.as_deref().unwrap_or("(any type)"),
        st.active,
        st.succeeded
    ));
    out.push_str(&format!(
        "Retries:    {} of {} used; {} infrastructure failure(s) not counted\n",
        st.retries, job.spec.retry_limit, st.infrastructure_failures
    ));
    if !st.avoided_nodes.is_empty() {
        out.push_str(&format!("Avoids:     {}\n", st.avoided_nodes.join(", ")));
    }
    if let Some(t) = &job.spec.template_ref {
        out.push_str(&format!("Template:   {}\n", t.name));
    }
    if let Some(pc) = &st.priority_class_name {
        out.push_str(&format!("Priority:   {pc}\n"));
    }
    if let Some(k) = &st.kueue {
        out.push_str(&format!(
            "Kueue:      {} in LocalQueue {}{}{}; evicted {} time(s)\n",
            k.state,
            k.local_queue,
            k.cluster_queue
                .as_ref()
                .map(|c| format!(" (ClusterQueue {c})"))
                .unwrap_or_default(),
            k.message
                .as_ref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default(),
            k.evictions
        ));
    }
    out.push('\n');
    let mut conds = Table::new(&["CONDITION", "STATUS", "REASON", "MESSAGE"]);
    for c in &st.conditions {
        conds.row(vec![
            c.type_.clone(),
            c.status.clone(),
            c.reason.clone(),
            c.message.clone(),
        ]);
    }
    out.push_str(&conds.render());
    let pods = gryvia_client::ops::jobs::pods_of(&client, &ns, name).await?;
    if !pods.is_empty() {
        out.push('\n');
        let mut t = Table::new(&["POD", "NODE", "PHASE"]);
        for p in &pods {
            t.row(vec![
                p.name_any(),
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| "-".into()),
                p.status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default(),
            ]);
        }
        out.push_str(&t.render());
    }
    if !st.failures.is_empty() {
        out.push('\n');
        let mut t = Table::new(&["FAILED POD", "NODE", "CLASS", "REASON"]);
        for f in &st.failures {
            t.row(vec![
                f.pod.clone(),
                f.node.clone().unwrap_or_else(|| "-".into()),
                format!("{:?}", f.class),
                f.reason.clone(),
            ]);
        }
        out.push_str(&t.render());
    }
    crate::print_out(&out)
}

/// `gryvia logs JOB`.
pub async fn logs(
    name: &str,
    namespace: Option<String>,
    tail: Option<i64>,
    follow: bool,
    worker: Option<u32>,
) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let ns = namespace.unwrap_or_else(|| client.default_namespace().to_owned());
    gryvia_client::ops::jobs::get(&client, &ns, name)
        .await?
        .with_context(|| format!("job {ns}/{name} not found"))?;
    let latest = gryvia_reconcile::aijob::newest_attempts(
        gryvia_client::ops::jobs::pods_of(&client, &ns, name).await?,
        worker,
    );
    if latest.is_empty() {
        bail!("job {ns}/{name} has no started worker yet (see `gryvia status {name}`)");
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let several = latest.len() > 1;
    let params = LogParams {
        container: Some(gryvia_reconcile::aijob::WORKER.to_owned()),
        tail_lines: tail,
        follow,
        ..Default::default()
    };
    if follow {
        let mut streams = Vec::new();
        for p in &latest {
            let pod = p.name_any();
            let stream = api
                .log_stream(&pod, &params)
                .await
                .with_context(|| format!("logs of pod {pod}"))?;
            let prefix = if several {
                format!("[{pod}] ")
            } else {
                String::new()
            };
            streams.push(Box::pin(
                stream.lines().map_ok(move |l| format!("{prefix}{l}")),
            ));
        }
        let mut all = futures::stream::select_all(streams);
        while let Some(line) = all.try_next().await.context("read logs")? {
            crate::print_out(&format!("{line}\n"))?;
        }
        return Ok(());
    }
    for p in &latest {
        let pod = p.name_any();
        let text = api
            .logs(&pod, &params)
            .await
            .with_context(|| format!("logs of pod {pod}"))?;
        for line in text.lines() {
            if several {
                crate::print_out(&format!("[{pod}] {line}\n"))?;
            } else {
                crate::print_out(&format!("{line}\n"))?;
            }
        }
    }
    Ok(())
}

/// When a job starts, as `in 12m (14:05:00Z)`, or `unknown`.
fn eta_text(eta: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    let Some(t) = eta else {
        return "unknown".to_owned();
    };
    let secs = (t.0.as_second() - jiff::Timestamp::now().as_second()).max(0);
    let when = if secs < 60 {
        "now".to_owned()
    } else if secs < 3600 {
        format!("in {}m", secs / 60)
    } else {
        format!("in {}h{:02}m", secs / 3600, (secs % 3600) / 60)
    };
    format!("{when} ({})", t.0)
}

/// `gryvia queue`: jobs a native queue holds with their queue, position, expected start and
/// why; jobs Kueue holds with their LocalQueue and Kueue's word; other waiting jobs with what
/// their `Scheduled` condition says.
pub async fn queue(namespace: Option<String>, all: bool, output: Output) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let ns = (!all).then(|| namespace.unwrap_or_else(|| client.default_namespace().to_owned()));
    let jobs = gryvia_client::ops::jobs::pending(&client, ns.as_deref()).await?;
    if output != Output::Table {
        return print_objects(&jobs, output);
    }
    if jobs.is_empty() {
        return crate::print_out("no job is waiting\n");
    }
    let mut t = Table::new(&[
        "NAMESPACE",
        "JOB",
        "QUEUE",
        "POS",
        "PRIORITY",
        "GPUS",
        "EXPECTED START",
        "WHY",
    ]);
    for j in &jobs {
        let w = gryvia_reconcile::queue::waiting(j);
        t.row(vec![
            w.namespace,
            w.job,
            w.queue.unwrap_or_else(|| "-".to_owned()),
            w.position.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            w.priority.to_string(),
            format!(
                "{} x {}{}",
                w.replicas,
                w.gpus_per_worker,
                w.gpu_type.map(|g| format!(" {g}")).unwrap_or_default()
            ),
            j.status
                .as_ref()
                .and_then(|s| s.queue.as_ref())
                .map_or_else(|| "-".to_owned(), |q| eta_text(q.expected_start.as_ref())),
            w.why,
        ]);
    }
    t.print();
    Ok(())
}

/// `gryvia queue --what-if -f job.yaml`: what the native queue would do with the job if it
/// were submitted now; creates nothing.
pub async fn what_if(
    file: &std::path::Path,
    namespace: Option<String>,
    output: Output,
) -> anyhow::Result<()> {
    use gryvia_reconcile::queue::WhatIf;
    let mut jobs = jobs_from_file(file)?;
    if jobs.len() != 1 {
        bail!(
            "{}: --what-if takes one GryviaAIJob, the file has {}",
            file.display(),
            jobs.len()
        );
    }
    let mut job = jobs.remove(0);
    let client = gryvia_client::connect().await?;
    let ns = namespace
        .or_else(|| job.metadata.namespace.clone())
        .unwrap_or_else(|| client.default_namespace().to_owned());
    job.metadata.namespace = Some(ns.clone());
    if job.metadata.name.is_none() {
        job.metadata.name = Some(
            job.metadata
                .generate_name
                .clone()
                .unwrap_or_else(|| "what-if".to_owned()),
        );
    }
    let answer = gryvia_client::ops::jobs::what_if(&client, &job).await?;
    if output != Output::Table {
        return print_objects(std::slice::from_ref(&answer), output);
    }
    let name = format!("{ns}/{}", job.name_any());
    let line = match answer {
        WhatIf::NoQueue { namespace } => format!(
            "{name}: no GryviaQueue covers namespace {namespace}; kube-scheduler would place it as it comes\n"
        ),
        WhatIf::StartsNow { admission } => {
            let mut nodes = admission.nodes.clone();
            nodes.dedup();
            format!(
                "{name}: would start now: queue {} admits it ({} GPUs of {} on {})\n",
                admission.queue,
                gryvia_reconcile::queue::gpus_text(admission.milli_gpus),
                admission.product.as_deref().unwrap_or(&admission.gpu_type),
                nodes.join(", ")
            )
        }
        WhatIf::Waits { standing } => format!(
            "{name}: would wait in queue {} at position {}: {}; expected start {}\n",
            standing.queue,
            standing.position,
            standing.reason,
            eta_text(standing.expected_start.as_ref())
        ),
    };
    crate::print_out(&line)
}

/// `gryvia capacity`.
pub async fn capacity(output: Output, by_node: bool) -> anyhow::Result<()> {
    let client = gryvia_client::connect().await?;
    let nodes = gryvia_client::ops::jobs::capacity(&client).await?;
    if output != Output::Table {
        return print_objects(&nodes, output);
    }
    let mut by_type: BTreeMap<&str, (usize, i32, i32, i32)> = BTreeMap::new();
    for n in &nodes {
        let e = by_type.entry(n.gpu_type.as_str()).or_default();
        e.0 += 1;
        e.1 += n.allocatable;
        e.2 += n.used;
        e.3 += n.free;
    }
    let mut t = Table::new(&["GPU TYPE", "NODES", "GPUS", "USED", "FREE"]);
    for (ty, (count, total, used, free)) in &by_type {
        t.row(vec![
            (*ty).to_owned(),
            count.to_string(),
            total.to_string(),
            used.to_string(),
            free.to_string(),
        ]);
    }
    let mut out = t.render();
    if by_node {
        out.push('\n');
        let mut t = Table::new(&["NODE", "GPU TYPE", "GPUS", "USED", "FREE", "NOTE"]);
        for n in &nodes {
            t.row(vec![
                n.node.clone(),
                n.gpu_type.clone(),
                n.allocatable.to_string(),
                n.used.to_string(),
                n.free.to_string(),
                n.unavailable.clone().unwrap_or_default(),
            ]);
        }
        out.push_str(&t.render());
    }
    crate::print_out(&out)
}
