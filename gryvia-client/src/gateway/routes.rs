//! The gateway's handlers. Each acts on the cluster as the caller (impersonation) unless its
//! doc says otherwise.

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Html;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::FutureExt as _;
use gryvia_reconcile::gateway::{Identity, Via, namespace_allowed};
use gryvia_reconcile::queue::Waiting;
use gryvia_reconcile::tenancy::namespace_of;
use gryvia_types::{
    GryviaAIJob, GryviaGpuNode, GryviaGpuSku, GryviaInvoice, GryviaTemplate, GryviaTenant,
    GryviaUsageRecord, PeriodType,
};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, PostParams};
use std::collections::BTreeSet;

use crate::cache::{Cacheable, Caches, wait_ready};
use serde::Deserialize;
use serde_json::Value;

use super::api::{
    ApiError, ApiKeyView, CreateApiKey, CreatedApiKey, FromTemplate, JobLogs, MaintenanceRequest,
    MaintenanceResult, Page, TenantDetail, WhoAmI,
};
use super::server::Gateway;

type G = State<Arc<Gateway>>;
type Answer<T> = Result<T, ApiError>;

/// A namespaced Gryvia kind the gateway serves under `/api/v1/.../{resource}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resource {
    /// The path segment.
    pub path: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// Its plural in the API.
    pub plural: &'static str,
}

/// The namespaced kinds the gateway serves, by path segment.
pub const RESOURCES: [Resource; 6] = [
    Resource {
        path: "jobs",
        kind: "GryviaAIJob",
        plural: "gryviaaijobs",
    },
    Resource {
        path: "workflows",
        kind: "GryviaWorkflow",
        plural: "gryviaworkflows",
    },
    Resource {
        path: "tuners",
        kind: "GryviaAutoTuner",
        plural: "gryviaautotuners",
    },
    Resource {
        path: "inferenceservices",
        kind: "GryviaInferenceService",
        plural: "gryviainferenceservices",
    },
    Resource {
        path: "workspaces",
        kind: "GryviaWorkspace",
        plural: "gryviaworkspaces",
    },
    Resource {
        path: "models",
        kind: "GryviaModelRegistry",
        plural: "gryviamodelregistries",
    },
];

/// The API resource of a served kind.
pub fn api_resource(r: Resource) -> ApiResource {
    ApiResource {
        group: gryvia_types::GROUP.to_owned(),
        version: gryvia_types::VERSION.to_owned(),
        api_version: format!("{}/{}", gryvia_types::GROUP, gryvia_types::VERSION),
        kind: r.kind.to_owned(),
        plural: r.plural.to_owned(),
    }
}

/// Runs `$body` with `$k` the Rust type of the served kind named `$kind` (`None` for another).
macro_rules! with_kind {
    ($kind:expr, $k:ident => $body:expr) => {
        match $kind {
            "GryviaAIJob" => {
                type $k = gryvia_types::GryviaAIJob;
                Some($body)
            }
            "GryviaWorkflow" => {
                type $k = gryvia_types::GryviaWorkflow;
                Some($body)
            }
            "GryviaAutoTuner" => {
                type $k = gryvia_types::GryviaAutoTuner;
                Some($body)
            }
            "GryviaInferenceService" => {
                type $k = gryvia_types::GryviaInferenceService;
                Some($body)
            }
            "GryviaWorkspace" => {
                type $k = gryvia_types::GryviaWorkspace;
                Some($body)
            }
            "GryviaModelRegistry" => {
                type $k = gryvia_types::GryviaModelRegistry;
                Some($body)
            }
            _ => None,
        }
    };
}

/// Asks `caches` for a watch of every served kind (before they run); the returned future
/// waits until each holds its first listing.
pub(super) fn register_caches(caches: &Caches) -> impl Future<Output = crate::Result<()>> + use<> {
    let waits: Vec<_> = RESOURCES
        .iter()
        .filter_map(|r| {
            with_kind!(r.kind, K => {
                let store = caches.store::<K>();
                let kind = r.kind;
                async move { wait_ready(&store, kind).await }.boxed()
            })
        })
        .collect();
    async move {
        for w in waits {
            w.await?;
        }
        Ok(())
    }
}

/// The objects of kind `K` in the cache whose namespace is allowed (every one for `None`)
/// after the (namespace, name) `after`, sorted: (namespace, name, object as JSON) for the first
/// `limit`, and whether more follow.
fn page_from<K: Cacheable + serde::Serialize>(
    caches: &Caches,
    allowed: Option<&BTreeSet<String>>,
    after: Option<&(String, String)>,
    limit: usize,
) -> (Vec<(String, String, Value)>, bool) {
    let mut objects: Vec<(String, String, Arc<K>)> = caches
        .store::<K>()
        .state()
        .into_iter()
        .filter_map(|o| {
            let ns = o.meta().namespace.clone()?;
            let name = o.meta().name.clone()?;
            allowed
                .is_none_or(|a| a.contains(&ns))
                .then_some((ns, name, o))
        })
        .filter(|(ns, name, _)| after.is_none_or(|(a_ns, a_name)| (ns, name) > (a_ns, a_name)))
        .collect();
    objects.sort_unstable_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let more = objects.len() > limit;
    objects.truncate(limit);
    let page = objects
        .into_iter()
        .map(|(ns, name, o)| (ns, name, serde_json::to_value(&*o).unwrap_or(Value::Null)))
        .collect();
    (page, more)
}

/// Whether the cache of kind `K` holds `namespace`/`name` (not being deleted).
fn cached<K: Cacheable>(caches: &Caches, namespace: &str, name: &str) -> bool {
    caches
        .cached::<K>(Some(namespace), name)
        .is_some_and(|o| o.meta().deletion_timestamp.is_none())
}

fn resource(path: &str) -> Answer<(Resource, ApiResource)> {
    let r = RESOURCES
        .iter()
        .find(|r| r.path == path)
        .copied()
        .ok_or_else(|| ApiError::not_found(format!("no resource {path:?}")))?;
    Ok((r, api_resource(r)))
}

/// Routes that need no credentials.
pub(super) fn open() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(g): G| async move {
                if g.health.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                }
            }),
        )
        .route(
            "/metrics",
            get(|State(g): G| async move { g.metrics.encode() }),
        )
        .route(
            "/openapi.json",
            get(|| async { Json(super::openapi::document()) }),
        )
        .route("/", get(|| async { Html(super::dashboard::INDEX) }))
        .route("/dashboard/{file}", get(super::dashboard::asset))
        .route(
            "/api/v1/auth/config",
            get(|State(g): G| async move { Json(g.auth_config.clone()) }),
        )
}

/// Routes that need credentials.
pub(super) fn api() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/queue", get(queue))
        .route("/api/v1/templates", get(templates))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/nodes/{name}", get(node))
        .route(
            "/api/v1/nodes/{name}/maintenance",
            post(start_maintenance).delete(end_maintenance),
        )
        .route("/api/v1/tenants", get(tenants))
        .route("/api/v1/tenants/{name}", get(tenant))
        .route("/api/v1/tenants/{name}/invoices", get(invoices))
        .route("/api/v1/apikeys", get(list_keys).post(create_key))
        .route("/api/v1/apikeys/{id}", axum::routing::delete(revoke_key))
        .route(
            "/api/v1/namespaces/{namespace}/templates/{template}/jobs",
            post(from_template),
        )
        .route("/api/v1/namespaces/{namespace}/jobs/{name}/logs", get(logs))
        .route(
            "/api/v1/namespaces/{namespace}/{resource}",
            get(list_in).post(create),
        )
        .route(
            "/api/v1/namespaces/{namespace}/{resource}/{name}",
            get(read).delete(remove),
        )
        .route("/api/v1/{resource}", get(list_all))
}

async fn whoami(State(g): G, Extension(id): Extension<Identity>) -> Json<WhoAmI> {
    let tenants = g.visible_tenants(&id).await;
    Json(WhoAmI::of(&id, tenants))
}

/// `limit` and `continue` of a list.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    namespace: Option<String>,
    limit: Option<String>,
    #[serde(rename = "continue")]
    next: Option<String>,
}

fn limit_of(q: &ListQuery) -> Answer<u32> {
    match q.limit.as_deref() {
        None => Ok(100),
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=500).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit must be a whole number from 1 to 500").field("limit")
            }),
    }
}

/// A Kubernetes object name as a path segment: lowercase letters, digits, `-` and `.`, starting
/// and ending with a letter or digit, at most 253 characters.
pub fn check_name(field: &str, value: &str) -> Answer<()> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{field} must be a Kubernetes name (lowercase letters, digits, '-' and '.'), not {value:?}"
        ))
        .field(field))
    }
}

/// A credential limited to a tenant's namespace reaches nothing cluster-wide (the fleet, its
/// maintenance), whatever its user may do otherwise.
fn check_cluster_wide(id: &Identity) -> Answer<()> {
    match &id.tenant {
        None => Ok(()),
        Some(t) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "key_scope",
            format!("this API key is limited to tenant {t}'s namespace"),
        )),
    }
}

fn check_namespace(id: &Identity, namespace: &str) -> Answer<()> {
    check_name("namespace", namespace)?;
    if namespace_allowed(id, namespace) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "key_scope",
            format!("this API key is limited to another tenant's namespace, not {namespace}"),
        ))
    }
}

/// Where a list continues: after this (namespace, name).
#[derive(Debug, serde::Serialize, Deserialize)]
struct Cursor {
    after: (String, String),
}

fn decode_cursor(token: Option<&str>) -> Answer<Option<Cursor>> {
    let Some(t) = token.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    URL_SAFE_NO_PAD
        .decode(t)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid("continue is not a token this gateway gave").field("continue")
        })
}

fn encode_cursor(c: &Cursor) -> Option<String> {
    serde_json::to_vec(c)
        .ok()
        .map(|b| URL_SAFE_NO_PAD.encode(b))
}

/// One page of `items` ordered by `key` (ascending, or descending when `newest_first`), after
/// the cursor `token`.
fn paginate<T>(
    mut items: Vec<T>,
    key: impl Fn(&T) -> (String, String),
    newest_first: bool,
    q: &ListQuery,
) -> Answer<Page<T>> {
    let limit = usize::try_from(limit_of(q)?).unwrap_or(usize::MAX);
    let after = decode_cursor(q.next.as_deref())?.map(|c| c.after);
    items.sort_by_key(|i| key(i));
    if newest_first {
        items.reverse();
    }
    if let Some(a) = &after {
        items.retain(|i| {
            let k = key(i);
            if newest_first { &k < a } else { &k > a }
        });
    }
    let next = (items.len() > limit).then(|| Cursor {
        after: key(&items[limit - 1]),
    });
    items.truncate(limit);
    Ok(Page {
        items,
        next: next.as_ref().and_then(encode_cursor),
    })
}

/// The namespaces a list covers for `id`: the one asked for, every namespace (`None`) for an
/// admin whose credential is not limited to a tenant, else its visible tenants' namespaces.
async fn namespaces_for(
    g: &Gateway,
    id: &Identity,
    asked: Option<&str>,
) -> Answer<Option<Vec<String>>> {
    if let Some(ns) = asked {
        check_namespace(id, ns)?;
        return Ok(Some(vec![ns.to_owned()]));
    }
    if id.admin && id.tenant.is_none() {
        return Ok(None);
    }
    Ok(Some(
        g.visible_tenants(id)
            .await
            .iter()
            .map(|t| namespace_of(t))
            .collect(),
    ))
}

/// One page of `r`'s objects over `namespaces` (`None`: the whole cluster), answered from the
/// gateway's watch cache after RBAC said, as the caller, that it may list them there: a
/// namespace it may not list is left out (or, when it is the only one asked for, refused).
async fn page_of(
    g: &Gateway,
    id: &Identity,
    r: Resource,
    namespaces: Option<Vec<String>>,
    limit: u32,
    token: Option<&str>,
) -> Answer<Page<Value>> {
    let after = decode_cursor(token)?.map(|c| c.after);
    let allowed: Option<BTreeSet<String>> = match namespaces {
        None => {
            if !g.may_list(id, None, r.plural).await {
                return Err(ApiError::forbidden(format!(
                    "{} may not list {} in every namespace",
                    id.user, r.plural
                )));
            }
            None
        }
        Some(list) => {
            let single = list.len() == 1;
            let mut ok = BTreeSet::new();
            for ns in list {
                if g.may_list(id, Some(&ns), r.plural).await {
                    ok.insert(ns);
                } else if single {
                    return Err(ApiError::forbidden(format!(
                        "{} may not list {} in namespace {ns}",
                        id.user, r.plural
                    )));
                }
            }
            Some(ok)
        }
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let (items, more) = with_kind!(r.kind, K => {
        page_from::<K>(&g.caches, allowed.as_ref(), after.as_ref(), limit)
    })
    .ok_or_else(|| ApiError::not_found(format!("no resource {:?}", r.path)))?;
    let next = more
        .then(|| items.last())
        .flatten()
        .and_then(|(ns, name, _)| {
            encode_cursor(&Cursor {
                after: (ns.clone(), name.clone()),
            })
        });
    Ok(Page {
        items: items.into_iter().map(|(_, _, o)| o).collect(),
        next,
    })
}

fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

async fn list_all(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(res): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<Value>>> {
    let (r, _) = resource(&res)?;
    let limit = limit_of(&q)?;
    let namespaces = namespaces_for(&g, &id, q.namespace.as_deref()).await?;
    page_of(&g, &id, r, namespaces, limit, q.next.as_deref())
        .await
        .map(Json)
}

async fn list_in(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, res)): Path<(String, String)>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<Value>>> {
    let (r, _) = resource(&res)?;
    let limit = limit_of(&q)?;
    check_namespace(&id, &namespace)?;
    page_of(&g, &id, r, Some(vec![namespace]), limit, q.next.as_deref())
        .await
        .map(Json)
}

async fn read(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, res, name)): Path<(String, String, String)>,
) -> Answer<Json<Value>> {
    check_name("name", &name)?;
    let (r, ar) = resource(&res)?;
    check_namespace(&id, &namespace)?;
    let api: Api<DynamicObject> = Api::namespaced_with(g.client_for(&id)?, &namespace, &ar);
    api.get(&name)
        .await
        .map(|o| Json(to_value(&o)))
        .map_err(|e| ApiError::from_kube(&format!("read {} {namespace}/{name}", r.kind), &e))
}

async fn remove(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, res, name)): Path<(String, String, String)>,
) -> Answer<StatusCode> {
    check_name("name", &name)?;
    let (r, ar) = resource(&res)?;
    check_namespace(&id, &namespace)?;
    let api: Api<DynamicObject> = Api::namespaced_with(g.client_for(&id)?, &namespace, &ar);
    api.delete(&name, &DeleteParams::background())
        .await
        .map_err(|e| ApiError::from_kube(&format!("delete {} {namespace}/{name}", r.kind), &e))?;
    settle(&g, r, &namespace, &name, false).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Waits (at most 3 s) until the gateway's cache of `r` shows what this request just did (the
/// object there, or gone), so that a caller who lists right after a change sees it.
async fn settle(g: &Gateway, r: Resource, namespace: &str, name: &str, present: bool) {
    for _ in 0..300 {
        let there = with_kind!(r.kind, K => cached::<K>(&g.caches, namespace, name));
        if there.is_none_or(|t| t == present) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Checks a submitted object against its kind's schema (the field at fault named), fills in
/// its apiVersion, kind and namespace.
fn admit_body(g: &Gateway, r: Resource, namespace: &str, mut body: Value) -> Answer<Value> {
    let Some(obj) = body.as_object_mut() else {
        return Err(ApiError::invalid("the body must be a JSON object"));
    };
    let api_version = format!("{}/{}", gryvia_types::GROUP, gryvia_types::VERSION);
    for (field, want) in [("apiVersion", api_version.as_str()), ("kind", r.kind)] {
        match obj.get(field) {
            None => {
                obj.insert(field.to_owned(), Value::from(want));
            }
            Some(v) if v == want => {}
            Some(_) => {
                return Err(
                    ApiError::invalid(format!("{field} must be {want:?} here")).field(field)
                );
            }
        }
    }
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::invalid("metadata must be an object").field("metadata"));
    };
    match meta.get("namespace") {
        None => {
            meta.insert("namespace".to_owned(), Value::from(namespace));
        }
        Some(v) if v == namespace => {}
        Some(_) => {
            return Err(ApiError::invalid(format!(
                "metadata.namespace must be {namespace:?} (the namespace of the path)"
            ))
            .field("metadata.namespace"));
        }
    }
    if !meta.contains_key("name") && !meta.contains_key("generateName") {
        return Err(ApiError::invalid("metadata.name is required").field("metadata.name"));
    }
    if let Err(errors) = g.validator.validate(&body) {
        let first = errors.errors.first();
        let mut e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            errors.to_string(),
        );
        e.field = first.map(|f| f.path.clone()).filter(|p| !p.is_empty());
        return Err(e);
    }
    Ok(body)
}

async fn create(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, res)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Answer<(StatusCode, Json<Value>)> {
    let (r, ar) = resource(&res)?;
    check_namespace(&id, &namespace)?;
    let Some(Json(body)) = body else {
        return Err(ApiError::invalid(
            "the body must be a JSON object (Content-Type: application/json)",
        ));
    };
    let body = admit_body(&g, r, &namespace, body)?;
    let obj: DynamicObject = serde_json::from_value(body)
        .map_err(|e| ApiError::invalid(format!("the body is not an object: {e}")))?;
    let api: Api<DynamicObject> = Api::namespaced_with(g.client_for(&id)?, &namespace, &ar);
    let created = api
        .create(
            &PostParams {
                field_manager: Some("gryvia-gateway".to_owned()),
                ..PostParams::default()
            },
            &obj,
        )
        .await
        .map_err(|e| ApiError::from_kube(&format!("create {} in {namespace}", r.kind), &e))?;
    if let Some(name) = &created.metadata.name {
        settle(&g, r, &namespace, name, true).await;
    }
    Ok((StatusCode::CREATED, Json(to_value(&created))))
}

async fn from_template(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, template)): Path<(String, String)>,
    body: Option<Json<FromTemplate>>,
) -> Answer<(StatusCode, Json<GryviaAIJob>)> {
    check_name("template", &template)?;
    check_namespace(&id, &namespace)?;
    let req = body.map(|Json(b)| b).unwrap_or_default();
    let client = g.client_for(&id)?;
    let job = crate::ops::jobs::render_template(
        &client,
        &template,
        req.name.as_deref(),
        &namespace,
        &req.params,
    )
    .await
    .map_err(|e| match &e {
        crate::Error::Invalid(m) if m.ends_with("does not exist") => ApiError::not_found(m.clone()),
        _ => ApiError::from_client("render the template", &e),
    })?;
    let job = crate::ops::jobs::submit(&client, &job)
        .await
        .map_err(|e| ApiError::from_client("submit the job", &e))?;
    settle(&g, RESOURCES[0], &namespace, &job.name_any(), true).await;
    Ok((StatusCode::CREATED, Json(job)))
}

/// `tail` of the logs.
#[derive(Debug, Deserialize)]
pub(super) struct LogQuery {
    tail: Option<String>,
}

async fn logs(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path((namespace, name)): Path<(String, String)>,
    Query(q): Query<LogQuery>,
) -> Answer<Json<JobLogs>> {
    check_name("name", &name)?;
    check_namespace(&id, &namespace)?;
    let tail = match q.tail.as_deref() {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .ok()
                .filter(|n| (1..=100_000).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid("tail must be a whole number from 1 to 100000").field("tail")
                })?,
        ),
    };
    let client = g.client_for(&id)?;
    crate::ops::jobs::get(&client, &namespace, &name)
        .await
        .map_err(|e| ApiError::from_client("read the job", &e))?
        .ok_or_else(|| ApiError::not_found(format!("job {namespace}/{name} not found")))?;
    let pods = crate::ops::jobs::pods_of(&client, &namespace, &name)
        .await
        .map_err(|e| ApiError::from_client("list the job's pods", &e))?;
    let api: Api<Pod> = Api::namespaced(client, &namespace);
    let params = LogParams {
        container: Some(gryvia_reconcile::aijob::WORKER.to_owned()),
        tail_lines: tail,
        ..LogParams::default()
    };
    let mut workers = std::collections::BTreeMap::new();
    for p in gryvia_reconcile::aijob::newest_attempts(pods, None) {
        let pod = p.name_any();
        let text = match api.logs(&pod, &params).await {
            Ok(t) => t,
            // A worker that has not started has no log yet.
            Err(kube::Error::Api(s)) if s.code == 400 => String::new(),
            Err(e) => return Err(ApiError::from_kube(&format!("logs of {pod}"), &e)),
        };
        workers.insert(pod, text);
    }
    Ok(Json(JobLogs { workers }))
}

async fn queue(
    State(g): G,
    Extension(id): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<Waiting>>> {
    let client = g.client_for(&id)?;
    let mut jobs = Vec::new();
    match namespaces_for(&g, &id, q.namespace.as_deref()).await? {
        None => {
            jobs = crate::ops::jobs::pending(&client, None)
                .await
                .map_err(|e| ApiError::from_client("list waiting jobs", &e))?;
        }
        Some(namespaces) => {
            for ns in &namespaces {
                match crate::ops::jobs::pending(&client, Some(ns)).await {
                    Ok(mut j) => jobs.append(&mut j),
                    Err(crate::Error::Api {
                        source: kube::Error::Api(s),
                        ..
                    }) if s.code == 403 => {}
                    Err(e) => return Err(ApiError::from_client("list waiting jobs", &e)),
                }
            }
        }
    }
    let waiting: Vec<Waiting> = jobs.iter().map(gryvia_reconcile::queue::waiting).collect();
    paginate(waiting, |w| (w.namespace.clone(), w.job.clone()), false, &q).map(Json)
}

fn by_name<K: kube::Resource>(o: &K) -> (String, String) {
    (String::new(), o.meta().name.clone().unwrap_or_default())
}

async fn templates(
    State(g): G,
    Extension(id): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<GryviaTemplate>>> {
    let list = Api::<GryviaTemplate>::all(g.client_for(&id)?)
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube("list templates", &e))?;
    paginate(list.items, by_name, false, &q).map(Json)
}

async fn nodes(
    State(g): G,
    Extension(id): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<GryviaGpuNode>>> {
    check_cluster_wide(&id)?;
    let list = Api::<GryviaGpuNode>::all(g.client_for(&id)?)
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube("list GPU nodes", &e))?;
    paginate(list.items, by_name, false, &q).map(Json)
}

async fn node(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
) -> Answer<Json<GryviaGpuNode>> {
    check_cluster_wide(&id)?;
    check_name("name", &name)?;
    Api::<GryviaGpuNode>::all(g.client_for(&id)?)
        .get(&name)
        .await
        .map(Json)
        .map_err(|e| ApiError::from_kube(&format!("read GPU node {name}"), &e))
}

async fn start_maintenance(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
    body: Option<Json<MaintenanceRequest>>,
) -> Answer<Json<MaintenanceResult>> {
    check_cluster_wide(&id)?;
    check_name("name", &name)?;
    let Some(Json(req)) = body else {
        return Err(ApiError::invalid("the body must be {\"reason\": \"...\"}").field("reason"));
    };
    if req.reason.trim().is_empty() || req.reason.len() > 256 {
        return Err(ApiError::invalid("reason must be 1 to 256 characters").field("reason"));
    }
    let changed = crate::ops::nodes::start_maintenance(&g.client_for(&id)?, &name, &req.reason)
        .await
        .map_err(|e| ApiError::from_client(&format!("start maintenance of {name}"), &e))?;
    Ok(Json(MaintenanceResult {
        node: name,
        in_maintenance: true,
        changed,
    }))
}

async fn end_maintenance(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
) -> Answer<Json<MaintenanceResult>> {
    check_cluster_wide(&id)?;
    check_name("name", &name)?;
    let done = crate::ops::nodes::end_maintenance(&g.client_for(&id)?, &name)
        .await
        .map_err(|e| ApiError::from_client(&format!("end maintenance of {name}"), &e))?;
    Ok(Json(MaintenanceResult {
        node: name,
        in_maintenance: false,
        changed: !done.is_empty(),
    }))
}

async fn tenants(
    State(g): G,
    Extension(id): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<GryviaTenant>>> {
    let visible = g.visible_tenants(&id).await;
    let items: Vec<GryviaTenant> = g
        .tenants
        .state()
        .iter()
        .filter(|t| visible.contains(&t.name_any()))
        .map(|t| (**t).clone())
        .collect();
    paginate(items, by_name, false, &q).map(Json)
}

/// The tenant `name` when `id` may see it (RBAC confirmed), else 404.
async fn visible_tenant(g: &Gateway, id: &Identity, name: &str) -> Answer<GryviaTenant> {
    let not_found = || ApiError::not_found(format!("no tenant {name:?} visible to you"));
    if !g.visible_tenants(id).await.iter().any(|t| t == name) {
        return Err(not_found());
    }
    g.tenants
        .state()
        .iter()
        .find(|t| t.name_any() == name)
        .map(|t| (**t).clone())
        .ok_or_else(not_found)
}

/// A tenant, its budgets and its spend this month. Read with the gateway's own identity after
/// RBAC confirmed the caller's access to the tenant.
async fn tenant(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
) -> Answer<Json<TenantDetail>> {
    check_name("name", &name)?;
    let tenant = visible_tenant(&g, &id, &name).await?;
    let budgets = crate::ops::tenants::budgets_of(&g.base, &name)
        .await
        .map_err(|e| ApiError::from_client("list budgets", &e))?;
    let records = Api::<GryviaUsageRecord>::all(g.base.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube("list usage records", &e))?
        .items;
    let skus = Api::<GryviaGpuSku>::all(g.base.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube("list GPU SKUs", &e))?
        .items;
    let cost = gryvia_reconcile::invoice::cost_of(
        &name,
        PeriodType::Monthly,
        &records,
        &skus,
        jiff::Timestamp::now(),
    );
    Ok(Json(TenantDetail {
        tenant,
        budgets,
        cost,
    }))
}

/// The tenant's invoices, newest period first (the gateway's own identity, after RBAC
/// confirmed the caller's access to the tenant).
async fn invoices(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<GryviaInvoice>>> {
    check_name("name", &name)?;
    visible_tenant(&g, &id, &name).await?;
    let items: Vec<GryviaInvoice> = Api::<GryviaInvoice>::all(g.base.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| ApiError::from_kube("list invoices", &e))?
        .items
        .into_iter()
        .filter(|i| i.spec.tenant == name)
        .collect();
    paginate(
        items,
        |i| (i.spec.period_start.0.to_string(), i.name_any()),
        true,
        &q,
    )
    .map(Json)
}

async fn list_keys(
    State(g): G,
    Extension(id): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Answer<Json<Page<ApiKeyView>>> {
    let only = (!id.admin).then_some(id.user.as_str());
    let keys = super::apikeys::list(&g.base, g.keys.namespace(), only)
        .await
        .map_err(|e| ApiError::from_client("list API keys", &e))?;
    let views: Vec<ApiKeyView> = keys.iter().map(ApiKeyView::from).collect();
    paginate(views, |k| (k.created.clone(), k.id.clone()), false, &q).map(Json)
}

/// Creates an API key acting as the caller (an OIDC login; a key cannot make keys), limited
/// to a tenant the caller may see when asked.
async fn create_key(
    State(g): G,
    Extension(id): Extension<Identity>,
    body: Option<Json<CreateApiKey>>,
) -> Answer<(StatusCode, Json<CreatedApiKey>)> {
    if id.via != Via::Oidc {
        return Err(ApiError::forbidden(
            "API keys are created from an OIDC login, not with another API key",
        ));
    }
    let Some(Json(req)) = body else {
        return Err(ApiError::invalid("the body must be a JSON object with a name").field("name"));
    };
    if req.name.trim().is_empty() || req.name.len() > 63 {
        return Err(ApiError::invalid("name must be 1 to 63 characters").field("name"));
    }
    let days = req.expires_in_days.unwrap_or(90);
    if !(1..=365).contains(&days) {
        return Err(ApiError::invalid("expiresInDays must be from 1 to 365").field("expiresInDays"));
    }
    if let Some(t) = &req.tenant
        && !g.visible_tenants(&id).await.contains(t)
    {
        return Err(ApiError::not_found(format!("no tenant {t:?} visible to you")).field("tenant"));
    }
    let now = jiff::Timestamp::now();
    let new = super::apikeys::NewKey {
        name: req.name,
        user: id.user.clone(),
        groups: id.groups.clone(),
        tenant: req.tenant,
        scope: req.scope,
        expires: Some(now + jiff::SignedDuration::from_hours(24 * i64::from(days))),
    };
    let (record, key) = super::apikeys::create(&g.base, g.keys.namespace(), &new, now)
        .await
        .map_err(|e| ApiError::from_client("create the API key", &e))?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedApiKey {
            key,
            record: ApiKeyView::from(&record),
        }),
    ))
}

async fn revoke_key(
    State(g): G,
    Extension(id): Extension<Identity>,
    Path(key_id): Path<String>,
) -> Answer<StatusCode> {
    check_name("id", &key_id)?;
    let keys = super::apikeys::list(&g.base, g.keys.namespace(), None)
        .await
        .map_err(|e| ApiError::from_client("list API keys", &e))?;
    let mine = keys
        .iter()
        .any(|k| k.id == key_id && (id.admin || k.user == id.user));
    if !mine {
        return Err(ApiError::not_found(format!(
            "no API key {key_id:?} of yours"
        )));
    }
    super::apikeys::revoke(&g.base, g.keys.namespace(), &key_id)
        .await
        .map_err(|e| ApiError::from_client("revoke the API key", &e))?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_tokens_are_invalid_naming_continue() {
        let c = Cursor {
            after: ("ns".into(), "job-1".into()),
        };
        let t = encode_cursor(&c);
        let back = decode_cursor(t.as_deref()).ok().flatten();
        assert_eq!(
            back.map(|b| b.after),
            Some(("ns".to_owned(), "job-1".to_owned()))
        );
        assert!(decode_cursor(Some("")).ok().is_some_and(|c| c.is_none()));
        let bad = decode_cursor(Some("%%%")).err();
        assert_eq!(bad.and_then(|e| e.field), Some("continue".to_owned()));
    }

    #[test]
    fn pages_follow_the_cursor_in_either_order() {
        let items: Vec<(String, String)> = ["c", "a", "b"]
            .iter()
            .map(|n| (String::new(), (*n).to_owned()))
            .collect();
        let q = |next: Option<String>| ListQuery {
            limit: Some("2".to_owned()),
            next,
            ..ListQuery::default()
        };
        let first = paginate(items.clone(), Clone::clone, false, &q(None)).ok();
        let first = first.unwrap_or(Page {
            items: vec![],
            next: None,
        });
        assert_eq!(
            first.items.iter().map(|i| i.1.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let second = paginate(items.clone(), Clone::clone, false, &q(first.next)).ok();
        let second = second.unwrap_or(Page {
            items: vec![],
            next: None,
        });
        assert_eq!(
            second
                .items
                .iter()
                .map(|i| i.1.as_str())
                .collect::<Vec<_>>(),
            ["c"]
        );
        assert!(second.next.is_none());
        let newest = paginate(items, Clone::clone, true, &q(None)).ok();
        let newest = newest.unwrap_or(Page {
            items: vec![],
            next: None,
        });
        assert_eq!(
            newest
                .items
                .iter()
                .map(|i| i.1.as_str())
                .collect::<Vec<_>>(),
            ["c", "b"]
        );
    }

    #[test]
    fn limits_outside_1_to_500_name_the_field() {
        let q = |l: &str| ListQuery {
            limit: Some(l.to_owned()),
            ..ListQuery::default()
        };
        assert_eq!(limit_of(&ListQuery::default()).ok(), Some(100));
        assert_eq!(limit_of(&q("500")).ok(), Some(500));
        for bad in ["0", "501", "-1", "x"] {
            assert_eq!(
                limit_of(&q(bad)).err().and_then(|e| e.field),
                Some("limit".to_owned())
            );
        }
    }

    #[test]
    fn unknown_resources_are_not_found() {
        assert!(resource("jobs").is_ok());
        assert_eq!(resource("secrets").err().map(|e| e.status), Some(404));
    }
}
