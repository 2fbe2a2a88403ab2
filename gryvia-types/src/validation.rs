//! Client-side validation of Gryvia objects against their generated CRD schemas.
//!
//! The same checks the API server makes, run before an object leaves the machine: structure,
//! types, ranges, enums, patterns and required fields (OpenAPI v3 schema through a JSON-Schema
//! validator), the CEL rules (`x-kubernetes-validations`, evaluated by kube-cel), and, like
//! `kubectl --validate=strict`, fields the schema does not know. Every error names the field
//! path, for example `spec.priority: 101 is greater than the maximum of 100`.
//!
//! The API server remains the authority; this module exists so that the CLI, the Python SDK
//! and tests can reject bad input early with the same words.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::crds;

/// One reason an object is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path of the offending field, for example `spec.checks[1].type`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Why an object was rejected: one or more field errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors {
    /// Kind of the object (empty when it had none).
    pub kind: String,
    /// Name of the object (empty when it had none).
    pub name: String,
    /// The errors, sorted by path.
    pub errors: Vec<FieldError>,
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match (self.kind.is_empty(), self.name.is_empty()) {
            (false, false) => format!("{} {:?}", self.kind, self.name),
            (false, true) => self.kind.clone(),
            _ => "object".to_owned(),
        };
        let list: Vec<String> = self.errors.iter().map(ToString::to_string).collect();
        write!(f, "invalid {what}: {}", list.join("; "))
    }
}

struct Compiled {
    openapi: Value,
    schema: jsonschema::Validator,
    cel: kube_cel::CompiledSchema,
}

/// Validates objects of every Gryvia kind. Building one compiles every schema once.
pub struct Validator {
    kinds: BTreeMap<String, Compiled>,
}

impl fmt::Debug for Validator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Validator")
            .field("kinds", &self.kinds.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Validator {
    /// Compiles the schemas of every Gryvia CRD.
    ///
    /// # Errors
    /// [`crate::Error::Json`] or [`crate::Error::Yaml`] when a generated schema cannot be
    /// compiled (a bug in this crate, caught by its tests).
    pub fn new() -> crate::Result<Self> {
        let mut kinds = BTreeMap::new();
        for crd in crds::all() {
            let kind = crd.spec.names.kind.clone();
            let Some(schema) = crd
                .spec
                .versions
                .first()
                .and_then(|v| v.schema.as_ref())
                .and_then(|s| s.open_api_v3_schema.as_ref())
            else {
                return Err(crate::Error::Yaml(format!("{kind}: CRD has no schema")));
            };
            let openapi = serde_json::to_value(schema)?;
            let json_schema = to_json_schema(&openapi);
            let schema = jsonschema::draft4::new(&json_schema)
                .map_err(|e| crate::Error::Yaml(format!("{kind}: schema does not compile: {e}")))?;
            let cel = kube_cel::compile_schema(&openapi);
            kinds.insert(
                kind,
                Compiled {
                    openapi,
                    schema,
                    cel,
                },
            );
        }
        Ok(Validator { kinds })
    }

    /// Validates one object given as JSON (for example parsed from YAML).
    ///
    /// # Errors
    /// [`ValidationErrors`] listing every problem found, each naming its field.
    pub fn validate(&self, object: &Value) -> Result<(), ValidationErrors> {
        self.validate_update(object, None)
    }

    /// Validates an update of `old` to `object`, so transition rules (`oldSelf`) apply.
    ///
    /// # Errors
    /// [`ValidationErrors`] listing every problem found, each naming its field.
    pub fn validate_update(
        &self,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ValidationErrors> {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let fail = |errors: Vec<FieldError>| ValidationErrors {
            kind: kind.clone(),
            name: name.clone(),
            errors,
        };
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if api_version != crate::API_VERSION {
            return Err(fail(vec![FieldError {
                path: "apiVersion".to_owned(),
                message: format!("must be {:?}, got {api_version:?}", crate::API_VERSION),
            }]));
        }
        let Some(compiled) = self.kinds.get(&kind) else {
            return Err(fail(vec![FieldError {
                path: "kind".to_owned(),
                message: format!("{kind:?} is not a Gryvia kind"),
            }]));
        };
        let mut errors = Vec::new();
        if name.is_empty() && object.pointer("/metadata/generateName").is_none() {
            errors.push(FieldError {
                path: "metadata.name".to_owned(),
                message: "Required value".to_owned(),
            });
        }
        // CEL rules are evaluated, as the API server does, beside errors of value (a range,
        // a pattern, an enum, a duplicate), but not on an object of the wrong shape (a wrong
        // type, a missing required field, an unknown field), where they would read what is not
        // there.
        // Nor, as the API server, when a value is outside its enum or a string, list or map
        // over its declared bound: the rules' types and cost are estimated from those ("some
        // validation rules were not checked because the object was invalid").
        let mut misshapen = false;
        let mut too_long = Vec::new();
        for e in compiled.schema.iter_errors(object) {
            use jsonschema::error::ValidationErrorKind as K;
            misshapen |= matches!(
                e.kind(),
                K::Type { .. }
                    | K::Required { .. }
                    | K::Enum { .. }
                    | K::MaxLength { .. }
                    | K::MaxItems { .. }
                    | K::MaxProperties { .. }
            );
            let error = field_error(&e);
            if matches!(e.kind(), K::MaxLength { .. }) {
                too_long.push(error.path.clone());
            }
            errors.push(error);
        }
        // A string over its length is only that (the API server checks no pattern of it).
        errors.retain(|e| !(too_long.contains(&e.path) && e.message.contains("should match")));
        let before = errors.len();
        structural_checks(&compiled.openapi, object, "", &mut errors);
        misshapen |= errors[before..]
            .iter()
            .any(|e| e.message == "unknown field");
        if !misshapen
            && let Err(cel_errors) = kube_cel::validate_compiled(&compiled.cel, object, old)
        {
            for e in cel_errors.into_vec() {
                errors.push(FieldError {
                    path: e.field_path.trim_start_matches('.').to_owned(),
                    message: e.message,
                });
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            errors.sort_by(|a, b| a.path.cmp(&b.path).then(a.message.cmp(&b.message)));
            errors.dedup();
            Err(fail(errors))
        }
    }

    /// Validates `object` and decodes it into the typed resource `K`.
    ///
    /// # Errors
    /// [`ValidationErrors`] when the object is invalid or does not decode into `K`.
    pub fn decode<K: serde::de::DeserializeOwned>(
        &self,
        object: &Value,
    ) -> Result<K, ValidationErrors> {
        self.validate(object)?;
        serde_json::from_value(object.clone()).map_err(|e| ValidationErrors {
            kind: object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            errors: vec![FieldError {
                path: String::new(),
                message: e.to_string(),
            }],
        })
    }
}

/// Words an OpenAPI error the way the API server does, with the field in the path.
fn field_error(e: &jsonschema::ValidationError<'_>) -> FieldError {
    use jsonschema::error::ValidationErrorKind as K;
    let path = pointer_to_path(e.instance_path().as_str());
    let value = e.instance().to_string();
    let message = match e.kind() {
        K::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            let path = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            };
            return FieldError {
                path,
                message: "Required value".to_owned(),
            };
        }
        K::Enum { options } => {
            let list: Vec<String> = options
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|v| !v.is_null())
                        .map(ToString::to_string)
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "Unsupported value: {value}: supported values: {}",
                list.join(", ")
            )
        }
        K::Maximum { limit } => {
            format!(
                "Invalid value: {value}: must be less than or equal to {}",
                number(limit)
            )
        }
        K::Minimum { limit } => {
            format!(
                "Invalid value: {value}: must be greater than or equal to {}",
                number(limit)
            )
        }
        K::MaxItems { limit } => format!("Too many: must have at most {limit} items"),
        K::MinItems { limit } => format!("Required value: must have at least {limit} items"),
        K::MaxLength { limit } => format!("Too long: may not be more than {limit} bytes"),
        K::MinLength { limit } => {
            format!("Invalid value: {value}: must be at least {limit} characters")
        }
        K::Pattern { pattern } => format!("Invalid value: {value}: should match '{pattern}'"),
        _ => e.to_string(),
    };
    FieldError { path, message }
}

/// `100.0` -> `100`: schema bounds are floats in the CRD, people write integers.
fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// Parses a YAML stream (one or more documents) into JSON values, skipping empty documents.
///
/// # Errors
/// [`crate::Error::Yaml`] with the parser's message (which names line and column).
pub fn parse_yaml_documents(text: &str) -> crate::Result<Vec<Value>> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| crate::Error::Yaml(e.to_string()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// `/spec/checks/1/type` -> `spec.checks[1].type`.
fn pointer_to_path(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

/// Turns an OpenAPI v3 (Kubernetes structural) schema into a JSON Schema draft 4 one:
/// `nullable: true` becomes a `null` member of `type` (and of `enum`), and
/// `x-kubernetes-int-or-string` becomes `type: [integer, string]`.
fn to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            for (k, v) in map {
                let v = match k.as_str() {
                    "properties" | "definitions" | "patternProperties" => match v {
                        Value::Object(props) => Value::Object(
                            props
                                .iter()
                                .map(|(pk, pv)| (pk.clone(), to_json_schema(pv)))
                                .collect(),
                        ),
                        other => other.clone(),
                    },
                    "default" | "example" | "enum" | "x-kubernetes-validations" => v.clone(),
                    _ => to_json_schema(v),
                };
                out.insert(k.clone(), v);
            }
            if out.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                out.remove("anyOf");
                out.insert("type".to_owned(), serde_json::json!(["integer", "string"]));
            }
            if out.get("nullable") == Some(&Value::Bool(true)) {
                out.remove("nullable");
                match out.get("type").cloned() {
                    Some(Value::String(t)) => {
                        out.insert("type".to_owned(), serde_json::json!([t, "null"]));
                    }
                    Some(Value::Array(mut ts)) => {
                        ts.push(Value::String("null".to_owned()));
                        out.insert("type".to_owned(), Value::Array(ts));
                    }
                    _ => {}
                }
                if let Some(Value::Array(values)) = out.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_json_schema).collect()),
        other => other.clone(),
    }
}

/// Fields every object has that CRD schemas leave implicit.
const ROOT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Reports fields the schema does not declare (where it does not allow unknown fields) and
/// duplicates in lists declared `x-kubernetes-list-type: map` or `set`, as the API server does.
fn structural_checks(schema: &Value, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (k, v) in map {
                    let child = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    match props.get(k) {
                        // metadata is validated by the API server's ObjectMeta rules.
                        Some(_) if path.is_empty() && k == "metadata" => {}
                        Some(s) => structural_checks(s, v, &child, errors),
                        None if path.is_empty() && ROOT_FIELDS.contains(&k.as_str()) => {}
                        None => errors.push(FieldError {
                            path: child,
                            message: "unknown field".to_owned(),
                        }),
                    }
                }
            } else if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (k, v) in map {
                    structural_checks(add, v, &format!("{path}.{k}"), errors);
                }
            }
        }
        Value::Array(items) => {
            list_duplicates(schema, items, path, errors);
            if let Some(item_schema) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    structural_checks(item_schema, v, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

/// Duplicate entries of a `map` list (same key fields) or a `set` list (same value).
fn list_duplicates(schema: &Value, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
    let identity = |item: &Value| -> Option<Value> {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Some(item.clone()),
            Some("map") => {
                let keys = schema.get("x-kubernetes-list-map-keys")?.as_array()?;
                let mut id = serde_json::Map::new();
                for k in keys.iter().filter_map(Value::as_str) {
                    id.insert(k.to_owned(), item.get(k).cloned().unwrap_or(Value::Null));
                }
                Some(Value::Object(id))
            }
            _ => None,
        }
    };
    // Each duplicated value once, at its first repeat, as the API server reports them.
    let mut seen: Vec<Value> = Vec::new();
    let mut reported: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(id) = identity(item) else { return };
        if !seen.contains(&id) {
            seen.push(id);
        } else if !reported.contains(&id) {
            errors.push(FieldError {
                path: format!("{path}[{i}]"),
                message: format!("Duplicate value: {id}"),
            });
            reported.push(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &Validator, spec: Value) -> Vec<String> {
        let hook = serde_json::json!({"apiVersion": crate::API_VERSION, "kind": "GryviaJobHook",
            "metadata": {"name": "h", "namespace": "d"}, "spec": spec});
        v.validate(&hook)
            .err()
            .map(|e| e.errors.into_iter().map(|f| f.path).collect())
            .unwrap_or_default()
    }

    /// As the API server (found by the differential validation test): CEL rules are checked
    /// beside a value out of range, not on a wrong type or beside an unknown field, and each
    /// duplicate of a set once.
    #[test]
    fn cel_rules_run_beside_range_errors_but_not_on_a_misshapen_object() {
        let v = Validator::new().unwrap();
        let base = serde_json::json!({"events": ["Failed"], "url": "http://h.example/x", "secretRef": {"name": "s"}});
        let mut out_of_range = base.clone();
        out_of_range["timeoutSeconds"] = serde_json::json!(430);
        assert_eq!(paths(&v, out_of_range), ["spec", "spec.timeoutSeconds"]);
        let mut wrong_type = base.clone();
        wrong_type["timeoutSeconds"] = serde_json::json!("soon");
        assert_eq!(paths(&v, wrong_type), ["spec.timeoutSeconds"]);
        let mut unknown = base;
        unknown["bogus"] = serde_json::json!(1);
        assert_eq!(paths(&v, unknown), ["spec.bogus"]);
        let collector = serde_json::json!({"apiVersion": crate::API_VERSION,
            "kind": "GryviaCollectorConfig", "metadata": {"name": "c"},
            "spec": {"programs": ["tcp-flows", "tcp-flows", "cgroup-traffic", "tcp-flows"]}});
        let e = v.validate(&collector).unwrap_err();
        let dup: Vec<&str> = e.errors.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(dup, ["spec.programs[1]"], "{e}");
    }

    #[test]
    fn json_pointers_become_dotted_paths() {
        assert_eq!(
            pointer_to_path("/spec/checks/1/type"),
            "spec.checks[1].type"
        );
        assert_eq!(pointer_to_path(""), "");
        assert_eq!(
            pointer_to_path("/metadata/labels/a~1b"),
            "metadata.labels.a/b"
        );
    }

    #[test]
    fn nullable_becomes_a_null_type() {
        let s = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "integer", "nullable": true},
            "b": {"type": "string", "enum": ["x"], "nullable": true}}});
        let j = to_json_schema(&s);
        assert_eq!(
            j["properties"]["a"]["type"],
            serde_json::json!(["integer", "null"])
        );
        assert_eq!(j["properties"]["b"]["enum"], serde_json::json!(["x", null]));
    }
}
