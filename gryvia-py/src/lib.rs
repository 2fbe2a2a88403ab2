//! `gryvia._gryvia`: the Python bindings of Gryvia (pyo3), packaged by maturin as `gryvia`.
//!
//! What this crate is: a thin layer that moves values between Python and the Rust libraries.
//! Every Gryvia kind is validated by `gryvia_types::validation` (the CRD schemas and their CEL
//! rules, with the API server's wording) and decoded through its typed Rust struct; the policy
//! functions are those of `gryvia_reconcile`, the same code the operators run. What it is not:
//! it holds no domain logic of its own.

mod client;
mod kind_classes;
mod list_dicts;
mod pyjson;
mod rawjson;
mod view;

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use gryvia_reconcile::Reconcile;
use gryvia_types::validation::{ValidationErrors, Validator};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde_json::Value;

use crate::list_dicts::ListDicts;
use crate::view::Object;

create_exception!(
    _gryvia,
    GryviaError,
    PyException,
    "Base class of every Gryvia error."
);
create_exception!(
    _gryvia,
    ValidationError,
    GryviaError,
    "An object or value is invalid; the message names the field."
);
create_exception!(
    _gryvia,
    ApiError,
    GryviaError,
    "The Kubernetes API refused a request."
);
create_exception!(
    _gryvia,
    NotFoundError,
    ApiError,
    "The object does not exist."
);
create_exception!(
    _gryvia,
    ConflictError,
    ApiError,
    "The object exists already or was changed meanwhile."
);

pub(crate) fn validator() -> PyResult<&'static Validator> {
    static V: OnceLock<Result<Validator, String>> = OnceLock::new();
    V.get_or_init(|| Validator::new().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| GryviaError::new_err(format!("compile the schemas: {e}")))
}

pub(crate) fn invalid(e: &ValidationErrors) -> PyErr {
    ValidationError::new_err(e.to_string())
}

/// Python value -> JSON.
pub(crate) fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Value::from(i));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| ValidationError::new_err("a number is not finite"));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(r) = obj.extract::<PyRef<'_, Resource>>() {
        return Ok(r.value().clone());
    }
    if let Ok(o) = obj.extract::<PyRef<'_, Object>>() {
        return Ok(o.value()?.into_owned());
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in d.iter() {
            let key: String = k
                .extract()
                .map_err(|_| ValidationError::new_err("dictionary keys must be strings"))?;
            map.insert(key, to_json(&v)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<pyo3::types::PyTuple>() {
        return t
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    Err(ValidationError::new_err(format!(
        "cannot turn a {} into JSON",
        obj.get_type().name()?
    )))
}

/// JSON -> Python value (dicts and lists, not wrappers).
pub(crate) fn to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any().unbind(),
            None => n
                .as_f64()
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for item in a {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, val) in o {
                d.set_item(k, to_py(py, val)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// `batch_size` -> `batchSize`.
fn camel(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Validates `value` as a Gryvia object and returns it as its typed struct writes it (defaults
/// filled in).
fn normalize(value: &Value) -> PyResult<Value> {
    validator()?.validate(value).map_err(|e| invalid(&e))?;
    gryvia_types::crds::typed_value(value.clone()).map_err(|e| {
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        ValidationError::new_err(format!("{kind}: {e}"))
    })
}

/// A Gryvia object (any kind), validated like the API server validates it; or an object of any
/// other kind the server returned, asked for as an object (`dicts=False`).
///
/// Build one with `Resource(dict)`, `Resource.from_dict(d)` or `Resource.from_yaml(text)`;
/// read fields as attributes (`job.spec.retry_limit` or `job.spec.retryLimit`) or items
/// (`job["spec"]`); get plain data back with `to_dict()` / `to_yaml()`. Two resources are equal
/// when their data is.
#[pyclass(module = "gryvia._gryvia", frozen, subclass)]
pub struct Resource {
    /// The object as the server sent it (a list's item, a get's or a watch's), kept as its
    /// JSON: a list of thousands costs a scan of the body, not a decode of every field. Fields
    /// are read from the text (`view`); it is parsed whole only when the whole is needed
    /// (equality, YAML, JSON).
    raw: Option<Raw>,
    /// The object, parsed (or given), shared with the views of its nested objects.
    value: OnceLock<Arc<Value>>,
}

/// The `apiVersion` and `kind` of the objects of a list or watch, which a list's items leave
/// out (those of built-in kinds); shared by them all.
pub(crate) struct TypeMeta {
    pub(crate) api_version: Box<str>,
    pub(crate) kind: Box<str>,
}

impl TypeMeta {
    pub(crate) fn new(api_version: &str, kind: &str) -> Arc<Self> {
        Arc::new(TypeMeta {
            api_version: api_version.into(),
            kind: kind.into(),
        })
    }
}

/// One object's JSON as the server sent it, and its `apiVersion` and `kind`.
struct Raw {
    json: Arc<str>,
    meta: Arc<TypeMeta>,
    /// The list it came in and its place there, for `to_dict()` a batch at a time.
    list: Option<(Arc<ListDicts>, usize)>,
}

impl Resource {
    /// A resource of `value` (a Gryvia object, checked already; or any object the server
    /// returned).
    pub(crate) fn new(value: Value) -> Self {
        Resource {
            raw: None,
            value: OnceLock::from(Arc::new(value)),
        }
    }

    /// A resource of `meta`'s kind kept as the server's `json` (valid JSON: a list's item as
    /// the list's scan found it) until it is read; `list` is the list it is an item of, if any
    /// (it then takes its place in it).
    pub(crate) fn unparsed(
        json: &str,
        meta: &Arc<TypeMeta>,
        list: Option<&Arc<ListDicts>>,
    ) -> Self {
        let json: Arc<str> = json.into();
        let list = list.map(|l| (l.clone(), l.push(json.clone())));
        Resource {
            raw: Some(Raw {
                json,
                meta: meta.clone(),
                list,
            }),
            value: OnceLock::new(),
        }
    }

    /// The object (parsed on first use).
    pub(crate) fn value(&self) -> &Value {
        self.root()
    }

    /// A view of the whole object: of the server's JSON while it was never parsed.
    fn top(&self) -> Object {
        match (&self.raw, self.value.get()) {
            (Some(raw), None) => Object::raw(raw.json.clone()),
            _ => Object::parsed(self.root().clone()),
        }
    }

    /// `metadata.<key>` when it is a string, read as every field is (`top`).
    fn metadata_str(&self, key: &str) -> PyResult<Option<String>> {
        let Some(meta) = self.top().locate("metadata")? else {
            return Ok(None);
        };
        let Some(at) = meta.locate(key)? else {
            return Ok(None);
        };
        Ok(at.value()?.as_str().map(str::to_owned))
    }

    /// What a list's items leave out and every object of their kind has (`apiVersion`,
    /// `kind`), for an object kept as the server's JSON.
    fn left_out(&self, key: &str) -> Option<&str> {
        let raw = self.raw.as_ref()?;
        match key {
            "apiVersion" => Some(&raw.meta.api_version),
            "kind" => Some(&raw.meta.kind),
            _ => None,
        }
    }

    /// The object, parsed on first use, as the views of its nested objects share it.
    fn root(&self) -> &Arc<Value> {
        self.value.get_or_init(|| {
            let Some(raw) = &self.raw else {
                return Arc::new(Value::Null);
            };
            // The JSON was scanned as one value of the list already: it parses.
            let mut v: Value = serde_json::from_str(&raw.json).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                for key in ["apiVersion", "kind"] {
                    if let (false, Some(given)) = (m.contains_key(key), self.left_out(key)) {
                        m.insert(key.to_owned(), given.into());
                    }
                }
            }
            Arc::new(v)
        })
    }
}

#[pymethods]
impl Resource {
    #[new]
    fn py_new(data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Resource::new(normalize(&to_json(data)?)?))
    }

    /// Builds and validates a resource from a dict, as its kind's class.
    #[staticmethod]
    fn from_dict(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        kind_classes::typed_object(py, normalize(&to_json(data)?)?)
    }

    /// Builds and validates a resource from YAML (one document).
    #[staticmethod]
    fn from_yaml(py: Python<'_>, text: &str) -> PyResult<Py<PyAny>> {
        let docs = gryvia_types::validation::parse_yaml_documents(text)
            .map_err(|e| ValidationError::new_err(format!("YAML: {e}")))?;
        match docs.as_slice() {
            [one] => kind_classes::typed_object(py, normalize(one)?),
            [] => Err(ValidationError::new_err("YAML: no document")),
            _ => Err(ValidationError::new_err(
                "YAML: several documents; use gryvia.load_all",
            )),
        }
    }

    /// The object as plain Python data (dicts, lists, strings, numbers).
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match (&self.raw, self.value.get()) {
            // An item of a list: with the next items' when they come in order (under a pause
            // of its own).
            (
                Some(Raw {
                    list: Some((list, index)),
                    ..
                }),
                _,
            ) => list.dict(py, *index),
            // Never read: straight from the server's JSON, without a Value between.
            (Some(raw), None) => pyjson::GcPause::new(py).object_dict(py, &raw.json, &raw.meta),
            _ => {
                let _paused = pyjson::GcPause::new(py);
                to_py(py, self.value())
            }
        }
    }

    /// The object as YAML.
    fn to_yaml(&self) -> PyResult<String> {
        serde_saphyr::to_string(self.value()).map_err(|e| GryviaError::new_err(e.to_string()))
    }

    /// The object as JSON.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(self.value()).map_err(|e| GryviaError::new_err(e.to_string()))
    }

    /// `kind`.
    #[getter]
    fn kind(&self) -> String {
        match &self.raw {
            Some(raw) => raw.meta.kind.to_string(),
            None => self.value()["kind"].as_str().unwrap_or_default().to_owned(),
        }
    }

    /// `metadata.name`.
    #[getter]
    fn name(&self) -> PyResult<Option<String>> {
        self.metadata_str("name")
    }

    /// `metadata.namespace`.
    #[getter]
    fn namespace(&self) -> PyResult<Option<String>> {
        self.metadata_str("namespace")
    }

    /// `metadata`.
    #[getter]
    fn metadata(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.top().attr(py, "metadata")
    }

    /// `spec`.
    #[getter]
    fn spec(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.top().attr(py, "spec")
    }

    /// `status`.
    #[getter]
    fn status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.top().attr(py, "status")
    }

    fn __getattr__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        let top = self.top();
        if let Some(v) = top.field(py, name)? {
            return Ok(v);
        }
        let key = if name == "api_version" {
            "apiVersion"
        } else {
            name
        };
        match self.left_out(key) {
            Some(v) => Ok(PyString::new(py, v).into_any().unbind()),
            None => Err(top.not_set(name)),
        }
    }

    /// Member `key` (as the server names it: `job["spec"]`); raises `KeyError` when not set.
    fn __getitem__(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        if let Some(v) = self.top().member(py, key)? {
            return Ok(v);
        }
        match self.left_out(key) {
            Some(v) => Ok(PyString::new(py, v).into_any().unbind()),
            None => Err(pyo3::exceptions::PyKeyError::new_err(key.to_owned())),
        }
    }

    fn __contains__(&self, key: &str) -> PyResult<bool> {
        Ok(self.left_out(key).is_some() || self.top().locate(key)?.is_some())
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .extract::<PyRef<'_, Resource>>()
            .is_ok_and(|o| o.value() == self.value())
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!(
            "Resource({} {})",
            self.kind(),
            match (self.namespace()?, self.name()?) {
                (Some(ns), Some(n)) => format!("{ns}/{n}"),
                (None, Some(n)) => n,
                _ => "<unnamed>".to_owned(),
            }
        ))
    }
}

/// Validates a Gryvia object given as a dict; raises `ValidationError` naming the field.
#[pyfunction]
fn validate(data: &Bound<'_, PyAny>) -> PyResult<()> {
    let v = to_json(data)?;
    validator()?.validate(&v).map_err(|e| invalid(&e))
}

/// Every Gryvia object in a YAML stream, validated.
#[pyfunction]
fn load_all(py: Python<'_>, text: &str) -> PyResult<Vec<Py<PyAny>>> {
    let docs = gryvia_types::validation::parse_yaml_documents(text)
        .map_err(|e| ValidationError::new_err(format!("YAML: {e}")))?;
    docs.iter()
        .map(|d| kind_classes::typed_object(py, normalize(d)?))
        .collect()
}

/// Every Gryvia kind, sorted: made once (from the CRDs, whose schemas take tens of
/// milliseconds to generate), not on every call of the client.
pub(crate) fn gryvia_kinds() -> &'static [String] {
    static KINDS: OnceLock<Vec<String>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let mut kinds = gryvia_types::crds::kinds();
        kinds.sort();
        kinds
    })
}

/// Every Gryvia kind, sorted.
#[pyfunction]
fn kinds() -> Vec<String> {
    gryvia_kinds().to_vec()
}

/// Whether a value is an object of a Gryvia kind (by its `apiVersion`).
pub(crate) fn is_gryvia(v: &Value) -> bool {
    v.get("apiVersion").and_then(Value::as_str) == Some(gryvia_types::API_VERSION)
}

/// Validates `v` like the API server does when it is a Gryvia object (other values pass);
/// the error is prefixed with `at` when given.
pub(crate) fn check_gryvia(v: &Value, at: Option<&str>) -> PyResult<()> {
    if !is_gryvia(v) {
        return Ok(());
    }
    validator()?.validate(v).map_err(|e| match at {
        Some(at) => ValidationError::new_err(format!("{at}: {e}")),
        None => invalid(&e),
    })
}

/// A Python value as a typed Rust value; a Gryvia object (or each one of a list) is first
/// validated like the API server validates it, so a misspelt field is an error rather than
/// silently dropped.
fn typed<K: serde::de::DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<K> {
    let value = to_json(obj)?;
    match &value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_gryvia(item, Some(&format!("{what}[{i}]")))?;
            }
        }
        v => check_gryvia(v, Some(what))?,
    }
    serde_json::from_value(value).map_err(|e| ValidationError::new_err(format!("{what}: {e}")))
}

fn out(py: Python<'_>, v: &impl serde::Serialize) -> PyResult<Py<PyAny>> {
    let json = serde_json::to_value(v).map_err(|e| GryviaError::new_err(e.to_string()))?;
    to_py(py, &json)
}

fn parse_now(now: Option<&str>) -> PyResult<jiff::Timestamp> {
    match now {
        Some(t) => t.parse().map_err(|e| {
            ValidationError::new_err(format!("now: {t:?} is not an RFC 3339 time: {e}"))
        }),
        None => Ok(jiff::Timestamp::now()),
    }
}

/// Renders a GryviaTemplate into a GryviaAIJob with the given parameter values (the same
/// function as `gryvia submit --template`). Raises `ValidationError` naming the parameter or
/// field.
#[pyfunction]
#[pyo3(signature = (template, name, namespace, params=None))]
fn render_template(
    py: Python<'_>,
    template: &Bound<'_, PyAny>,
    name: &str,
    namespace: &str,
    params: Option<BTreeMap<String, String>>,
) -> PyResult<Py<PyAny>> {
    let tpl: gryvia_types::GryviaTemplate = typed(template, "template")?;
    let job =
        gryvia_reconcile::template::render(&tpl, name, namespace, &params.unwrap_or_default())
            .map_err(|e| ValidationError::new_err(e.to_string()))?;
    // The CustomResource serializes its own apiVersion and kind.
    let value = serde_json::to_value(&job).map_err(|e| GryviaError::new_err(e.to_string()))?;
    kind_classes::typed_object(py, normalize(&value)?)
}

/// Checks a GryviaTemplate as the ai-operator does for its `Valid` condition; raises
/// `ValidationError` naming the field.
#[pyfunction]
fn check_template(template: &Bound<'_, PyAny>) -> PyResult<()> {
    let tpl: gryvia_types::GryviaTemplate = typed(template, "template")?;
    gryvia_reconcile::template::validate(&tpl.spec)
        .map_err(|e| ValidationError::new_err(e.to_string()))
}

/// The next trial of a hyperparameter study, as the ai-operator would start it: a dict of
/// parameter values, or `None` when the study has nothing more to try (`maxTrials` reached,
/// the grid done). `study` is a GryviaAutoTuner; `history` the trials so far, each a dict with
/// `parameters` and, when it finished, `objectiveValue` (`index`, `phase`, `earlyStopped` as
/// in `status.trials`; a trial with a value and no phase counts as succeeded, one without as
/// running). The same study and history give the same values, so a notebook can run the
/// search offline. Raises `ValidationError` naming the field.
#[pyfunction]
#[pyo3(signature = (study, history=None))]
fn suggest(
    py: Python<'_>,
    study: &Bound<'_, PyAny>,
    history: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let study: gryvia_types::GryviaAutoTuner = typed(study, "study")?;
    let items = match history {
        Some(h) => match to_json(h)? {
            Value::Array(items) => items,
            _ => {
                return Err(ValidationError::new_err(
                    "history: must be a list of trials",
                ));
            }
        },
        None => Vec::new(),
    };
    let mut trials: Vec<gryvia_types::Trial> = Vec::with_capacity(items.len());
    for (i, mut item) in items.into_iter().enumerate() {
        let Some(obj) = item.as_object_mut() else {
            return Err(ValidationError::new_err(format!(
                "history[{i}]: must be a dict"
            )));
        };
        let finished = obj.get("objectiveValue").is_some_and(|v| !v.is_null());
        obj.entry("index").or_insert_with(|| Value::from(i));
        obj.entry("name").or_insert_with(|| {
            Value::from(gryvia_reconcile::tuner::trial_name(
                "trial",
                i32::try_from(i).unwrap_or(i32::MAX),
            ))
        });
        obj.entry("phase")
            .or_insert_with(|| Value::from(if finished { "Succeeded" } else { "Running" }));
        let t: gryvia_types::Trial = serde_json::from_value(item)
            .map_err(|e| ValidationError::new_err(format!("history[{i}]: {e}")))?;
        trials.push(t);
    }
    let next =
        gryvia_reconcile::tuner::suggest(&study.spec, &trials).map_err(ValidationError::new_err)?;
    out(py, &next)
}

/// The validating admission webhook's decision for a new job: a dict with `allowed`,
/// `message`, `warnings`. `world` has the keys of `AdmissionWorld` (camelCase): `tenant`,
/// `skus`, `gpuQuota`, `template`, `reservation`.
#[pyfunction]
#[pyo3(signature = (job, world=None))]
fn admit_job(
    py: Python<'_>,
    job: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let job: gryvia_types::GryviaAIJob = typed(job, "job")?;
    let world: gryvia_reconcile::admission::AdmissionWorld = match world {
        Some(w) => typed(w, "world")?,
        None => Default::default(),
    };
    out(py, &gryvia_reconcile::admission::validate_job(&job, &world))
}

/// The mutating admission webhook's JSON Patch for a new job (a list of operations) in
/// `world` (keys of `AdmissionWorld`: `tenant` with its `defaultTier` and `classification`,
/// `tiers`, `preemptible`), empty by default.
#[pyfunction]
#[pyo3(signature = (job, world=None))]
fn mutate_job(
    py: Python<'_>,
    job: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let job: gryvia_types::GryviaAIJob = typed(job, "job")?;
    let world: gryvia_reconcile::admission::AdmissionWorld = match world {
        Some(w) => typed(w, "world")?,
        None => Default::default(),
    };
    out(py, &gryvia_reconcile::admission::mutate_job(&job, &world))
}

/// The AI job controller's Plan for `job` in `world` (keys of `AIJobWorld`: `job`, `pods`,
/// `nodes`, `priorityClassExists`) at `now` (RFC 3339; the current time when omitted). An
/// alias of `reconcile` for a GryviaAIJob.
#[pyfunction]
#[pyo3(signature = (job, world=None, now=None))]
fn reconcile_job(
    py: Python<'_>,
    job: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    plan(
        py,
        &gryvia_reconcile::aijob::AIJobReconciler,
        job,
        "job",
        world,
        now,
    )
}

/// The batch Job the controller makes of `job` (with `backoff_limit` and an optional
/// PriorityClass), as a dict.
#[pyfunction]
#[pyo3(signature = (job, backoff_limit=None, priority_class=None))]
fn render_job(
    py: Python<'_>,
    job: &Bound<'_, PyAny>,
    backoff_limit: Option<i32>,
    priority_class: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let job: gryvia_types::GryviaAIJob = typed(job, "job")?;
    let limit = backoff_limit.unwrap_or(job.spec.retry_limit);
    to_py(
        py,
        &gryvia_reconcile::aijob::render_job(&job, limit, priority_class),
    )
}

/// Where a GryviaReservation's schedule stands at `now`: a dict with `state` (`open`, `next`
/// or `over`) and, unless over, `start` and `end`. Raises `ValidationError` for an unknown
/// time zone or a bad time.
#[pyfunction]
#[pyo3(signature = (reservation, now=None))]
fn reservation_window(
    py: Python<'_>,
    reservation: &Bound<'_, PyAny>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::reservation::{Window, window};
    let r: gryvia_types::GryviaReservation = typed(reservation, "reservation")?;
    let w = window(&r, parse_now(now)?).map_err(|e| ValidationError::new_err(e.to_string()))?;
    let v = match w {
        Window::Open { start, end } => {
            serde_json::json!({"state": "open", "start": start.to_string(), "end": end.to_string()})
        }
        Window::Next { start, end } => {
            serde_json::json!({"state": "next", "start": start.to_string(), "end": end.to_string()})
        }
        Window::Over => serde_json::json!({"state": "over"}),
    };
    to_py(py, &v)
}

/// The next time a cron schedule (five fields, or six with seconds, UTC) fires after `after`.
#[pyfunction]
fn next_cron(schedule: &str, after: &str) -> PyResult<String> {
    let after = parse_now(Some(after))?;
    let cron = gryvia_reconcile::cron::Schedule::parse(schedule)
        .map_err(|e| ValidationError::new_err(format!("schedule: {e}")))?;
    cron.next_after(after)
        .map(|t| t.to_string())
        .ok_or_else(|| ValidationError::new_err("schedule: never fires"))
}

/// Decodes the JSON body of a list response (`{"kind": "GryviaAIJobList", "items": [...]}`)
/// into `Resource`s, each through its typed Rust struct (`gryvia_types::crds::typed_list`).
#[pyfunction]
fn decode_list(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Vec<Py<PyAny>>> {
    let bytes: Vec<u8>;
    let body: &[u8] = if let Ok(b) = data.cast::<pyo3::types::PyBytes>() {
        b.as_bytes()
    } else {
        bytes = data.cast::<PyString>()?.to_cow()?.into_owned().into_bytes();
        &bytes
    };
    let items = py
        .detach(|| gryvia_types::crds::typed_list(body))
        .map_err(|e| ValidationError::new_err(format!("list: {e}")))?;
    items
        .into_iter()
        .map(|value| kind_classes::typed_object(py, value))
        .collect()
}

fn world<W: serde::de::DeserializeOwned + Default>(w: Option<&Bound<'_, PyAny>>) -> PyResult<W> {
    match w {
        Some(w) => typed(w, "world"),
        None => Ok(W::default()),
    }
}

/// The one path every pure reconciler takes from Python: the object and its world typed (and
/// validated) from Python values, the Plan back as a dict. `what` names the object in errors.
fn plan<R>(
    py: Python<'_>,
    reconciler: &R,
    object: &Bound<'_, PyAny>,
    what: &str,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>>
where
    R: Reconcile,
    R::Object: serde::de::DeserializeOwned,
    R::World: serde::de::DeserializeOwned + Default,
    R::Status: serde::Serialize,
{
    let object: R::Object = typed(object, what)?;
    let world: R::World = self::world(world)?;
    out(py, &reconciler.reconcile(&object, &world, parse_now(now)?))
}

/// The kinds `reconcile` takes, in the order its error lists them.
const RECONCILED_KINDS: [&str; 7] = [
    "GryviaAIJob",
    "GryviaBudget",
    "GryviaHealthCheck",
    "GryviaJobHook",
    "GryviaQuota",
    "GryviaTenant",
    "GryviaWorkflow",
];

/// The Plan of the controller that owns `object`'s kind, for `object` in `world` (the keys of
/// that controller's World) at `now`. `remediation` (`--gpu-remediation`) and `tenant_rbac`
/// (`--tenant-rbac`) are the operator switches of the health and tenant controllers; they are
/// ignored for other kinds. Raises `ValidationError` for a kind without a reconciler.
#[pyfunction]
#[pyo3(signature = (object, world=None, now=None, remediation=false, tenant_rbac=false))]
fn reconcile(
    py: Python<'_>,
    object: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
    remediation: bool,
    tenant_rbac: bool,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::{aijob, budget, health, hooks, tenancy, workflow};
    let value = to_json(object)?;
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "GryviaAIJob" => plan(py, &aijob::AIJobReconciler, object, "object", world, now),
        "GryviaBudget" => plan(
            py,
            &budget::BudgetReconciler::default(),
            object,
            "object",
            world,
            now,
        ),
        "GryviaHealthCheck" => {
            let options = health::HealthOptions { remediation };
            let r = health::HealthCheckReconciler { options };
            plan(py, &r, object, "object", world, now)
        }
        "GryviaJobHook" => plan(py, &hooks::HookReconciler, object, "object", world, now),
        "GryviaQuota" => plan(py, &tenancy::QuotaReconciler, object, "object", world, now),
        "GryviaTenant" => {
            let options = tenancy::TenantOptions { tenant_rbac };
            let r = tenancy::TenantReconciler { options };
            plan(py, &r, object, "object", world, now)
        }
        "GryviaWorkflow" => plan(
            py,
            &workflow::WorkflowReconciler,
            object,
            "object",
            world,
            now,
        ),
        other => Err(ValidationError::new_err(format!(
            "object.kind: {other:?} has no reconciler; one of {}",
            RECONCILED_KINDS.join(", ")
        ))),
    }
}

/// The GPU health controller's Plan for a GryviaHealthCheck in `world` (keys of
/// `HealthWorld`: `nodes`, `gpuNodes`, `pods`, `pdbs`, `remediatingElsewhere`) at `now`;
/// `remediation` is the operator's `--gpu-remediation` switch.
#[pyfunction]
#[pyo3(signature = (check, world=None, now=None, remediation=false))]
fn reconcile_health_check(
    py: Python<'_>,
    check: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
    remediation: bool,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::health::{HealthCheckReconciler, HealthOptions};
    let r = HealthCheckReconciler {
        options: HealthOptions { remediation },
    };
    plan(py, &r, check, "check", world, now)
}

/// A health check's verdict on one node from its GryviaGpuNode (`None`: the node reports
/// nothing): a dict with `verdict`, `reasons`, `gpus`, `observedAt`.
#[pyfunction]
#[pyo3(signature = (check, gpu_node=None, now=None))]
fn evaluate_node(
    py: Python<'_>,
    check: &Bound<'_, PyAny>,
    gpu_node: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    let check: gryvia_types::GryviaHealthCheck = typed(check, "check")?;
    let node: Option<gryvia_types::GryviaGpuNode> = match gpu_node {
        Some(n) => Some(typed(n, "gpu_node")?),
        None => None,
    };
    let status = node.as_ref().and_then(|n| n.status.as_ref());
    out(
        py,
        &gryvia_reconcile::health::evaluate_node(&check.spec, status, parse_now(now)?),
    )
}

/// Which pods a drain evicts now and which a PodDisruptionBudget blocks: `pods` and `pdbs`
/// are lists of dicts with the keys of `PodInfo` and `PdbInfo`.
#[pyfunction]
fn drain_plan(
    py: Python<'_>,
    pods: &Bound<'_, PyAny>,
    pdbs: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let pods: Vec<gryvia_reconcile::health::PodInfo> = typed(pods, "pods")?;
    let pdbs: Vec<gryvia_reconcile::health::PdbInfo> = typed(pdbs, "pdbs")?;
    out(py, &gryvia_reconcile::health::drain_plan(&pods, &pdbs))
}

/// The GPU limits of a tenant tree: GryviaTenant objects in, a dict of tenant name ->
/// allocation (`asked`, `granted`, `own`, `capped`, `problem`) out.
#[pyfunction]
fn allocate_tenants(py: Python<'_>, tenants: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let tenants: Vec<gryvia_types::GryviaTenant> = typed(tenants, "tenants")?;
    let summaries: Vec<_> = tenants
        .iter()
        .map(gryvia_reconcile::tenancy::TenantSummary::of)
        .collect();
    out(py, &gryvia_reconcile::tenancy::allocate(&summaries))
}

/// The tenant controller's Plan (the namespace, ResourceQuota, LimitRange, NetworkPolicy and
/// RoleBindings it wants, and the status) for a GryviaTenant in `world` (keys of
/// `TenantWorld`); `tenant_rbac` is the operator's `--tenant-rbac` switch.
#[pyfunction]
#[pyo3(signature = (tenant, world=None, now=None, tenant_rbac=false))]
fn reconcile_tenant(
    py: Python<'_>,
    tenant: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
    tenant_rbac: bool,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::tenancy::{TenantOptions, TenantReconciler};
    let r = TenantReconciler {
        options: TenantOptions { tenant_rbac },
    };
    plan(py, &r, tenant, "tenant", world, now)
}

/// The quota controller's Plan (a ResourceQuota per namespace) for a GryviaQuota in `world`
/// (keys of `QuotaWorld`: `existingNamespaces`, `managedIn`, `gpusUsed`).
#[pyfunction]
#[pyo3(signature = (quota, world=None, now=None))]
fn reconcile_quota(
    py: Python<'_>,
    quota: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    plan(
        py,
        &gryvia_reconcile::tenancy::QuotaReconciler,
        quota,
        "quota",
        world,
        now,
    )
}

/// The job hooks controller's Plan for a GryviaJobHook in `world` (keys of `HookWorld`:
/// `subjects` — the jobs and workflows of its namespace as `Subject`s — and `secret`:
/// `Present`, `Missing` or `NoKey`) at `now`: the deliveries it records and the notifications
/// it sends.
#[pyfunction]
#[pyo3(signature = (hook, world=None, now=None))]
fn reconcile_job_hook(
    py: Python<'_>,
    hook: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    plan(
        py,
        &gryvia_reconcile::hooks::HookReconciler,
        hook,
        "hook",
        world,
        now,
    )
}

/// The workflow controller's Plan for a GryviaWorkflow in `world` (keys of `WorkflowWorld`:
/// `jobs` — its steps' jobs as `StepJob`s — and `templates` by name) at `now`: the steps' jobs
/// to create and the status.
#[pyfunction]
#[pyo3(signature = (workflow, world=None, now=None))]
fn reconcile_workflow(
    py: Python<'_>,
    workflow: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::workflow::WorkflowReconciler;
    plan(py, &WorkflowReconciler, workflow, "workflow", world, now)
}

/// The GryviaUsageRecord metering writes for a GryviaAIJob in `world` (keys of
/// `MeteringWorld`: `skus`, `tenant`, `nodeProduct`), `None` for a job that has not started
/// or uses no GPU.
#[pyfunction]
#[pyo3(signature = (job, world=None))]
fn usage_record(
    py: Python<'_>,
    job: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let job: gryvia_types::GryviaAIJob = typed(job, "job")?;
    let world: gryvia_reconcile::metering::MeteringWorld = self::world(world)?;
    gryvia_reconcile::metering::usage_record(&job, &world, None)
        .map(|r| out(py, &r))
        .transpose()
}

/// The budget controller's Plan for a GryviaBudget in `world` (keys of `BudgetWorld`:
/// `records` — GryviaUsageRecords — and `skus`) at `now`: spend, GPU-hours, forecast, state
/// and threshold Events.
#[pyfunction]
#[pyo3(signature = (budget, world=None, now=None))]
fn reconcile_budget(
    py: Python<'_>,
    budget: &Bound<'_, PyAny>,
    world: Option<&Bound<'_, PyAny>>,
    now: Option<&str>,
) -> PyResult<Py<PyAny>> {
    use gryvia_reconcile::budget::BudgetReconciler;
    plan(
        py,
        &BudgetReconciler::default(),
        budget,
        "budget",
        world,
        now,
    )
}

/// One admission cycle of the native queue scheduler over `world` (keys of `QueueWorld`:
/// `queues`, `jobs`, `nodes`) at `now`: the jobs admitted (with their placement), preempted
/// and released, every pending job's queue, position, reason and expected start, and every
/// queue's usage. The same function the ai-operator runs with `--native-queue-scheduler`.
#[pyfunction]
#[pyo3(signature = (world, now=None))]
fn schedule(py: Python<'_>, world: &Bound<'_, PyAny>, now: Option<&str>) -> PyResult<Py<PyAny>> {
    let world: gryvia_reconcile::queue::QueueWorld = typed(world, "world")?;
    let now = parse_now(now)?;
    let cycle = py.detach(|| gryvia_reconcile::queue::cycle(&world, now));
    out(py, &cycle)
}

/// The world of one queue cycle read from cluster objects (what the ai-operator reads from
/// its caches): GryviaQueues, GryviaAIJobs, Nodes, Pods and, optionally, GryviaPriority
/// classes, each a list of dicts or Resources. Pass the result to `schedule`.
#[pyfunction]
#[pyo3(signature = (queues, jobs, nodes, pods, priorities=None))]
fn queue_world(
    py: Python<'_>,
    queues: &Bound<'_, PyAny>,
    jobs: &Bound<'_, PyAny>,
    nodes: &Bound<'_, PyAny>,
    pods: &Bound<'_, PyAny>,
    priorities: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let queues: Vec<gryvia_types::scheduling::GryviaQueue> = typed(queues, "queues")?;
    let jobs: Vec<gryvia_types::GryviaAIJob> = typed(jobs, "jobs")?;
    let nodes: Vec<k8s_openapi::api::core::v1::Node> = typed(nodes, "nodes")?;
    let pods: Vec<k8s_openapi::api::core::v1::Pod> = typed(pods, "pods")?;
    let priorities: Vec<gryvia_types::scheduling::GryviaPriority> = match priorities {
        Some(p) => typed(p, "priorities")?,
        None => Vec::new(),
    };
    let world = gryvia_reconcile::queue::world_of(&queues, &jobs, &priorities, &nodes, &pods);
    out(py, &world)
}

/// When the pending job `namespace/name` of `world` is expected to start (RFC 3339), `None`
/// when that cannot be known: "when would this start?" without creating anything.
#[pyfunction]
#[pyo3(signature = (world, namespace, name, now=None))]
fn expected_start(
    world: &Bound<'_, PyAny>,
    namespace: &str,
    name: &str,
    now: Option<&str>,
) -> PyResult<Option<String>> {
    let world: gryvia_reconcile::queue::QueueWorld = typed(world, "world")?;
    let key = gryvia_reconcile::queue::JobKey::new(namespace, name);
    if !world.jobs.iter().any(|j| j.key == key) {
        return Err(ValidationError::new_err(format!(
            "world.jobs: no job {namespace}/{name}"
        )));
    }
    Ok(
        gryvia_reconcile::queue::expected_start(&world, &key, parse_now(now)?)
            .map(|t| t.to_string()),
    )
}

/// The native module.
#[pymodule]
fn _gryvia(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("GryviaError", py.get_type::<GryviaError>())?;
    m.add("ValidationError", py.get_type::<ValidationError>())?;
    m.add("ApiError", py.get_type::<ApiError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add_class::<Resource>()?;
    m.add_class::<Object>()?;
    kind_classes::register(m)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(load_all, m)?)?;
    m.add_function(wrap_pyfunction!(kinds, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile, m)?)?;
    m.add_function(wrap_pyfunction!(schedule, m)?)?;
    m.add_function(wrap_pyfunction!(queue_world, m)?)?;
    m.add_function(wrap_pyfunction!(expected_start, m)?)?;
    m.add_function(wrap_pyfunction!(render_template, m)?)?;
    m.add_function(wrap_pyfunction!(check_template, m)?)?;
    m.add_function(wrap_pyfunction!(admit_job, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_job_hook, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_workflow, m)?)?;
    m.add_function(wrap_pyfunction!(usage_record, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_budget, m)?)?;
    m.add_function(wrap_pyfunction!(mutate_job, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_job, m)?)?;
    m.add_function(wrap_pyfunction!(render_job, m)?)?;
    m.add_function(wrap_pyfunction!(reservation_window, m)?)?;
    m.add_function(wrap_pyfunction!(next_cron, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_health_check, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_node, m)?)?;
    m.add_function(wrap_pyfunction!(drain_plan, m)?)?;
    m.add_function(wrap_pyfunction!(allocate_tenants, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_tenant, m)?)?;
    m.add_function(wrap_pyfunction!(reconcile_quota, m)?)?;
    m.add_function(wrap_pyfunction!(suggest, m)?)?;
    client::register(m)?;
    Ok(())
}
