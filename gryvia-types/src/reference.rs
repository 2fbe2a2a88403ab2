//! The CRD reference: one Markdown page per kind, generated from the same schemas as the
//! CRDs (every field, its type, whether it is required, its validation and its doc).
//!
//! `docs/reference/` holds the output of [`pages`]; a test fails when it is stale
//! (`cargo run -p gryvia-cli -- crds --out-dir deploy/crds --reference-dir docs/reference`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The reference pages: `(file name, Markdown)` for every kind, then the index `README.md`.
pub fn pages() -> Vec<(String, String)> {
    let crds = crate::crds::all();
    let mut out: Vec<(String, String)> = crds.iter().map(|c| (page_name(c), page(c))).collect();
    out.push(("README.md".to_owned(), index(&crds)));
    out
}

/// The file of a kind's page: `<kind in lower case>.md`.
pub fn page_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.md", crd.spec.names.kind.to_lowercase())
}

fn index(crds: &[CustomResourceDefinition]) -> String {
    let mut s = String::from(
        "# CRD reference\n\n\
         Generated from the schemas the API server validates with (`gryvia crds --reference-dir`);\n\
         a test fails when these pages are stale. Each page lists every field with its type,\n\
         whether it is required, its validation and its documentation; the rules that span\n\
         fields (CEL) come with the messages the API server answers with.\n\n\
         | Kind | Short name | Scope | What it is |\n| --- | --- | --- | --- |\n",
    );
    for c in crds {
        let doc = schema(c)
            .and_then(|v| {
                v["properties"]["spec"]["description"]
                    .as_str()
                    .map(first_sentence)
            })
            .unwrap_or_default();
        s.push_str(&format!(
            "| [{kind}]({file}) | {short} | {scope} | {doc} |\n",
            kind = c.spec.names.kind,
            file = page_name(c),
            short = c
                .spec
                .names
                .short_names
                .as_ref()
                .map(|n| n.join(", "))
                .unwrap_or_default(),
            scope = c.spec.scope,
            doc = cell(&doc),
        ));
    }
    s
}

fn schema(crd: &CustomResourceDefinition) -> Option<Value> {
    let v = crd.spec.versions.first()?;
    serde_json::to_value(v.schema.as_ref()?.open_api_v3_schema.as_ref()?).ok()
}

fn first_sentence(text: &str) -> String {
    let one = text.replace('\n', " ");
    match one.find(". ") {
        Some(i) => one[..=i].to_owned(),
        None => one,
    }
}

/// Text fit for a table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

fn page(crd: &CustomResourceDefinition) -> String {
    let names = &crd.spec.names;
    let version = crd
        .spec
        .versions
        .first()
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let mut s = format!(
        "# {kind}\n\n`{group}/{version}`, {scope}, plural `{plural}`{short}.\n\n",
        kind = names.kind,
        group = crd.spec.group,
        scope = crd.spec.scope.to_lowercase(),
        plural = names.plural,
        short = names
            .short_names
            .as_ref()
            .map(|n| format!(", short name `{}`", n.join("`, `")))
            .unwrap_or_default(),
    );
    let Some(root) = schema(crd) else {
        return s;
    };
    if let Some(d) = root["properties"]["spec"]["description"].as_str() {
        s.push_str(d);
        s.push_str("\n\n");
    }
    for part in ["spec", "status"] {
        let node = &root["properties"][part];
        if node.is_null() {
            continue;
        }
        let mut rows = Vec::new();
        let required = root["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x == part));
        walk(part, node, required, &mut rows);
        s.push_str(&format!(
            "## {part}\n\n| Field | Type | Required | Validation | Description |\n| --- | --- | --- | --- | --- |\n"
        ));
        for r in rows {
            s.push_str(&r);
        }
        s.push('\n');
    }
    s
}

/// One row per field under `node` (at `path`), depth first in schema order.
fn walk(path: &str, node: &Value, required: bool, rows: &mut Vec<String>) {
    rows.push(format!(
        "| `{path}` | {ty} | {req} | {val} | {doc} |\n",
        ty = type_of(node),
        req = if required { "yes" } else { "" },
        val = cell(&validation(node)),
        doc = cell(node["description"].as_str().unwrap_or_default()),
    ));
    if let Some(props) = node["properties"].as_object() {
        let req: Vec<&str> = node["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, child) in props {
            walk(
                &format!("{path}.{name}"),
                child,
                req.contains(&name.as_str()),
                rows,
            );
        }
    }
    let items = &node["items"];
    if items.is_object() && (items["properties"].is_object() || items["items"].is_object()) {
        walk(&format!("{path}[]"), items, false, rows);
    }
    let values = &node["additionalProperties"];
    if values.is_object() && values["properties"].is_object() {
        walk(&format!("{path}{{}}"), values, false, rows);
    }
}

fn type_of(node: &Value) -> String {
    if node["x-kubernetes-int-or-string"] == true {
        return "int or string".to_owned();
    }
    let ty = node["type"].as_str().unwrap_or("any");
    let base = match ty {
        "array" => format!("[]{}", type_of(&node["items"])),
        "object" if node["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&node["additionalProperties"]))
        }
        "object" if node["properties"].is_null() => "object (any)".to_owned(),
        other => match node["format"].as_str() {
            Some(f) => format!("{other} ({f})"),
            None => other.to_owned(),
        },
    };
    if node["nullable"] == true {
        format!("{base}, nullable")
    } else {
        base
    }
}

fn validation(node: &Value) -> String {
    let mut parts: Vec<String> = Vec::new();
    let n = |k: &str| node[k].as_f64().map(|x| x.to_string());
    if let Some(e) = node["enum"].as_array() {
        let vals: Vec<String> = e.iter().map(|v| format!("`{}`", plain(v))).collect();
        parts.push(format!("one of {}", vals.join(", ")));
    }
    for (k, what) in [
        ("minimum", ">="),
        ("maximum", "<="),
        ("minLength", "length >="),
        ("maxLength", "length <="),
        ("minItems", "items >="),
        ("maxItems", "items <="),
        ("minProperties", "entries >="),
        ("maxProperties", "entries <="),
    ] {
        if let Some(x) = n(k) {
            parts.push(format!("{what} {x}"));
        }
    }
    if let Some(p) = node["pattern"].as_str() {
        parts.push(format!("matches `{p}`"));
    }
    if !node["default"].is_null() {
        parts.push(format!("default `{}`", plain(&node["default"])));
    }
    if let Some(t) = node["x-kubernetes-list-type"].as_str() {
        let keys = node["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| {
                let k: Vec<&str> = k.iter().filter_map(Value::as_str).collect();
                format!(" by {}", k.join(", "))
            })
            .unwrap_or_default();
        parts.push(format!("list {t}{keys}"));
    }
    if let Some(rules) = node["x-kubernetes-validations"].as_array() {
        for r in rules {
            let rule = r["rule"].as_str().unwrap_or_default();
            match r["message"].as_str() {
                Some(m) => parts.push(format!("rule `{rule}`: {m}")),
                None => parts.push(format!("rule `{rule}`")),
            }
        }
    }
    let items = &node["items"];
    if items.is_object() && items["properties"].is_null() {
        let each = validation(items);
        if !each.is_empty() {
            parts.push(format!("each: {each}"));
        }
    }
    parts.join("; ")
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_lists_nested_fields_with_their_validation() {
        let crd = crate::crds::by_kind("GryviaReservation").unwrap_or_else(|e| panic!("{e}"));
        let p = page(&crd);
        assert!(p.starts_with("# GryviaReservation\n\n`gryvia.io/v1alpha1`, cluster"));
        assert!(
            p.contains(
                "| `spec.owner.type` | string | yes | one of `team`, `tenant`, `project`, `user` |"
            ),
            "{p}"
        );
        assert!(
            p.contains(
                "| `spec.schedule.leadMinutes` | integer (int32), nullable |  | >= 0; <= 1440 |"
            ),
            "{p}"
        );
        assert!(p.contains(r"rule `self.type != 'immediate' \|\| has(self.endTime)`: schedule.endTime is required when schedule.type is immediate"), "{p}");
        assert!(p.contains("## status"));
        let names: Vec<String> = pages().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), crate::crds::all().len() + 1);
        assert!(names.contains(&"gryviareservation.md".to_owned()));
    }
}
