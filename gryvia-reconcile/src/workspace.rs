//! Workspaces, as pure functions: a GryviaWorkspace is a JupyterLab or code-server pod with
//! its GPUs, a Service, a token Secret and an optional home volume; an idle one is culled.
//!
//! - **Children.** Pod `<name>` (while it should run), Service `<name>`, Secret
//!   `<name>-token` (made once with a random token: Jupyter's `JUPYTER_TOKEN`, code-server's
//!   `PASSWORD`), PersistentVolumeClaim `<name>-home` with `spec.storage`, mounted at the
//!   image's home. All are owned by the workspace (deleted with it); stopping or culling
//!   deletes the pod alone, never the claim.
//! - **Runs** when `spec.stopped` is false and the workspace carries no
//!   [`CULLED_ANNOTATION`]. A pod whose spec no longer matches the workspace (image, GPUs,
//!   storage; [`SPEC_HASH`]) or that ended is deleted and made again.
//! - **Culling** (`idleTimeoutMinutes`): the last activity is what the server itself reports,
//!   read through the API server's pod proxy: Jupyter's `/api/status` `last_activity` (the
//!   latest of its API requests by a user, kernel messages and terminal input; polling
//!   `/api/status` is not activity) and code-server's `/healthz` `lastHeartbeat` (written
//!   while a browser is connected). Idle time counts from the later of that and the pod's
//!   start. A running workspace idle for the timeout is culled: the annotation is set (by the
//!   controller, with server-side apply), the pod deleted, an Event says how long it was
//!   idle. Nothing is culled while the activity cannot be read (condition
//!   `ActivityKnown=False` says why). `gryvia workspace start` removes the annotation.
//! - **Metering.** A pod with GPUs that has started gets an open GryviaUsageRecord (kind
//!   GryviaWorkspace, from the pod's start), closed when the pod is deleted or found gone;
//!   it is priced and counted like a job's (budgets, invoices, the gate). The GPUs count
//!   against the namespace's ResourceQuota as any pod's do: a workspace whose GPUs do not fit
//!   what is left is not started (`Ready=False, QuotaExceeded` with the numbers) until they do.

use std::collections::BTreeMap;
use std::time::Duration;

use gryvia_types::conditions;
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use gryvia_types::{
    GryviaUsageRecord, GryviaUsageRecordSpec, GryviaWorkspace, GryviaWorkspaceStatus, WorkloadRef,
    WorkspaceType, labels,
};
use serde_json::{Value, json};

use crate::admission::GpuQuota;
use crate::metering::{Sku, sku_of_workload};
use crate::{Child, EventType, ObjectRef, Plan, Reconcile, Timestamp};

/// Label of a workspace's children: its name.
pub const WORKSPACE_LABEL: &str = "gryvia.io/workspace";
/// Annotation of a culled workspace: when it was culled (RFC 3339).
pub const CULLED_ANNOTATION: &str = "gryvia.io/culled-at";
/// Annotation of a workspace's pod: the hash of the spec it was made from.
pub const SPEC_HASH: &str = "gryvia.io/spec-hash";
/// Annotation of a workspace's pod: the user it belongs to.
pub const OWNER_ANNOTATION: &str = "gryvia.io/owner";
/// Key of the token in the workspace's Secret.
pub const TOKEN_KEY: &str = "token";
/// Condition: the server's activity could be read at the last look.
pub const ACTIVITY_KNOWN: &str = "ActivityKnown";
/// How often a running workspace with an idle timeout is looked at, unless the operator says.
pub const DEFAULT_POLL: Duration = Duration::from_secs(60);

/// The port the server listens on.
pub fn port(t: WorkspaceType) -> i32 {
    match t {
        WorkspaceType::Jupyter => 8888,
        WorkspaceType::Vscode => 8080,
    }
}

/// The image used when the spec names none.
pub fn default_image(t: WorkspaceType) -> &'static str {
    match t {
        WorkspaceType::Jupyter => "quay.io/jupyter/minimal-notebook:latest",
        WorkspaceType::Vscode => "docker.io/codercom/code-server:latest",
    }
}

/// Where the home volume is mounted.
pub fn home(t: WorkspaceType) -> &'static str {
    match t {
        WorkspaceType::Jupyter => "/home/jovyan",
        WorkspaceType::Vscode => "/home/coder",
    }
}

/// The token Secret's name.
pub fn token_secret(workspace: &str) -> String {
    format!("{workspace}-token")
}

/// The home claim's name.
pub fn home_claim(workspace: &str) -> String {
    format!("{workspace}-home")
}

/// The path, behind the pod proxy, where the server reports its activity (`token` for
/// Jupyter's authenticated API).
pub fn activity_path(t: WorkspaceType, token: &str) -> String {
    match t {
        WorkspaceType::Jupyter => format!("/api/status?token={token}"),
        WorkspaceType::Vscode => "/healthz".to_owned(),
    }
}

/// The last activity in a server's answer to [`activity_path`].
///
/// # Errors
/// The answer has no activity in the expected form (the message says what was there).
pub fn parse_activity(t: WorkspaceType, body: &str) -> Result<Timestamp, String> {
    let v: Value = serde_json::from_str(body)
        .map_err(|_| format!("not JSON: {}", &body[..body.len().min(120)]))?;
    match t {
        WorkspaceType::Jupyter => {
            let s = v["last_activity"]
                .as_str()
                .ok_or_else(|| format!("no last_activity in {v}"))?;
            s.parse::<Timestamp>()
                .map_err(|e| format!("last_activity {s:?}: {e}"))
        }
        WorkspaceType::Vscode => {
            let ms = v["lastHeartbeat"]
                .as_i64()
                .ok_or_else(|| format!("no lastHeartbeat in {v}"))?;
            Timestamp::from_millisecond(ms).map_err(|e| format!("lastHeartbeat {ms}: {e}"))
        }
    }
}

/// The workspace's pod as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    /// UID.
    pub uid: String,
    /// `Pending`, `Running`, `Succeeded`, `Failed`.
    pub phase: String,
    /// When it started running.
    pub start: Option<Timestamp>,
    /// Its [`SPEC_HASH`].
    pub spec_hash: Option<String>,
    /// Whether it is being deleted.
    pub deleting: bool,
    /// When its deletion was asked for.
    pub deleted_at: Option<Timestamp>,
}

/// What the server said about its activity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Not asked (no pod running, no idle timeout).
    NotRead,
    /// Asked, and the answer could not be had or read.
    Unreadable(String),
    /// The last activity.
    Seen(Timestamp),
}

/// What a workspace's reconcile needs to know.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkspaceWorld {
    /// The pod.
    pub pod: Option<PodState>,
    /// Whether the token Secret exists.
    pub token_exists: bool,
    /// A fresh random token for a workspace whose Secret does not exist yet.
    pub new_token: String,
    /// The server's activity.
    pub activity: Activity,
    /// The namespace's tenant (`gryvia.io/tenant`).
    pub tenant: Option<String>,
    /// The GPU product of the pod's node.
    pub node_product: Option<String>,
    /// The SKU catalogue.
    pub skus: Vec<Sku>,
    /// The namespace's tightest GPU quota.
    pub quota: Option<GpuQuota>,
}

impl Default for WorkspaceWorld {
    fn default() -> Self {
        WorkspaceWorld {
            pod: None,
            token_exists: true,
            new_token: String::new(),
            activity: Activity::NotRead,
            tenant: None,
            node_product: None,
            skus: Vec::new(),
            quota: None,
        }
    }
}

fn meta_of(ws: &GryviaWorkspace) -> (String, String) {
    (
        ws.metadata.name.clone().unwrap_or_default(),
        ws.metadata.namespace.clone().unwrap_or_default(),
    )
}

/// Whether the workspace was culled (and not started again since).
pub fn culled(ws: &GryviaWorkspace) -> bool {
    ws.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CULLED_ANNOTATION))
}

/// Whether the workspace's pod should run.
pub fn wanted(ws: &GryviaWorkspace) -> bool {
    !ws.spec.stopped && !culled(ws)
}

/// The hash of what the pod is made from (a change makes a new pod).
pub fn spec_hash(ws: &GryviaWorkspace) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let s = &ws.spec;
    format!("{:?}", s.type_).hash(&mut h);
    s.image.hash(&mut h);
    s.gpus.hash(&mut h);
    s.gpu_type.hash(&mut h);
    s.storage.is_some().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The workspace's pod.
pub fn pod(ws: &GryviaWorkspace) -> Value {
    let (name, ns) = meta_of(ws);
    let t = ws.spec.type_;
    let image = ws
        .spec
        .image
        .clone()
        .unwrap_or_else(|| default_image(t).to_owned());
    let secret_env = |var: &str| json!({"name": var, "valueFrom": {"secretKeyRef": {"name": token_secret(&name), "key": TOKEN_KEY}}});
    let (command, args, env): (Vec<String>, Vec<String>, Vec<Value>) = match t {
        WorkspaceType::Jupyter => (
            vec!["jupyter".into(), "lab".into()],
            vec![
                "--ip=0.0.0.0".into(),
                format!("--port={}", port(t)),
                "--no-browser".into(),
                format!("--ServerApp.root_dir={}", home(t)),
            ],
            vec![secret_env("JUPYTER_TOKEN")],
        ),
        WorkspaceType::Vscode => (
            Vec::new(),
            vec![
                "--bind-addr".into(),
                format!("0.0.0.0:{}", port(t)),
                "--auth".into(),
                "password".into(),
                home(t).into(),
            ],
            vec![secret_env("PASSWORD")],
        ),
    };
    let mut container = json!({
        "name": "server",
        "image": image,
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": port(t)}],
        "readinessProbe": {"tcpSocket": {"port": port(t)}, "periodSeconds": 10},
    });
    if !command.is_empty() {
        container["command"] = json!(command);
    }
    let mut pod_spec = json!({"restartPolicy": "Always", "enableServiceLinks": false});
    if ws.spec.gpus > 0 {
        container["resources"] =
            json!({"limits": {labels::NVIDIA_GPU_RESOURCE: ws.spec.gpus.to_string()}});
        pod_spec["tolerations"] = json!([{"key": labels::NVIDIA_GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]);
    }
    if let Some(product) = &ws.spec.gpu_type {
        pod_spec["nodeSelector"] = json!({labels::NVIDIA_GPU_PRODUCT: product});
    }
    if ws.spec.storage.is_some() {
        container["volumeMounts"] = json!([{"name": "home", "mountPath": home(t)}]);
        pod_spec["volumes"] =
            json!([{"name": "home", "persistentVolumeClaim": {"claimName": home_claim(&name)}}]);
    }
    pod_spec["containers"] = json!([container]);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns,
            "labels": {WORKSPACE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE},
            "annotations": {SPEC_HASH: spec_hash(ws), OWNER_ANNOTATION: ws.spec.owner}},
        "spec": pod_spec,
    })
}

fn service(ws: &GryviaWorkspace) -> Value {
    let (name, ns) = meta_of(ws);
    let p = port(ws.spec.type_);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns,
            "labels": {WORKSPACE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
        "spec": {"selector": {WORKSPACE_LABEL: name}, "ports": [{"name": "http", "port": p, "targetPort": "http"}]},
    })
}

fn claim(ws: &GryviaWorkspace) -> Option<Value> {
    let storage = ws.spec.storage.as_ref()?;
    let (name, ns) = meta_of(ws);
    let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage.size}}});
    if let Some(class) = &storage.storage_class_name {
        spec["storageClassName"] = class.clone().into();
    }
    Some(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": home_claim(&name), "namespace": ns,
            "labels": {WORKSPACE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
        "spec": spec,
    }))
}

/// The usage record of the pod `pod` of `ws`, ending at `end` (open when `None`); `None`
/// without GPUs or before the pod started.
pub fn usage_record(
    ws: &GryviaWorkspace,
    pod: &PodState,
    world: &WorkspaceWorld,
    end: Option<Timestamp>,
) -> Option<GryviaUsageRecord> {
    let start = pod.start?;
    if ws.spec.gpus <= 0 {
        return None;
    }
    let (name, ns) = meta_of(ws);
    let tenant = world.tenant.clone().unwrap_or_else(|| ns.clone());
    let sku = sku_of_workload(
        ws.spec.gpu_type.as_deref(),
        world.node_product.as_deref(),
        &world.skus,
    );
    let short: String = pod.uid.chars().filter(|c| *c != '-').take(8).collect();
    Some(GryviaUsageRecord {
        metadata: ObjectMeta {
            name: Some(format!("ws-{name}-{short}")),
            labels: Some(BTreeMap::from([
                (labels::TENANT.to_owned(), tenant.clone()),
                (WORKSPACE_LABEL.to_owned(), name.clone()),
            ])),
            ..ObjectMeta::default()
        },
        spec: GryviaUsageRecordSpec {
            tenant,
            namespace: ns,
            workload: WorkloadRef {
                kind: "GryviaWorkspace".to_owned(),
                name,
                uid: ws.metadata.uid.clone(),
            },
            sku,
            gpu_count: ws.spec.gpus,
            start_time: Time(start),
            end_time: end.map(|e| Time(e.max(start))),
            discount_percent: None,
            network: None,
            template: None,
        },
        status: None,
    })
}

/// The workspace reconciler.
#[derive(Clone, Debug)]
pub struct WorkspaceReconciler {
    /// How often a running workspace with an idle timeout is looked at.
    pub poll: Duration,
}

impl Default for WorkspaceReconciler {
    fn default() -> Self {
        WorkspaceReconciler { poll: DEFAULT_POLL }
    }
}

/// What the culling look decided.
struct Idle {
    /// The last activity known (the status's, or newer from the server).
    last: Option<Timestamp>,
    /// Cull now, with the Event's message.
    cull: Option<String>,
    /// The `ActivityKnown` condition, when the activity was asked for.
    known: Option<(bool, String)>,
    /// When to look again.
    next: Option<Duration>,
}

fn idle(ws: &GryviaWorkspace, world: &WorkspaceWorld, poll: Duration, now: Timestamp) -> Idle {
    let mut last = ws
        .status
        .as_ref()
        .and_then(|s| s.last_activity.as_ref())
        .map(|t| t.0);
    let mut out = Idle {
        last,
        cull: None,
        known: None,
        next: None,
    };
    let (Some(minutes), Some(pod)) = (ws.spec.idle_timeout_minutes, &world.pod) else {
        return out;
    };
    if pod.phase != "Running" || pod.deleting {
        return out;
    }
    out.next = Some(poll);
    match &world.activity {
        Activity::NotRead => {}
        Activity::Unreadable(why) => {
            out.known = Some((
                false,
                format!("activity unreadable, nothing is culled: {why}"),
            ));
        }
        Activity::Seen(t) => {
            last = Some(last.map_or(*t, |l| l.max(*t)));
            out.last = last;
            out.known = Some((true, format!("last activity {t}")));
            let since = [last, pod.start].into_iter().flatten().max();
            if let Some(since) = since {
                let idle_for = now.duration_since(since).as_secs_f64();
                let limit = f64::from(minutes) * 60.0;
                if idle_for >= limit {
                    out.cull = Some(format!(
                        "idle for {:.0} minute(s) (last activity {since}, idle timeout {minutes} minute(s)): the pod is deleted, its storage kept",
                        idle_for / 60.0
                    ));
                } else {
                    let left = Duration::from_secs_f64(limit - idle_for);
                    out.next = Some(poll.min(left + Duration::from_secs(1)));
                }
            }
        }
    }
    out
}

impl WorkspaceReconciler {
    /// The children that stay whatever the state: Service, token Secret, home claim.
    fn lasting(
        ws: &GryviaWorkspace,
        world: &WorkspaceWorld,
        plan: &mut Plan<GryviaWorkspaceStatus>,
    ) {
        let (name, ns) = meta_of(ws);
        plan.apply_built(Child::from_json(service(ws)));
        if !world.token_exists {
            plan.apply_built(Child::from_json(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": token_secret(&name), "namespace": ns,
                    "labels": {WORKSPACE_LABEL: name, labels::MANAGED_BY: labels::MANAGED_BY_VALUE}},
                "type": "Opaque",
                "stringData": {TOKEN_KEY: world.new_token},
            })));
        }
        if let Some(c) = claim(ws) {
            plan.apply_built(Child::from_json(c));
        }
    }

    /// Closes the usage record of the session in `status` (the pod that ran), at `end`.
    fn close_session(
        ws: &GryviaWorkspace,
        world: &WorkspaceWorld,
        end: Timestamp,
        status: &mut GryviaWorkspaceStatus,
        plan: &mut Plan<GryviaWorkspaceStatus>,
    ) {
        let (Some(uid), Some(start)) = (status.session_pod_uid.take(), status.session_start.take())
        else {
            return;
        };
        let ran = PodState {
            uid,
            start: Some(start.0),
            ..PodState::default()
        };
        if let Some(r) = usage_record(ws, &ran, world, Some(end)) {
            plan.apply_built(Child::from_resource(&r).map(Child::unowned));
        }
    }

    /// Opens (or keeps open) the usage record of the running pod.
    fn open_session(
        ws: &GryviaWorkspace,
        pod: &PodState,
        world: &WorkspaceWorld,
        now: Timestamp,
        status: &mut GryviaWorkspaceStatus,
        plan: &mut Plan<GryviaWorkspaceStatus>,
    ) {
        let Some(start) = pod.start else { return };
        if status.session_pod_uid.as_deref() != Some(pod.uid.as_str()) {
            Self::close_session(ws, world, now, status, plan);
            status.session_pod_uid = Some(pod.uid.clone());
            status.session_start = Some(Time(start));
        }
        if let Some(r) = usage_record(ws, pod, world, None) {
            plan.apply_built(Child::from_resource(&r).map(Child::unowned));
        }
    }

    /// Deletes the pod and closes its usage record (at its deletion time when it is already
    /// being deleted).
    fn stop_pod(
        ws: &GryviaWorkspace,
        pod: &PodState,
        world: &WorkspaceWorld,
        now: Timestamp,
        status: &mut GryviaWorkspaceStatus,
        plan: &mut Plan<GryviaWorkspaceStatus>,
    ) {
        let (name, ns) = meta_of(ws);
        if !pod.deleting {
            plan.delete
                .push(ObjectRef::namespaced("v1", "Pod", &ns, &name));
        }
        Self::close_session(ws, world, pod.deleted_at.unwrap_or(now), status, plan);
    }

    /// The pod's part of a reconcile: make, keep, restart, stop or cull it; the phase, the
    /// `Ready` reason and its message.
    fn act(
        ws: &GryviaWorkspace,
        world: &WorkspaceWorld,
        cull: Option<&String>,
        now: Timestamp,
        status: &mut GryviaWorkspaceStatus,
        plan: &mut Plan<GryviaWorkspaceStatus>,
    ) -> (&'static str, &'static str, String) {
        let (name, ns) = meta_of(ws);
        match (&world.pod, wanted(ws), cull) {
            (Some(pod), true, Some(why)) => {
                plan.apply_built(
                    Child::from_json(json!({
                        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkspace",
                        "metadata": {"name": name, "namespace": ns,
                            "annotations": {CULLED_ANNOTATION: now.to_string()}},
                    }))
                    .map(Child::unowned),
                );
                plan.event(EventType::Normal, "Culled", why.clone());
                Self::stop_pod(ws, pod, world, now, status, plan);
                ("Stopped", "Culled", why.clone())
            }
            (Some(pod), true, None) => {
                let stale = pod.spec_hash.as_deref() != Some(spec_hash(ws).as_str());
                let ended = pod.phase == "Succeeded" || pod.phase == "Failed";
                if (stale || ended) && !pod.deleting {
                    let why = if stale {
                        "its spec changed"
                    } else {
                        "its pod ended"
                    };
                    plan.event(
                        EventType::Normal,
                        "Restarting",
                        format!("the workspace restarts: {why}"),
                    );
                    Self::stop_pod(ws, pod, world, now, status, plan);
                    ("Pending", "Restarting", format!("restarting: {why}"))
                } else {
                    Self::open_session(ws, pod, world, now, status, plan);
                    match pod.phase.as_str() {
                        "Running" => ("Running", "Running", format!("{} is running", name)),
                        _ => ("Pending", "Starting", format!("the pod is {}", pod.phase)),
                    }
                }
            }
            (None, true, _) => {
                Self::close_session(ws, world, now, status, plan);
                let gpus = i64::from(ws.spec.gpus);
                if let Some(q) = world.quota.as_ref().filter(|q| gpus > q.hard - q.used) {
                    let message = format!(
                        "needs {gpus} GPU(s); ResourceQuota {} has {} of {} left: it starts when they are free",
                        q.name,
                        (q.hard - q.used).max(0),
                        q.hard
                    );
                    return ("Pending", "QuotaExceeded", message);
                }
                plan.apply_built(Child::from_json(pod(ws)));
                ("Pending", "Starting", "the pod is being made".to_owned())
            }
            (Some(pod), false, _) => {
                Self::stop_pod(ws, pod, world, now, status, plan);
                let reason = if culled(ws) { "Culled" } else { "Stopped" };
                (
                    "Stopped",
                    reason,
                    "the pod is being deleted; storage kept".to_owned(),
                )
            }
            (None, false, _) => {
                Self::close_session(ws, world, now, status, plan);
                let reason = if culled(ws) { "Culled" } else { "Stopped" };
                let message = if culled(ws) {
                    "culled when idle; `gryvia workspace start` starts it again".to_owned()
                } else {
                    "stopped; storage kept".to_owned()
                };
                ("Stopped", reason, message)
            }
        }
    }
}

impl Reconcile for WorkspaceReconciler {
    type Object = GryviaWorkspace;
    type World = WorkspaceWorld;
    type Status = GryviaWorkspaceStatus;

    fn name(&self) -> &'static str {
        "workspace"
    }

    fn reconcile(
        &self,
        ws: &GryviaWorkspace,
        world: &WorkspaceWorld,
        now: Timestamp,
    ) -> Plan<GryviaWorkspaceStatus> {
        let mut plan = Plan::new();
        let current = ws.status.clone();
        let mut status = current.clone().unwrap_or_default();
        let (name, ns) = meta_of(ws);
        let generation = ws.metadata.generation;
        Self::lasting(ws, world, &mut plan);
        let look = idle(ws, world, self.poll, now);
        status.last_activity = look.last.map(Time);
        if let Some((known, message)) = &look.known {
            let reason = if *known { "Read" } else { "Unreadable" };
            conditions::set(
                &mut status.conditions,
                conditions::new(
                    ACTIVITY_KNOWN,
                    (*known).into(),
                    reason,
                    message.clone(),
                    generation,
                    now,
                ),
            );
        }
        let (phase, reason, message) =
            Self::act(ws, world, look.cull.as_ref(), now, &mut status, &mut plan);
        status.phase = Some(phase.to_owned());
        status.url = Some(format!("http://{name}.{ns}.svc:{}", port(ws.spec.type_)));
        conditions::set(
            &mut status.conditions,
            conditions::new(
                conditions::READY,
                (phase == "Running").into(),
                reason,
                message,
                generation,
                now,
            ),
        );
        if phase == "Running"
            && let Some(next) = look.next
        {
            plan.requeue(next);
        }
        if reason == "QuotaExceeded" {
            plan.requeue(self.poll);
        }
        plan.set_status_if_changed(current.as_ref(), status);
        plan
    }
}

#[cfg(test)]
mod tests;
