//! Open-loop load on one gateway route: `--rate` requests per second for `--seconds`, each
//! sent at its scheduled time whether or not earlier ones have answered (so a slow answer
//! cannot hide the queueing it causes: latency counts from the scheduled send time), over a
//! pool of keep-alive connections. Prints the achieved rate, errors, and latency percentiles.
//! benches/gateway/run drives it; benches/README.md quotes its figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Mutex;

/// Open-loop load on a gateway route.
#[derive(Parser, Debug)]
struct Args {
    /// The gateway's base URL.
    #[arg(long)]
    url: String,
    /// The path to GET.
    #[arg(long, default_value = "/api/v1/jobs?limit=50")]
    path: String,
    /// Requests per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// Seconds of load (after a 2 s warm-up at the same rate that is not counted).
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// The bearer token (an OIDC ID token or an API key).
    #[arg(long, env = "GRYVIA_TOKEN")]
    token: String,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(256)
        .build_http();
    let uri: http::Uri = format!("{}{}", args.url.trim_end_matches('/'), args.path)
        .parse()
        .context("--url and --path make no URL")?;
    let auth = format!("Bearer {}", args.token);
    let results = Arc::new(Mutex::new((Vec::new(), 0u64, 0u64)));
    let period = Duration::from_secs_f64(1.0 / f64::from(args.rate));
    let warmup = u64::from(args.rate) * 2;
    let total = warmup + u64::from(args.rate) * args.seconds;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for i in 0..total {
        let due = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        let (client, uri, auth, results) = (
            client.clone(),
            uri.clone(),
            auth.clone(),
            Arc::clone(&results),
        );
        tasks.push(tokio::spawn(async move {
            let Ok(req) = http::Request::get(uri)
                .header("authorization", auth)
                .body(Empty::new())
            else {
                return;
            };
            let ok = match client.request(req).await {
                Ok(resp) => {
                    let status = resp.status();
                    resp.into_body().collect().await.is_ok() && status.is_success()
                }
                Err(_) => false,
            };
            let took = due.elapsed();
            if i >= warmup {
                let mut r = results.lock().await;
                r.0.push(took);
                if ok { r.1 += 1 } else { r.2 += 1 }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let elapsed = start.elapsed().as_secs_f64() - 2.0;
    let (mut lat, ok, failed) = Arc::try_unwrap(results)
        .map_err(|_| anyhow::anyhow!("results still shared"))?
        .into_inner();
    lat.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "rate {} req/s for {} s ({:.0} req/s achieved): {} ok, {} failed; latency p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        args.rate,
        args.seconds,
        (ok + failed) as f64 / elapsed,
        ok,
        failed,
        ms(percentile(&lat, 50.0)),
        ms(percentile(&lat, 90.0)),
        ms(percentile(&lat, 99.0)),
        ms(lat.last().copied().unwrap_or_default()),
    );
    Ok(())
}
