//! The GryviaWorkspace controller of the ai-operator: notebook and code-server pods, their
//! storage, culling when idle and the metering of their GPUs (policy:
//! `gryvia_reconcile::workspace`). Reads the pod, the namespace and the catalogue from the
//! operator's caches, the token Secret from the API server, and the server's activity through
//! the API server's pod proxy (`pods/proxy`).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use gryvia_reconcile::workspace::{
    self, Activity, PodState, TOKEN_KEY, WORKSPACE_LABEL, WorkspaceReconciler, WorkspaceWorld,
};
use gryvia_types::{GryviaGpuSku, GryviaWorkspace, labels};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Secret};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;

use super::budget::catalogue;
use super::{Running, Shared, cached, changed, in_namespace};
use crate::Result;
use crate::cache::{NamespaceMeta, NodeMeta, wait_ready};
use crate::runtime::{Observe, run, spec_or_lifecycle};

/// Time allowed for the server to answer the activity request.
pub const ACTIVITY_TIMEOUT: Duration = Duration::from_secs(10);

/// Observes a workspace.
pub struct WorkspaceObserver {
    client: kube::Client,
    pods: Store<Pod>,
    namespaces: Store<NamespaceMeta>,
    nodes: Store<NodeMeta>,
    skus: Store<GryviaGpuSku>,
    quotas: Store<ResourceQuota>,
}

/// A pod as the policy sees it.
fn pod_state(p: &Pod) -> PodState {
    let status = p.status.clone().unwrap_or_default();
    PodState {
        uid: p.uid().unwrap_or_default(),
        phase: status.phase.unwrap_or_default(),
        start: status.start_time.map(|t| t.0),
        spec_hash: p.annotations().get(workspace::SPEC_HASH).cloned(),
        deleting: p.metadata.deletion_timestamp.is_some(),
        deleted_at: p.metadata.deletion_timestamp.as_ref().map(|t| t.0),
    }
}

/// 16 random bytes from the kernel, hex (a workspace's token).
fn random_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(crate::Error::Runtime)?;
    Ok(hex::encode(bytes))
}

impl WorkspaceObserver {
    /// The token in the workspace's Secret (`None` when the Secret does not exist yet).
    async fn token(&self, ns: &str, name: &str) -> Result<Option<String>> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), ns);
        let secret = secrets
            .get_opt(&workspace::token_secret(name))
            .await
            .map_err(crate::api_err(format!(
                "read Secret {ns}/{}",
                workspace::token_secret(name)
            )))?;
        Ok(secret.map(|s| {
            s.data
                .and_then(|d| {
                    d.get(TOKEN_KEY)
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                })
                .unwrap_or_default()
        }))
    }

    /// The server's last activity, through the API server's pod proxy.
    async fn activity(&self, ws: &GryviaWorkspace, token: &str) -> Activity {
        let ns = ws.namespace().unwrap_or_default();
        let t = ws.spec.type_;
        let uri = format!(
            "/api/v1/namespaces/{ns}/pods/{}:{}/proxy{}",
            ws.name_any(),
            workspace::port(t),
            workspace::activity_path(t, token)
        );
        let req = match http::Request::get(&uri).body(Vec::new()) {
            Ok(r) => r,
            Err(e) => return Activity::Unreadable(format!("build request: {e}")),
        };
        match tokio::time::timeout(ACTIVITY_TIMEOUT, self.client.request_text(req)).await {
            Err(_) => Activity::Unreadable(format!("no answer within {ACTIVITY_TIMEOUT:?}")),
            Ok(Err(e)) => Activity::Unreadable(format!("{}", e).replace(token, "<token>")),
            Ok(Ok(body)) => match workspace::parse_activity(t, &body) {
                Ok(at) => Activity::Seen(at),
                Err(e) => Activity::Unreadable(e.replace(token, "<token>")),
            },
        }
    }
}

#[async_trait::async_trait]
impl Observe for WorkspaceObserver {
    type Object = GryviaWorkspace;
    type World = WorkspaceWorld;

    async fn observe(&self, ws: &GryviaWorkspace) -> Result<WorkspaceWorld> {
        wait_ready(&self.pods, "Pod").await?;
        wait_ready(&self.namespaces, "Namespace").await?;
        wait_ready(&self.nodes, "Node").await?;
        wait_ready(&self.skus, "GryviaGpuSku").await?;
        wait_ready(&self.quotas, "ResourceQuota").await?;
        let ns = ws.namespace().unwrap_or_default();
        let name = ws.name_any();
        let uid = ws.uid().unwrap_or_default();
        let pod: Option<Arc<Pod>> = cached(&self.pods, Some(&ns), &name)
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid));
        let token = self.token(&ns, &name).await?;
        let state = pod.as_deref().map(pod_state);
        let running = state
            .as_ref()
            .is_some_and(|p| p.phase == "Running" && !p.deleting);
        let activity = match (&token, ws.spec.idle_timeout_minutes) {
            (Some(t), Some(_)) if running && workspace::wanted(ws) => self.activity(ws, t).await,
            _ => Activity::NotRead,
        };
        let node_product = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.clone())
            .and_then(|n| cached(&self.nodes, None, &n))
            .and_then(|n| gryvia_reconcile::facts::gpu_product_of(&n.metadata).map(str::to_owned));
        Ok(WorkspaceWorld {
            pod: state,
            token_exists: token.is_some(),
            new_token: if token.is_some() {
                String::new()
            } else {
                random_token()?
            },
            activity,
            tenant: cached(&self.namespaces, None, &ns)
                .and_then(|n| n.labels().get(labels::TENANT).cloned()),
            node_product,
            skus: catalogue(&self.skus),
            quota: gryvia_reconcile::admission::GpuQuota::tightest(
                in_namespace(&self.quotas, Some(&ns))
                    .iter()
                    .map(AsRef::as_ref),
            ),
        })
    }
}

/// The workspace controller: a workspace is reconciled when its spec or annotations change,
/// when its pod does, and every `poll` while it runs with an idle timeout.
pub fn controller(shared: &Shared, poll: Duration) -> Running {
    let caches = &shared.caches;
    let trigger = changed(caches.subscribe::<GryviaWorkspace>(), spec_or_annotations);
    let ctrl = Controller::for_shared_stream(trigger, caches.store())
        .owns_shared_stream(caches.subscribe_labelled::<Pod>(WORKSPACE_LABEL));
    let observer = WorkspaceObserver {
        client: caches.client().clone(),
        pods: caches.store_labelled(WORKSPACE_LABEL),
        namespaces: caches.store(),
        nodes: caches.store(),
        skus: caches.store(),
        quotas: caches.store(),
    };
    Box::pin(run(
        ctrl,
        shared.context(WorkspaceReconciler { poll }, observer),
    ))
}

/// A workspace's spec and lifecycle, and its culled annotation (`gryvia workspace start`
/// removes it, which changes no generation).
fn spec_or_annotations(ws: &GryviaWorkspace) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    spec_or_lifecycle(ws).hash(&mut h);
    ws.annotations()
        .get(workspace::CULLED_ANNOTATION)
        .hash(&mut h);
    Some(h.finish())
}
