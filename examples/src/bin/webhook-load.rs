//! `webhook-load`: latency of the ai-operator's validating admission webhook under a fixed
//! request rate, over TLS on loopback.
//!
//! Against a running control plane (`testenv/up`; KUBECONFIG), it starts the webhook server
//! the ai-operator runs (`gryvia_client::admission`: the same watch caches, router and rustls
//! server, with a fresh self-signed CA) on a runtime of its own, waits for the caches, then
//! sends `AdmissionReview`s for a GPU job of a tenant with SKU limits (so every review looks up
//! the namespace, the tenant, the SKUs, the ResourceQuota) at each rate for `--seconds`, from a
//! second runtime over keep-alive HTTPS connections. The schedule is open-loop: a request's
//! latency runs from when it was due, so a stalled server cannot hide its queue. It prints,
//! per rate, the requests sent, failed (transport errors, non-200, or no `allowed` in the
//! answer), and the latency p50, p90, p99 and max. It cleans up the objects it made.
//!
//! `webhook-load [--rates 500,1000] [--seconds 10] [--connections 32] [--server-threads 1]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use gryvia_client::admission::{Caches, Hook, TlsMaterial, WebhookState, router, serve_tls};
use gryvia_client::metrics::Metrics;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

async fn setup(client: &kube::Client, ns: &str, tenant: &str) -> anyhow::Result<()> {
    let create = |v: serde_json::Value| async move {
        let obj: kube::api::DynamicObject = serde_json::from_value(v.clone())?;
        let gvk = kube::api::GroupVersionKind::try_from(obj.types.as_ref().context("types")?)?;
        let (ar, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<kube::api::DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced
        {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(anyhow::Error::from(e)),
        }
    };
    create(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": ns, "labels": {"gryvia.io/tenant": tenant}}}))
    .await?;
    create(
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuSku",
        "metadata": {"name": "webhook-load-h100"},
        "spec": {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "pricePerGpuHour": "4.00"}}),
    )
    .await?;
    create(
        json!({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
        "metadata": {"name": tenant},
        "spec": {"displayName": "webhook load", "allowedSkus": ["webhook-load-h100"],
                 "quotas": {"gpusPerType": {"NVIDIA-H100-80GB-HBM3": 1000}}}}),
    )
    .await?;
    create(json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "namespace": ns},
        "spec": {"hard": {"requests.nvidia.com/gpu": "1000"}}}))
    .await?;
    Ok(())
}

async fn cleanup(client: &kube::Client, ns: &str, tenant: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(ns, &dp)
        .await;
    let _ = Api::<gryvia_types::GryviaTenant>::all(client.clone())
        .delete(tenant, &dp)
        .await;
    let _ = Api::<gryvia_types::GryviaGpuSku>::all(client.clone())
        .delete("webhook-load-h100", &dp)
        .await;
}

/// The HTTPS client of the load: rustls trusting the fresh CA, keep-alive connections.
type Https = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

fn https_client(tls: &TlsMaterial, connections: usize) -> anyhow::Result<Https> {
    let mut roots = rustls::RootCertStore::empty();
    {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        for c in CertificateDer::pem_slice_iter(tls.ca_pem.as_bytes()) {
            roots.add(c?)?;
        }
    }
    let tls_client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_client)
        .https_only()
        .enable_http1()
        .build();
    Ok(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(connections)
            .build::<_, Full<Bytes>>(connector),
    )
}

/// Sends `rate` reviews a second for `seconds` on an open-loop schedule (after warming
/// `connections` connections): for each, whether it was answered and its latency from when
/// it was due.
async fn run_rate(
    http: &Https,
    url: &hyper::Uri,
    body: &Bytes,
    rate: u64,
    seconds: u64,
    connections: usize,
) -> anyhow::Result<Vec<(bool, Duration)>> {
    let total = rate * seconds;

    // Warm the connection pool.
    let mut warm = Vec::new();
    for _ in 0..connections {
        let req = hyper::Request::post(url.clone())
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))?;
        warm.push(http.request(req));
    }
    for w in futures::future::join_all(warm).await {
        let _ = w?.into_body().collect().await;
    }
    let start = tokio::time::Instant::now();
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let req = hyper::Request::post(url.clone())
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))?;
        let fut = http.request(req);
        tasks.push(tokio::spawn(async move {
            let ok = match fut.await {
                Ok(resp) if resp.status() == 200 => match resp.into_body().collect().await {
                    Ok(b) => serde_json::from_slice::<serde_json::Value>(&b.to_bytes())
                        .is_ok_and(|v| v["response"]["allowed"].is_boolean()),
                    Err(_) => false,
                },
                _ => false,
            };
            (ok, due.elapsed())
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await?);
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let rates: Vec<u64> = arg("--rates", "500,1000")
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .context("--rates: numbers separated by commas")
        })
        .collect::<anyhow::Result<_>>()?;
    let seconds: u64 = arg("--seconds", "10").parse().context("--seconds")?;
    let connections: usize = arg("--connections", "32")
        .parse()
        .context("--connections")?;
    let server_threads: usize = arg("--server-threads", "1")
        .parse()
        .context("--server-threads")?;
    // Names of this run's own: a namespace of an earlier run may still be terminating.
    let run_name = format!("webhook-load-{}", std::process::id());
    let ns = run_name.as_str();
    let tenant = run_name.as_str();

    // The server: the ai-operator's webhook code on a runtime of its own.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads)
        .enable_all()
        .build()?;
    let tls = TlsMaterial::self_signed(&["127.0.0.1".to_owned()])?;
    let addr = {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let a = std_listener.local_addr()?;
        drop(std_listener);
        a
    };
    let server_config = tls.server_config()?;
    let (client, caches) = server_rt.block_on(async {
        let client = gryvia_client::connect().await?;
        setup(&client, ns, tenant).await?;
        let caches = Caches::start(&client);
        caches.wait_ready(Duration::from_secs(60)).await?;
        // Let the watch events of the objects just made arrive.
        tokio::time::sleep(Duration::from_secs(2)).await;
        anyhow::Ok((client, caches))
    })?;
    let state = WebhookState {
        caches,
        fail_closed: true,
        admission_gate: true,
        metrics: Metrics::new(),
    };
    server_rt.spawn(serve_tls(addr, server_config, router(state.clone())));
    let listening = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        if listening.elapsed() > Duration::from_secs(10) {
            bail!("the webhook server did not listen on {addr} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "gryvia.io", "version": "v1alpha1", "kind": "GryviaAIJob"},
            "resource": {"group": "gryvia.io", "version": "v1alpha1", "resource": "gryviaaijobs"},
            "namespace": ns, "operation": "CREATE",
            "object": {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                       "metadata": {"name": "load", "namespace": ns},
                       "spec": {"image": "registry.local/train:1", "gpus": 8, "replicas": 2,
                                "gpuType": "NVIDIA-H100-80GB-HBM3", "framework": "pytorch"}}
        }
    });
    // The facts must be complete, or the numbers would measure the fail-open shortcut.
    let check = gryvia_client::admission::review(&state, Hook::Validate, &review);
    if check["response"]["allowed"] != true {
        bail!("the probe review was not admitted: {}", check["response"]);
    }
    let body = Bytes::from(serde_json::to_vec(&review)?);

    // The client: rustls trusting the fresh CA, keep-alive connections, on its own runtime.
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let http = https_client(&tls, connections)?;
    let url: hyper::Uri = format!("https://{addr}/validate-aijob").parse()?;

    println!(
        "webhook-load: validating webhook over TLS on {addr}; {seconds} s per rate; open-loop; server threads {server_threads}, client threads 1"
    );
    println!("rate/s   sent    failed   p50        p90        p99        max");
    for rate in rates {
        let results =
            client_rt.block_on(run_rate(&http, &url, &body, rate, seconds, connections))?;
        let failed = results.iter().filter(|(ok, _)| !ok).count();
        let mut lat: Vec<Duration> = results.iter().map(|(_, d)| *d).collect();
        lat.sort();
        let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
        println!(
            "{rate:<8} {:<7} {failed:<8} {:<10} {:<10} {:<10} {}",
            results.len(),
            ms(percentile(&lat, 50.0)),
            ms(percentile(&lat, 90.0)),
            ms(percentile(&lat, 99.0)),
            ms(*lat.last().unwrap_or(&Duration::ZERO)),
        );
    }
    server_rt.block_on(cleanup(&client, ns, tenant));
    Ok(())
}
