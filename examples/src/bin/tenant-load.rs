//! Measures the quota-operator: creates N tenants and reports create-to-Ready latency
//! (p50/p99) and, with `--operator-pid`, the operator's resident memory once all are Ready.
//! Deletes what it created unless `--keep`.
//!
//! `tenant-load --count 200 [--interval-ms 100] --operator-pid $(pgrep -f gryvia-quota-operator)`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use gryvia_types::GryviaTenant;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let count: usize = arg("--count").unwrap_or_else(|| "200".into()).parse()?;
    let pid: Option<u32> = arg("--operator-pid").map(|p| p.parse()).transpose()?;
    let keep = args.iter().any(|a| a == "--keep");
    let prefix = arg("--prefix").unwrap_or_else(|| "load".into());
    // Pause between creates (0: as fast as the API server takes them, a burst).
    let interval =
        Duration::from_millis(arg("--interval-ms").unwrap_or_else(|| "0".into()).parse()?);
    tokio::runtime::Runtime::new()?.block_on(async move {
        let client = gryvia_client::connect().await?;
        let api: Api<GryviaTenant> = Api::all(client.clone());
        let api_w = api.clone();
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i:04}")).collect();
        let mut created: HashMap<String, Instant> = HashMap::new();
        // Ready times are taken when the watch delivers them, concurrently with the creates.
        let ready_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let seen = ready_at.clone();
        let prefix_dash = format!("{prefix}-");
        let watch = tokio::spawn(async move {
            let mut stream = Box::pin(watcher(api_w, watcher::Config::default()).applied_objects());
            while let Some(Ok(t)) = stream.next().await {
                let name = t.metadata.name.clone().unwrap_or_default();
                let is_ready = t.status.as_ref().is_some_and(|s| gryvia_types::conditions::is_true(&s.conditions, "Ready"));
                if is_ready && name.starts_with(&prefix_dash) {
                    seen.lock().map(|mut m| { m.entry(name).or_insert_with(Instant::now); }).ok();
                }
            }
        });
        if let Some(pid) = pid {
            println!("operator RSS before: {} MiB", rss_kib(pid)? / 1024);
        }
        let started = Instant::now();
        for n in &names {
            let t: GryviaTenant = serde_json::from_value(serde_json::json!({
                "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
                "metadata": { "name": n }, "spec": { "displayName": n, "quotas": { "concurrentGPUs": 4 } }
            }))?;
            created.insert(n.clone(), Instant::now());
            api.create(&PostParams::default(), &t).await.with_context(|| format!("create {n}"))?;
            if !interval.is_zero() {
                tokio::time::sleep(interval).await;
            }
        }
        println!("created {count} tenants in {:.1}s", started.elapsed().as_secs_f64());
        let deadline = Instant::now() + Duration::from_secs(600);
        while ready_at.lock().map(|m| m.len()).unwrap_or(0) < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        watch.abort();
        let ready: HashMap<String, Duration> = ready_at
            .lock()
            .map(|m| m.iter().filter_map(|(n, at)| created.get(n).map(|c| (n.clone(), at.saturating_duration_since(*c)))).collect())
            .unwrap_or_default();
        let mut lat: Vec<f64> = ready.values().map(Duration::as_secs_f64).collect();
        lat.sort_by(f64::total_cmp);
        let pct = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
        println!(
            "ready: {}/{count}; create-to-Ready p50 {:.3}s p99 {:.3}s max {:.3}s; all ready {:.1}s after the first create",
            lat.len(), pct(0.50), pct(0.99), lat.last().copied().unwrap_or(f64::NAN), started.elapsed().as_secs_f64()
        );
        if let Some(pid) = pid {
            tokio::time::sleep(Duration::from_secs(5)).await;
            println!("operator RSS with {} tenants: {} MiB", count, rss_kib(pid)? / 1024);
        }
        if !keep {
            for n in &names {
                let _ = api.delete(n, &DeleteParams::default()).await;
            }
            println!("deleted the {count} tenants (their empty namespaces are deleted by the operator)");
        }
        anyhow::Ok(())
    })
}
