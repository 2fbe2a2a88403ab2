//! `pod-load`: fills a testenv fleet with running pods across tenants, for the fleet-scale
//! figures of `benches/fleet/run`.
//!
//! Creates `--tenants T` GryviaTenants `fleet-<i>` (the quota-operator makes their namespaces
//! `tenant-fleet-<i>`; each may use `--pods / T` GPUs), then `--pods N` pods spread over their
//! namespaces, every second one asking for one GPU, `--parallel P` creations at a time. The
//! pods are placed by kube-scheduler on the KWOK nodes, which run them for a day
//! (`gryvia.io/testenv-duration`). Prints how long the creations took, how long until every pod
//! ran, and, with `--apiserver-pid`, the API server's and etcd's resident memory. It leaves
//! everything in place (the fleet run measures on it; `testenv/down` removes it).
//!
//! `pod-load [--tenants 20] [--pods 20000] [--parallel 16] [--apiserver-pid PID] [--etcd-pid PID]`

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use gryvia_types::GryviaTenant;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use gryvia_examples::load::number_arg;

/// Label on every pod the tool makes.
const LABEL: &str = "gryvia.io/pod-load";

/// Resident memory of process `pid` in MiB (0 when it cannot be read).
fn rss_mib(pid: usize) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

/// Creates the tenants and waits for their namespaces.
async fn tenants(client: &kube::Client, count: usize, gpus: usize) -> anyhow::Result<Vec<String>> {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    let mut namespaces = Vec::new();
    for i in 0..count {
        let name = format!("fleet-{i:03}");
        let tenant: GryviaTenant = serde_json::from_value(json!({
            "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
            "metadata": {"name": name},
            "spec": {"displayName": name, "quotas": {"concurrentGPUs": gpus}},
        }))?;
        match api.create(&PostParams::default(), &tenant).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("create tenant {name}")),
        }
        namespaces.push(format!("tenant-{name}"));
    }
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(300);
    for ns in &namespaces {
        while ns_api.get_opt(ns).await?.is_none() {
            if Instant::now() > deadline {
                bail!("namespace {ns} not made within 300 s: is the quota-operator running?");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(namespaces)
}

fn pod(namespace: &str, k: usize) -> anyhow::Result<Pod> {
    let resources = if k.is_multiple_of(2) {
        json!({"limits": {"nvidia.com/gpu": 1}, "requests": {"cpu": "100m", "memory": "64Mi"}})
    } else {
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}})
    };
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("load-{k:05}"), "namespace": namespace,
            "labels": {LABEL: "true"},
            "annotations": {"gryvia.io/testenv-duration": "24h"},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "worker", "image": "registry.local/fleet:1", "resources": resources}],
        },
    }))?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let tenant_count = number_arg("--tenants", 20)?.max(1);
    let pods = number_arg("--pods", 20_000)?;
    let parallel = number_arg("--parallel", 16)?.max(1);
    let apiserver = number_arg("--apiserver-pid", 0)?;
    let etcd = number_arg("--etcd-pid", 0)?;
    let client = gryvia_client::connect().await?;
    let namespaces = tenants(&client, tenant_count, pods / tenant_count + 1).await?;

    // Running pods, as a watch sees them.
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let seen = running.clone();
    let watch_client = client.clone();
    let watch = tokio::spawn(async move {
        let cfg = watcher::Config::default().labels(&format!("{LABEL}=true"));
        let mut s = watcher(Api::<Pod>::all(watch_client), cfg)
            .applied_objects()
            .boxed();
        while let Some(Ok(p)) = s.next().await {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                let key = format!(
                    "{}/{}",
                    p.metadata.namespace.unwrap_or_default(),
                    p.metadata.name.unwrap_or_default()
                );
                seen.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(key);
            }
        }
    });

    let started = Instant::now();
    let created = futures::stream::iter((0..pods).map(|k| {
        let client = client.clone();
        let ns = namespaces[k % namespaces.len()].clone();
        async move {
            let api: Api<Pod> = Api::namespaced(client, &ns);
            match api.create(&PostParams::default(), &pod(&ns, k)?).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(anyhow::Error::from(e).context(format!("create pod {k} in {ns}"))),
            }
        }
    }))
    .buffer_unordered(parallel)
    .collect::<Vec<anyhow::Result<()>>>()
    .await;
    created.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    println!(
        "created {pods} pods in {} namespaces in {:.1} s",
        namespaces.len(),
        started.elapsed().as_secs_f64()
    );
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let n = running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len();
        if n >= pods {
            break;
        }
        if Instant::now() > deadline {
            bail!("{n} of {pods} pods running after 900 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    watch.abort();
    println!(
        "all {pods} pods running {:.1} s after the first creation",
        started.elapsed().as_secs_f64()
    );
    if apiserver > 0 {
        println!("kube-apiserver RSS {} MiB", rss_mib(apiserver));
    }
    if etcd > 0 {
        println!("etcd RSS {} MiB", rss_mib(etcd));
    }
    Ok(())
}
