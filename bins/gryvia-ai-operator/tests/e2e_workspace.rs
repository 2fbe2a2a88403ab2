//! End-to-end: a GPU notebook (GryviaWorkspace) against the real API server, a KWOK pod and a
//! real Jupyter server (PyPI `jupyter_server`, installed by `scripts/setup`) listening on the
//! KWOK pod's IP, which the test puts on the loopback interface (root), so the operator
//! reads the server's own `/api/status` through the API server's pod proxy. The notebook
//! waits for room in its namespace's GPU quota, is culled after its idle timeout with its
//! claim kept, started again with the CLI, and stopped. Skipped without a control plane unless
//! `GRYVIA_E2E=1`.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

#[allow(dead_code, reason = "each test file uses part of the shared harness")]
mod common;

use std::time::Duration;

use gryvia_reconcile::workspace::{CULLED_ANNOTATION, TOKEN_KEY};
use gryvia_testsupport::{ClusterObject, Process, TestNamespace, wait_for};
use gryvia_types::{GryviaUsageRecord, GryviaWorkspace};
use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, Pod, ResourceQuota, Secret,
};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The address `ip` on the loopback interface (this kernel has no dummy interfaces), removed
/// on drop: the machine answers on it, and it is not a loopback address to the API server.
struct LocalAddress(String);

impl LocalAddress {
    fn add(ip: &str) -> Self {
        let cidr = format!("{ip}/32");
        let added = std::process::Command::new("ip")
            .args(["addr", "replace", &cidr, "dev", "lo"])
            .output()
            .unwrap();
        assert!(
            added.status.success(),
            "ip addr replace {cidr} dev lo (needs root): {}",
            String::from_utf8_lossy(&added.stderr)
        );
        LocalAddress(cidr)
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", &self.0, "dev", "lo"])
            .output();
    }
}

/// A real Jupyter server on `ip:8888` with `token`, serving `root`.
fn start_jupyter(ip: &str, token: &str, root: &std::path::Path) -> Process {
    let args = [
        "-m".to_owned(),
        "jupyter_server".to_owned(),
        format!("--ServerApp.ip={ip}"),
        "--ServerApp.port=8888".to_owned(),
        "--ServerApp.port_retries=0".to_owned(),
        "--ServerApp.open_browser=False".to_owned(),
        "--ServerApp.allow_root=True".to_owned(),
        format!("--ServerApp.root_dir={}", root.display()),
        format!("--IdentityProvider.token={token}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Process::start("python3", &args, None, "jupyter-workspace").unwrap()
}

/// GET `http://ip:8888{path}`: the status code.
async fn jupyter_get(ip: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let (ip, path) = (ip.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect((ip.as_str(), 8888)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {ip}:8888\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.split_whitespace().nth(1)?.parse().ok()
    })
    .await
    .ok()
    .flatten()
}

async fn running_pod(pods: &Api<Pod>, not_uid: Option<&str>) -> Pod {
    wait_for(
        "the workspace pod running with an IP",
        Duration::from_secs(90),
        || async move {
            let p = pods.get_opt("nb").await.ok()??;
            let st = p.status.as_ref()?;
            let fresh = not_uid.is_none_or(|u| p.uid().as_deref() != Some(u));
            (fresh
                && st.phase.as_deref() == Some("Running")
                && st.pod_ip.is_some()
                && p.metadata.deletion_timestamp.is_none())
            .then_some(p)
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn a_notebook_waits_for_quota_is_culled_when_idle_keeping_its_storage_then_started_and_stopped()
 {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let lease_ns = TestNamespace::create(&client, "aiop").await.unwrap();
    let ns = TestNamespace::create(&client, "ws").await.unwrap();
    let class = gryvia_testsupport::unique("gryvia-e2e-manual");
    let pv_dir = std::env::temp_dir().join(&class);
    std::fs::create_dir_all(&pv_dir).unwrap();
    let _pv = ClusterObject::create::<PersistentVolume>(
        &client,
        json!({"metadata": {"name": class}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": pv_dir.display().to_string()}}}),
    )
    .await
    .unwrap();
    let access = common::operator_access(&client, &lease_ns.name).await;
    let (_operator, _) = Process::operator(
        env!("CARGO_BIN_EXE_gryvia-ai-operator"),
        &lease_ns.name,
        &["--workspace-poll-seconds", "3"],
        Some(&access.kubeconfig),
        "ai-operator-workspace",
    )
    .unwrap();

    let workspaces: Api<GryviaWorkspace> = Api::namespaced(client.clone(), &ns.name);
    let w: GryviaWorkspace = serde_json::from_value(json!({
        "metadata": {"name": "nb", "namespace": ns.name},
        "spec": {"type": "jupyter", "owner": "alice@example.com", "gpus": 1,
                 "storage": {"size": "1Gi", "storageClassName": class},
                 "idleTimeoutMinutes": 1}
    }))
    .unwrap();
    // The namespace's GPU quota has no room yet: the workspace waits and says so.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns.name);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    wait_for("the quota counted", Duration::from_secs(30), || {
        let quotas = quotas.clone();
        async move { quotas.get("gpus").await.ok()?.status?.hard.map(|_| ()) }
    })
    .await
    .unwrap();
    workspaces.create(&PostParams::default(), &w).await.unwrap();
    let waiting = wait_for("waiting for quota", Duration::from_secs(30), || {
        let workspaces = workspaces.clone();
        async move {
            let st = workspaces.get("nb").await.ok()?.status?;
            let c = gryvia_types::conditions::find(&st.conditions, "Ready")?.clone();
            (c.reason == "QuotaExceeded").then_some(c.message)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        waiting,
        "needs 1 GPU(s); ResourceQuota gpus has 0 of 0 left: it starts when they are free"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    assert!(pods.get_opt("nb").await.unwrap().is_none());
    quotas
        .patch(
            "gpus",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"requests.nvidia.com/gpu": "1"}}})),
        )
        .await
        .unwrap();
    let pod = running_pod(&pods, None).await;
    let ip = pod.status.clone().unwrap().pod_ip.unwrap();
    let c = &pod.spec.clone().unwrap().containers[0];
    assert_eq!(
        c.resources.clone().unwrap().limits.unwrap()["nvidia.com/gpu"].0,
        "1"
    );
    let secret = Api::<Secret>::namespaced(client.clone(), &ns.name)
        .get("nb-token")
        .await
        .unwrap();
    let token = String::from_utf8(secret.data.unwrap()[TOKEN_KEY].0.clone()).unwrap();
    assert_eq!(token.len(), 32);
    gryvia_testsupport::record_secret("the notebook's access token", &token);

    // The real server where the pod's IP is.
    let _address = LocalAddress::add(&ip);
    let root = std::env::temp_dir().join(gryvia_testsupport::unique("gryvia-e2e-jupyter"));
    std::fs::create_dir_all(&root).unwrap();
    let _jupyter = start_jupyter(&ip, &token, &root);
    let status_path = format!("/api/status?token={token}");
    wait_for("Jupyter answering", Duration::from_secs(60), || {
        let (ip, path) = (ip.clone(), status_path.clone());
        async move { (jupyter_get(&ip, &path).await == Some(200)).then_some(()) }
    })
    .await
    .unwrap();
    let first = wait_for(
        "the activity read through the pod proxy",
        Duration::from_secs(60),
        || {
            let workspaces = workspaces.clone();
            async move {
                let st = workspaces.get("nb").await.ok()?.status?;
                let known = gryvia_types::conditions::find(&st.conditions, "ActivityKnown")?;
                (known.status == "True").then_some(st.last_activity?.0)
            }
        },
    )
    .await
    .unwrap();

    // A user's request 20 s later is activity: the idle time starts again from it.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        jupyter_get(&ip, &format!("/api/contents?token={token}")).await,
        Some(200)
    );
    let later = wait_for("the newer activity seen", Duration::from_secs(30), || {
        let workspaces = workspaces.clone();
        async move {
            let t = workspaces.get("nb").await.ok()?.status?.last_activity?.0;
            (t > first).then_some(t)
        }
    })
    .await
    .unwrap();
    assert!(
        later.duration_since(first).as_secs_f64() >= 15.0,
        "{first} -> {later}"
    );

    // Culled a minute after that: the pod goes, the claim stays, the usage record closes.
    let culled = wait_for("culled", Duration::from_secs(150), || {
        let workspaces = workspaces.clone();
        async move {
            let w = workspaces.get("nb").await.ok()?;
            let at = w
                .annotations()
                .get(CULLED_ANNOTATION)?
                .parse::<jiff::Timestamp>()
                .ok()?;
            Some((w, at))
        }
    })
    .await
    .unwrap();
    let (_, culled_at) = culled;
    let idle = culled_at.duration_since(later).as_secs_f64();
    assert!(
        (60.0..100.0).contains(&idle),
        "culled {idle:.0} s after the last activity"
    );
    let w = wait_for("the pod gone", Duration::from_secs(60), || {
        let (pods, workspaces) = (pods.clone(), workspaces.clone());
        async move {
            let gone = pods.get_opt("nb").await.ok()?.is_none();
            let w = workspaces.get("nb").await.ok()?;
            (gone && w.status.as_ref()?.phase.as_deref() == Some("Stopped")).then_some(w)
        }
    })
    .await
    .unwrap();
    let ready = gryvia_types::conditions::find(&w.status.unwrap().conditions, "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready.reason, "Culled");
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name)
        .get("nb-home")
        .await
        .unwrap();
    assert_eq!(pvc.status.unwrap().phase.as_deref(), Some("Bound"));
    let records: Api<GryviaUsageRecord> = Api::all(client.clone());
    let mine: Vec<GryviaUsageRecord> = records
        .list(&ListParams::default().labels(&format!(
            "gryvia.io/workspace=nb,gryvia.io/tenant={}",
            ns.name
        )))
        .await
        .unwrap()
        .items;
    assert_eq!(mine.len(), 1, "{mine:?}");
    let r = &mine[0];
    assert_eq!(
        (r.spec.workload.kind.as_str(), r.spec.gpu_count),
        ("GryviaWorkspace", 1)
    );
    let end = r.spec.end_time.clone().expect("closed when culled").0;
    assert!(end.duration_since(culled_at).as_secs_f64().abs() < 5.0);

    // Started again with the CLI: a new pod on the same claim; then stopped.
    let (ok, out, err) = common::gryvia(&["workspace", "start", "nb", "-n", &ns.name]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "nb: starting");
    let old_uid = pod.uid().unwrap();
    let again = running_pod(&pods, Some(&old_uid)).await;
    let vols = again.spec.unwrap().volumes.unwrap();
    assert_eq!(
        vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
        "nb-home"
    );
    let (ok, out, _) = common::gryvia(&["workspace", "list", "-n", &ns.name]);
    assert!(ok && out.contains("nb") && out.contains("jupyter"), "{out}");
    let (ok, out, _) = common::gryvia(&["workspace", "open", "nb", "-n", &ns.name]);
    assert!(ok, "{out}");
    assert!(
        out.starts_with(&format!(
            "kubectl port-forward -n {} pod/nb 8888:8888",
            ns.name
        )),
        "{out}"
    );
    assert!(out.contains(&format!("token={token}")), "{out}");
    let (ok, _, err) = common::gryvia(&["workspace", "stop", "nb", "-n", &ns.name]);
    assert!(ok, "{err}");
    wait_for("stopped", Duration::from_secs(60), || {
        let (pods, workspaces) = (pods.clone(), workspaces.clone());
        async move {
            let gone = pods.get_opt("nb").await.ok()?.is_none();
            let w = workspaces.get("nb").await.ok()?;
            let reason = gryvia_types::conditions::find(&w.status?.conditions, "Ready")?
                .reason
                .clone();
            (gone && reason == "Stopped").then_some(())
        }
    })
    .await
    .unwrap();
    assert!(
        Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns.name)
            .get_opt("nb-home")
            .await
            .unwrap()
            .is_some(),
        "stopping keeps the storage"
    );
    let (ok, _, err) = common::gryvia(&["workspace", "start", "nope", "-n", &ns.name]);
    assert!(
        !ok && err.trim().lines().count() == 1 && err.contains("nope"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
