//! The gateway's OpenAPI 3.1 document, generated from its route table and from the same
//! schemas the API server enforces: each Gryvia kind's schema is its CRD's `openAPIV3Schema`
//! (OpenAPI 3.0's `nullable` written as 3.1's `type: [T, "null"]`), and the gateway's own
//! bodies are derived from their Rust types by schemars.

use std::sync::OnceLock;

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::api::{
    ApiError, ApiKeyView, AuthConfig, CreateApiKey, CreatedApiKey, FromTemplate, JobLogs,
    MaintenanceRequest, MaintenanceResult, TenantDetail, WhoAmI,
};
use super::routes::RESOURCES;

/// Where a parameter goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum In {
    Path,
    Query,
}

#[derive(Clone, Copy, Debug)]
struct Param {
    name: &'static str,
    at: In,
    schema: fn() -> Value,
    about: &'static str,
}

fn k8s_name() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 253,
           "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"})
}
fn limit() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 500, "default": 100})
}
fn text() -> Value {
    json!({"type": "string"})
}
fn tail() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 100_000})
}

const NAMESPACE: Param = Param {
    name: "namespace",
    at: In::Path,
    schema: k8s_name,
    about: "Namespace",
};
const NAME: Param = Param {
    name: "name",
    at: In::Path,
    schema: k8s_name,
    about: "Object name",
};
const LIMIT: Param = Param {
    name: "limit",
    at: In::Query,
    schema: limit,
    about: "Most items per page",
};
const CONTINUE: Param = Param {
    name: "continue",
    at: In::Query,
    schema: text,
    about: "The `continue` of the previous page",
};
const IN_NAMESPACE: Param = Param {
    name: "namespace",
    at: In::Query,
    schema: k8s_name,
    about: "Only this namespace (default: every namespace the caller may see)",
};

/// One operation of the API.
struct Op {
    method: &'static str,
    path: String,
    id: String,
    summary: String,
    tag: &'static str,
    params: Vec<Param>,
    body: Option<Value>,
    ok: (u16, Option<Value>),
    open: bool,
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn page(item: &Value) -> Value {
    json!({"type": "object", "required": ["items"], "properties": {
        "items": {"type": "array", "items": item},
        "continue": {"type": "string", "description": "Pass as `continue` for the next page"}
    }})
}

#[expect(
    clippy::too_many_lines,
    reason = "the route table, one entry after another"
)]
fn operations() -> Vec<Op> {
    let op = |method, path: &str, id: &str, summary: &str, tag, params: Vec<Param>| Op {
        method,
        path: path.to_owned(),
        id: id.to_owned(),
        summary: summary.to_owned(),
        tag,
        params,
        body: None,
        ok: (200, None),
        open: false,
    };
    let mut ops = vec![
        Op {
            ok: (200, Some(reference("AuthConfig"))),
            open: true,
            ..op(
                "get",
                "/api/v1/auth/config",
                "authConfig",
                "What the dashboard needs to log in",
                "auth",
                vec![],
            )
        },
        Op {
            ok: (200, Some(reference("WhoAmI"))),
            ..op(
                "get",
                "/api/v1/whoami",
                "whoAmI",
                "Who the caller is and which tenants it may see",
                "auth",
                vec![],
            )
        },
        Op {
            ok: (200, Some(page(&reference("Waiting")))),
            ..op(
                "get",
                "/api/v1/queue",
                "queue",
                "Waiting jobs with their queue, position, expected start and why",
                "jobs",
                vec![IN_NAMESPACE, LIMIT, CONTINUE],
            )
        },
        Op {
            ok: (200, Some(page(&reference("GryviaTemplate")))),
            ..op(
                "get",
                "/api/v1/templates",
                "listTemplates",
                "Job templates",
                "jobs",
                vec![LIMIT, CONTINUE],
            )
        },
        Op {
            body: Some(reference("FromTemplate")),
            ok: (201, Some(reference("GryviaAIJob"))),
            ..op(
                "post",
                "/api/v1/namespaces/{namespace}/templates/{template}/jobs",
                "submitFromTemplate",
                "Submit a job rendered from a template",
                "jobs",
                vec![
                    NAMESPACE,
                    Param {
                        name: "template",
                        about: "Template name",
                        ..NAME
                    },
                ],
            )
        },
        Op {
            ok: (200, Some(reference("JobLogs"))),
            ..op(
                "get",
                "/api/v1/namespaces/{namespace}/jobs/{name}/logs",
                "jobLogs",
                "Logs of a job's workers (their newest attempt)",
                "jobs",
                vec![
                    NAMESPACE,
                    NAME,
                    Param {
                        name: "tail",
                        at: In::Query,
                        schema: tail,
                        about: "Only the last lines of each worker",
                    },
                ],
            )
        },
        Op {
            ok: (200, Some(page(&reference("GryviaGpuNode")))),
            ..op(
                "get",
                "/api/v1/nodes",
                "listNodes",
                "GPU nodes and their health",
                "fleet",
                vec![LIMIT, CONTINUE],
            )
        },
        Op {
            ok: (200, Some(reference("GryviaGpuNode"))),
            ..op(
                "get",
                "/api/v1/nodes/{name}",
                "getNode",
                "One GPU node and its health",
                "fleet",
                vec![NAME],
            )
        },
        Op {
            body: Some(reference("MaintenanceRequest")),
            ok: (200, Some(reference("MaintenanceResult"))),
            ..op(
                "post",
                "/api/v1/nodes/{name}/maintenance",
                "startMaintenance",
                "Take a node out of service (cordon; admins)",
                "fleet",
                vec![NAME],
            )
        },
        Op {
            ok: (200, Some(reference("MaintenanceResult"))),
            ..op(
                "delete",
                "/api/v1/nodes/{name}/maintenance",
                "endMaintenance",
                "Return a node to service (admins)",
                "fleet",
                vec![NAME],
            )
        },
        Op {
            ok: (200, Some(page(&reference("GryviaTenant")))),
            ..op(
                "get",
                "/api/v1/tenants",
                "listTenants",
                "The tenants the caller may see, with quota use",
                "tenants",
                vec![LIMIT, CONTINUE],
            )
        },
        Op {
            ok: (200, Some(reference("TenantDetail"))),
            ..op(
                "get",
                "/api/v1/tenants/{name}",
                "getTenant",
                "A tenant: quota use, budgets, spend this month",
                "tenants",
                vec![NAME],
            )
        },
        Op {
            ok: (200, Some(page(&reference("GryviaInvoice")))),
            ..op(
                "get",
                "/api/v1/tenants/{name}/invoices",
                "listInvoices",
                "A tenant's invoices, newest first",
                "tenants",
                vec![NAME, LIMIT, CONTINUE],
            )
        },
        Op {
            ok: (200, Some(page(&reference("ApiKeyView")))),
            ..op(
                "get",
                "/api/v1/apikeys",
                "listApiKeys",
                "The caller's API keys (every key for admins)",
                "auth",
                vec![LIMIT, CONTINUE],
            )
        },
        Op {
            body: Some(reference("CreateApiKey")),
            ok: (201, Some(reference("CreatedApiKey"))),
            ..op(
                "post",
                "/api/v1/apikeys",
                "createApiKey",
                "Create an API key acting as the caller (shown once)",
                "auth",
                vec![],
            )
        },
        Op {
            ok: (204, None),
            ..op(
                "delete",
                "/api/v1/apikeys/{id}",
                "revokeApiKey",
                "Revoke an API key",
                "auth",
                vec![Param {
                    name: "id",
                    about: "Key id",
                    ..NAME
                }],
            )
        },
    ];
    for r in RESOURCES {
        let kind = reference(r.kind);
        let cap = r.kind.trim_start_matches("Gryvia");
        ops.push(Op {
            ok: (200, Some(page(&kind))),
            ..op(
                "get",
                &format!("/api/v1/{}", r.path),
                &format!("list{cap}All"),
                &format!("{} objects in every namespace the caller may see", r.kind),
                "workloads",
                vec![IN_NAMESPACE, LIMIT, CONTINUE],
            )
        });
        ops.push(Op {
            ok: (200, Some(page(&kind))),
            ..op(
                "get",
                &format!("/api/v1/namespaces/{{namespace}}/{}", r.path),
                &format!("list{cap}"),
                &format!("{} objects of a namespace", r.kind),
                "workloads",
                vec![NAMESPACE, LIMIT, CONTINUE],
            )
        });
        ops.push(Op {
            body: Some(kind.clone()),
            ok: (201, Some(kind.clone())),
            ..op(
                "post",
                &format!("/api/v1/namespaces/{{namespace}}/{}", r.path),
                &format!("create{cap}"),
                &format!("Create a {} (checked against its schema first)", r.kind),
                "workloads",
                vec![NAMESPACE],
            )
        });
        ops.push(Op {
            ok: (200, Some(kind.clone())),
            ..op(
                "get",
                &format!("/api/v1/namespaces/{{namespace}}/{}/{{name}}", r.path),
                &format!("get{cap}"),
                &format!("One {}", r.kind),
                "workloads",
                vec![NAMESPACE, NAME],
            )
        });
        ops.push(Op {
            ok: (204, None),
            ..op(
                "delete",
                &format!("/api/v1/namespaces/{{namespace}}/{}/{{name}}", r.path),
                &format!("delete{cap}"),
                &format!("Delete (cancel) a {}", r.kind),
                "workloads",
                vec![NAMESPACE, NAME],
            )
        });
    }
    ops
}

fn operation(o: &Op) -> Value {
    let params: Vec<Value> = o
        .params
        .iter()
        .map(|p| {
            json!({"name": p.name, "in": if p.at == In::Path { "path" } else { "query" },
                   "required": p.at == In::Path, "description": p.about, "schema": (p.schema)()})
        })
        .collect();
    let error = json!({"description": "Error", "content": {"application/json": {"schema": reference("ApiError")}}});
    let mut responses = Map::new();
    let ok = match &o.ok.1 {
        Some(schema) => {
            json!({"description": "OK", "content": {"application/json": {"schema": schema}}})
        }
        None => json!({"description": "Done"}),
    };
    responses.insert(o.ok.0.to_string(), ok);
    let mut codes = vec!["400", "404", "405", "502"];
    if !o.open {
        codes.extend(["401", "403", "429"]);
    }
    if o.method == "post" {
        codes.extend(["409", "413", "415", "422"]);
    }
    for c in codes {
        responses.insert(c.to_owned(), error.clone());
    }
    let mut out = json!({
        "operationId": o.id, "summary": o.summary, "tags": [o.tag],
        "parameters": params, "responses": responses,
    });
    if let Some(body) = &o.body {
        out["requestBody"] =
            json!({"required": true, "content": {"application/json": {"schema": body}}});
    }
    if o.open {
        out["security"] = json!([]);
    }
    out
}

/// OpenAPI 3.0's `nullable: true` as 3.1 writes it, everywhere in a schema.
fn to_31(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.remove("nullable") == Some(Value::Bool(true)) {
                match m.get("type").cloned() {
                    Some(Value::String(t)) => {
                        m.insert("type".to_owned(), json!([t, "null"]));
                    }
                    _ => {
                        let inner = Value::Object(std::mem::take(m));
                        m.insert("anyOf".to_owned(), json!([inner, {"type": "null"}]));
                    }
                }
            }
            m.values_mut().for_each(to_31);
        }
        Value::Array(a) => a.iter_mut().for_each(to_31),
        _ => {}
    }
}

fn components() -> Map<String, Value> {
    let mut schemas = Map::new();
    for crd in gryvia_types::crds::all() {
        let Some(mut schema) = crd
            .spec
            .versions
            .first()
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
        else {
            continue;
        };
        to_31(&mut schema);
        schemas.insert(crd.spec.names.kind.clone(), schema);
    }
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = settings.into_generator();
    // Each type registered as a definition (named after the type), with what it refers to.
    macro_rules! own {
        ($($t:ty),*) => {$( let _ = generator.subschema_for::<$t>(); )*};
    }
    own!(
        ApiError,
        WhoAmI,
        AuthConfig,
        TenantDetail,
        FromTemplate,
        MaintenanceRequest,
        MaintenanceResult,
        CreateApiKey,
        CreatedApiKey,
        ApiKeyView,
        JobLogs,
        gryvia_reconcile::queue::Waiting
    );
    // A CRD kind keeps the CRD's schema (the one the API server enforces).
    for (name, s) in generator.take_definitions(true) {
        schemas.entry(name).or_insert(s);
    }
    schemas
}

/// The OpenAPI document (built once).
pub fn document() -> Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut paths = Map::new();
        for o in operations() {
            let entry = paths.entry(o.path.clone()).or_insert_with(|| json!({}));
            entry[o.method] = operation(&o);
        }
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "Gryvia gateway",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "REST over the Gryvia GPU platform. Every request acts on the cluster as the caller (Kubernetes impersonation), so RBAC decides what it may do.",
            },
            "paths": paths,
            "components": {
                "schemas": components(),
                "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                    "description": "An OIDC ID token of the configured issuer, or an API key (gryvia_...)"}},
            },
            "security": [{"bearer": []}],
        })
    })
    .clone()
}

/// Every (method, path) the document lists, for tests that check the router answers each.
pub fn operations_listed() -> Vec<(String, String)> {
    operations()
        .iter()
        .map(|o| (o.method.to_uppercase(), o.path.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nullable_becomes_a_type_list() {
        let mut v = json!({"properties": {"a": {"type": "string", "nullable": true},
                                          "b": {"nullable": true, "x-kubernetes-int-or-string": true}}});
        to_31(&mut v);
        assert_eq!(v["properties"]["a"]["type"], json!(["string", "null"]));
        assert_eq!(v["properties"]["b"]["anyOf"][1], json!({"type": "null"}));
    }

    #[test]
    fn every_reference_resolves_and_ids_are_unique() {
        let doc = document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| *c != '"').collect();
            assert!(schemas.contains_key(&name), "unresolved $ref {name}");
        }
        let mut ids: Vec<String> = operations().into_iter().map(|o| o.id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n, "operation ids are unique");
        assert!(schemas.contains_key("GryviaAIJob") && schemas.contains_key("ApiError"));
    }
}
