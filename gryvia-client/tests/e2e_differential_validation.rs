//! Differential validation (issue #25): objects of every kind generated from the CRD schemas,
//! valid ones and mutations of them (wrong types, out of range, unknown fields, broken
//! patterns and enums, missing required fields, duplicate list keys; CEL rules broken by the
//! mix), each judged by the offline validator (`gryvia_types::validation`, what `gryvia
//! validate` and the Python SDK run) and by the real API server (a server-side dry-run create
//! with `fieldValidation=Strict`). They must agree on accept or reject, and a rejection must
//! name a common field.
//!
//! The generator is seeded (`GRYVIA_DIFF_SEED`, default 25) and draws `GRYVIA_DIFF_PER_KIND`
//! objects per kind (default 40 in CI; `scripts/differential-validation` runs 5,000), half
//! valid by construction of the schema and half with one mutation. Every disagreement is
//! printed, and the test fails on any.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers panic on broken fixtures"
)]

use std::collections::BTreeSet;
use std::fmt::Write as _;

use futures::StreamExt;
use gryvia_types::validation::Validator;
use http_body_util::BodyExt;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

/// A seeded splitmix64: every choice of the generator, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = u64::try_from(i128::from(hi) - i128::from(lo) + 1).unwrap_or(u64::MAX);
        lo.saturating_add(i64::try_from(self.below(span)).unwrap_or(0))
    }
}

/// The kinds of mutation, one per invalid object.
#[derive(Clone, Copy, Debug)]
enum Mutation {
    WrongType,
    OutOfRange,
    UnknownField,
    DropRequired,
    DuplicateKey,
}

const MUTATIONS: [Mutation; 5] = [
    Mutation::WrongType,
    Mutation::OutOfRange,
    Mutation::UnknownField,
    Mutation::DropRequired,
    Mutation::DuplicateKey,
];

struct Gen {
    rng: Rng,
    runner: TestRunner,
    /// Schema nodes visited so far in this object.
    visited: u64,
    /// Mutate at this node (and the mutation), if any.
    target: Option<(u64, Mutation)>,
    /// What was mutated, for the report.
    done: Option<String>,
}

impl Gen {
    fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from((seed.rotate_left(u32::try_from(i).unwrap()) & 0xff) ^ (i as u64))
                .unwrap();
        }
        Gen {
            rng: Rng(seed),
            runner: TestRunner::new_with_rng(
                Config::default(),
                TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
            ),
            visited: 0,
            target: None,
            done: None,
        }
    }

    fn regex_string(&mut self, pattern: &str) -> Option<String> {
        let strategy = proptest::string::string_regex(pattern).ok()?;
        Some(strategy.new_tree(&mut self.runner).ok()?.current())
    }

    /// A value of `schema` at `path`; at the target node, the mutation instead.
    fn value(&mut self, schema: &Value, path: &str, depth: u32) -> Value {
        self.visited += 1;
        if let Some((at, m)) = self.target
            && at == self.visited
            && let Some(v) = self.mutate(schema, path, m, depth)
        {
            self.done = Some(format!("{m:?} at {path}"));
            return v;
        }
        self.valid(schema, path, depth)
    }

    fn valid(&mut self, schema: &Value, path: &str, depth: u32) -> Value {
        if let Some(options) = schema.get("enum").and_then(Value::as_array)
            && !options.is_empty()
        {
            let i = self.rng.below(options.len() as u64) as usize;
            return options[i].clone();
        }
        if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            return json!(self.rng.range(1, 64));
        }
        match schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object")
        {
            "object" => self.object(schema, path, depth),
            "array" => self.array(schema, path, depth),
            "string" => json!(self.string(schema)),
            "integer" => {
                // Bounds may be written as floats (`100.0`).
                let bound = |k: &str| schema.get(k).and_then(Value::as_f64).map(|f| f as i64);
                let lo = bound("minimum").unwrap_or(0);
                let hi = bound("maximum").unwrap_or(lo.saturating_add(1_000));
                json!(self.rng.range(lo, hi.min(lo.saturating_add(1_000_000))))
            }
            "number" => {
                let lo = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
                let hi = schema
                    .get("maximum")
                    .and_then(Value::as_f64)
                    .unwrap_or(lo + 100.0);
                let f = (self.rng.below(1_000) as f64) / 1_000.0;
                json!(lo + (hi - lo) * f)
            }
            "boolean" => json!(self.rng.chance(50)),
            _ => Value::Null,
        }
    }

    fn string(&mut self, schema: &Value) -> String {
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
        let max = schema
            .get("maxLength")
            .and_then(Value::as_u64)
            .unwrap_or(24);
        match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => return "2026-12-05T10:20:30Z".to_owned(),
            Some("date") => return "2026-12-05".to_owned(),
            _ => {}
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
            for _ in 0..8 {
                if let Some(s) = self.regex_string(p)
                    && (min..=max).contains(&(s.chars().count() as u64))
                {
                    return s;
                }
            }
        }
        let len = self.rng.range(
            i64::try_from(min.max(1)).unwrap_or(1),
            i64::try_from(max.min(min.max(1) + 12)).unwrap_or(12),
        );
        (0..len)
            .map(|_| char::from(b'a' + u8::try_from(self.rng.below(26)).unwrap()))
            .collect()
    }

    fn object(&mut self, schema: &Value, path: &str, depth: u32) -> Value {
        let mut out = Map::new();
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, s) in props {
                if required.contains(k.as_str()) || (depth < 6 && self.rng.chance(45)) {
                    let v = self.value(s, &format!("{path}.{k}"), depth + 1);
                    out.insert(k.clone(), v);
                }
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            for i in 0..self.rng.below(3) {
                let v = self.value(extra, &format!("{path}.k{i}"), depth + 1);
                out.insert(format!("k{i}"), v);
            }
        }
        Value::Object(out)
    }

    fn array(&mut self, schema: &Value, path: &str, depth: u32) -> Value {
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(3)
            .min(3);
        let n = self.rng.range(
            i64::try_from(min).unwrap_or(0),
            i64::try_from(max.max(min)).unwrap_or(0),
        );
        let items = schema.get("items").cloned().unwrap_or(json!({}));
        let mut out: Vec<Value> = Vec::new();
        for i in 0..n {
            let v = self.value(&items, &format!("{path}[{i}]"), depth + 1);
            out.push(v);
        }
        // A valid list has distinct keys (map) or distinct items (set).
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => {
                let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .map(|k| {
                        k.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                let mut seen = BTreeSet::new();
                out.retain(|o| {
                    seen.insert(keys.iter().map(|k| o[k].to_string()).collect::<Vec<_>>())
                });
            }
            Some("set") => {
                let mut seen = BTreeSet::new();
                out.retain(|o| seen.insert(o.to_string()));
            }
            _ => {}
        }
        Value::Array(out)
    }

    /// `m` applied at a node of `schema`, or `None` when it does not apply there (the node
    /// is then generated valid and the mutation tried at a later node).
    fn mutate(&mut self, schema: &Value, path: &str, m: Mutation, depth: u32) -> Option<Value> {
        let ty = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("object");
        let int_or_string = schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
        let retry = |g: &mut Gen| {
            // Try the same mutation at the next node.
            g.target = g.target.map(|(at, m)| (at + 1, m));
            None
        };
        match m {
            Mutation::WrongType => {
                if int_or_string {
                    return Some(json!(true));
                }
                Some(match ty {
                    "string" => json!(12),
                    "integer" | "number" => json!("twelve"),
                    "boolean" => json!("yes"),
                    "array" => json!({"a": 1}),
                    _ => json!([1, 2]),
                })
            }
            Mutation::OutOfRange => {
                let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
                if let Some(min) = bound("minimum") {
                    return Some(if ty == "integer" {
                        json!(min as i64 - 1)
                    } else {
                        json!(min - 1.0)
                    });
                }
                if let Some(max) = bound("maximum") {
                    return Some(if ty == "integer" {
                        json!(max as i64 + 1)
                    } else {
                        json!(max + 1.0)
                    });
                }
                if schema.get("enum").is_some() {
                    return Some(json!("not-one-of-them"));
                }
                if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                    return Some(json!("x".repeat(usize::try_from(max + 1).unwrap())));
                }
                if schema.get("pattern").is_some() && ty == "string" {
                    return Some(json!("Not A Match!"));
                }
                if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                    && max <= 64
                {
                    let items = schema.get("items").cloned().unwrap_or(json!({}));
                    let list: Vec<Value> = (0..=max)
                        .map(|i| self.valid(&items, &format!("{path}[{i}]"), depth + 1))
                        .collect();
                    return Some(Value::Array(list));
                }
                retry(self)
            }
            Mutation::UnknownField => {
                if ty == "object"
                    && schema.get("properties").is_some()
                    && schema.get("additionalProperties").is_none()
                {
                    let mut v = self.valid(schema, path, depth);
                    v["bogusField"] = json!(1);
                    return Some(v);
                }
                retry(self)
            }
            Mutation::DropRequired => {
                let required: Vec<String> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| {
                        r.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default();
                if ty == "object" && !required.is_empty() {
                    let mut v = self.valid(schema, path, depth);
                    let drop = &required[self.rng.below(required.len() as u64) as usize];
                    v.as_object_mut().unwrap().remove(drop);
                    return Some(v);
                }
                retry(self)
            }
            Mutation::DuplicateKey => {
                let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
                if ty == "array" && matches!(list_type, Some("map" | "set")) {
                    let items = schema.get("items").cloned().unwrap_or(json!({}));
                    let one = self.valid(&items, &format!("{path}[0]"), depth + 1);
                    return Some(json!([one.clone(), one]));
                }
                retry(self)
            }
        }
    }

    /// Object `i` of `kind`: valid for even `i`, one mutation for odd `i`.
    fn object_of(
        &mut self,
        kind: &str,
        schema: &Value,
        i: u64,
        namespace: Option<&str>,
    ) -> (Value, String) {
        let spec_schema = &schema["properties"]["spec"];
        let mut spec = None;
        // A mutation that finds no node it applies to is drawn again (up to 8 times).
        for _ in 0..8 {
            self.visited = 0;
            self.done = None;
            self.target = (i % 2 == 1).then(|| {
                let m = MUTATIONS[self.rng.below(MUTATIONS.len() as u64) as usize];
                (1 + self.rng.below(8), m)
            });
            spec = (!spec_schema.is_null()).then(|| self.value(spec_schema, "spec", 0));
            if self.target.is_none() || self.done.is_some() {
                break;
            }
        }
        let mut metadata = json!({"name": format!("d-{}-{i}", kind.to_lowercase())});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        let mut obj =
            json!({"apiVersion": gryvia_types::API_VERSION, "kind": kind, "metadata": metadata});
        if let Some(spec) = spec {
            obj["spec"] = spec;
        }
        let what = self.done.clone().unwrap_or_else(|| {
            if self.target.is_some() {
                "mutation found no node (valid)".to_owned()
            } else {
                "valid".to_owned()
            }
        });
        (obj, what)
    }
}

/// The API server's verdict on a dry-run create: `Ok` or the field paths it names (and its
/// message).
async fn server_verdict(
    client: &kube::Client,
    plural: &str,
    namespace: Option<&str>,
    obj: &Value,
) -> Result<(), (BTreeSet<String>, String)> {
    let base = format!("/apis/{}/{}", gryvia_types::GROUP, gryvia_types::VERSION);
    let url = match namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/{plural}?dryRun=All&fieldValidation=Strict"),
        None => format!("{base}/{plural}?dryRun=All&fieldValidation=Strict"),
    };
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(obj).unwrap())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .expect("the API server answers");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    if (200..300).contains(&code) {
        return Ok(());
    }
    let status: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = status["message"].as_str().unwrap_or("").to_owned();
    let mut paths: BTreeSet<String> = status["details"]["causes"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|c| c["field"].as_str())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // Strict decoding names unknown fields in the message only: `unknown field "spec.x"`.
    for part in message.split("unknown field \"").skip(1) {
        if let Some(p) = part.split('"').next() {
            paths.insert(p.to_owned());
        }
    }
    Err((paths, format!("{code}: {message}")))
}

/// Whether two field paths name the same field or one contains the other (the API server
/// names a missing field's parent in some messages, the field itself in others).
fn related(a: &str, b: &str) -> bool {
    let norm = |s: &str| s.trim_start_matches('.').replace("[", ".[").to_owned();
    let (a, b) = (norm(a), norm(b));
    a == b
        || a.starts_with(&format!("{b}."))
        || b.starts_with(&format!("{a}."))
        || a.is_empty()
        || b.is_empty()
}

/// What the two validators said, counted.
#[derive(Default)]
struct Tally {
    accepted: u64,
    rejected: u64,
    same_fields: u64,
    mutated: u64,
    unmutated_rejected: u64,
    disagreements: u64,
    report: String,
}

type Judged = (
    String,
    Value,
    String,
    Result<(), (BTreeSet<String>, String)>,
);

/// Each object judged offline and compared with the server's verdict.
fn tally(validator: &Validator, results: Vec<Judged>) -> Tally {
    let mut t = Tally::default();
    for (kind, obj, what, server) in results {
        if what.contains(" at ") {
            t.mutated += 1;
        } else if server.is_err() {
            t.unmutated_rejected += 1;
        }
        let offline = validator.validate(&obj);
        let problem = match (&offline, &server) {
            (Ok(()), Ok(())) => {
                t.accepted += 1;
                None
            }
            (Err(e), Err((paths, message))) => {
                t.rejected += 1;
                let ours: Vec<String> = e.errors.iter().map(|f| f.path.clone()).collect();
                if std::env::var("GRYVIA_DIFF_SHOW").is_ok() {
                    println!("{what}: offline {ours:?} server {paths:?}");
                    if std::env::var("GRYVIA_DIFF_SHOW").as_deref() == Ok("2") {
                        println!("  server: {message}\n  offline: {e}");
                    }
                }
                let common =
                    paths.is_empty() || ours.iter().any(|o| paths.iter().any(|p| related(o, p)));
                // The same fields exactly (the server's `<nil>` left out: a cause of no field).
                let server_fields: BTreeSet<&str> = paths
                    .iter()
                    .map(String::as_str)
                    .filter(|p| *p != "<nil>")
                    .collect();
                let offline_fields: BTreeSet<&str> = ours.iter().map(String::as_str).collect();
                if server_fields == offline_fields {
                    t.same_fields += 1;
                }
                (!common).then(|| format!("different fields: offline {ours:?}, server {paths:?}"))
            }
            (Ok(()), Err((_, message))) => {
                Some(format!("offline accepts, server rejects: {message}"))
            }
            (Err(e), Ok(())) => Some(format!("offline rejects, server accepts: {e}")),
        };
        if let Some(p) = problem {
            t.disagreements += 1;
            let _ = writeln!(t.report, "- {kind} ({what}): {p}\n  object: {obj}");
        }
    }
    t
}

#[tokio::test]
async fn the_offline_validator_and_the_api_server_agree_on_generated_objects_of_every_kind() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let per_kind: u64 = std::env::var("GRYVIA_DIFF_PER_KIND")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let seed: u64 = std::env::var("GRYVIA_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25);
    let ns = gryvia_testsupport::TestNamespace::create(&client, "diffval")
        .await
        .unwrap();
    let validator = Validator::new().unwrap();
    let mut generator = Gen::new(seed);
    let mut cases = Vec::new();
    for crd in gryvia_types::crds::all() {
        let kind = crd.spec.names.kind.clone();
        let plural = crd.spec.names.plural.clone();
        let namespaced = crd.spec.scope == "Namespaced";
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        for i in 0..per_kind {
            let (obj, what) =
                generator.object_of(&kind, &schema, i, namespaced.then_some(ns.name.as_str()));
            cases.push((kind.clone(), plural.clone(), namespaced, obj, what));
        }
    }
    let total = cases.len();
    let results: Vec<_> = futures::stream::iter(cases.into_iter().map(
        |(kind, plural, namespaced, obj, what)| {
            let client = client.clone();
            let ns = ns.name.clone();
            async move {
                let server =
                    server_verdict(&client, &plural, namespaced.then_some(ns.as_str()), &obj).await;
                (kind, obj, what, server)
            }
        },
    ))
    .buffer_unordered(8)
    .collect()
    .await;

    let Tally {
        accepted,
        rejected,
        same_fields,
        mutated,
        unmutated_rejected,
        disagreements,
        report,
    } = tally(&validator, results);
    println!(
        "differential validation: {total} objects ({per_kind} per kind, seed {seed}; {mutated} \
         mutated; {unmutated_rejected} of the others rejected by the server all the same, by a CEL \
         rule or a constraint the generator does not model): {accepted} accepted by both, \
         {rejected} rejected by both ({same_fields} naming exactly the same fields), \
         {disagreements} disagreements"
    );
    assert!(
        disagreements == 0,
        "{disagreements} disagreements:\n{report}"
    );
    assert!(
        accepted > 0 && rejected > 0,
        "the generator made both kinds of object"
    );
}
