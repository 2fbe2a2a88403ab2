//! `gryvia.Client` and `gryvia.AsyncClient`: the Kubernetes client of the Python SDK.
//!
//! Both are thin layers over `gryvia_client::resources::Resources` (kinds resolved through
//! discovery, lists decoded straight into JSON, watches that report what changed) and
//! `gryvia_client::ops::jobs` (submit and wait), running on one shared tokio runtime. The sync
//! client waits with the GIL released and answers Ctrl-C; the async client hands out asyncio
//! awaitables (pyo3-async-runtimes). Gryvia objects come back as objects of their kind's class
//! (a list's and a watch's kept as the server's JSON, each field read from it when asked for);
//! objects of other kinds as plain dicts (a list's built straight from the body, `pyjson`), or
//! with `dicts=False` as `Resource`s kept as the server's JSON like Gryvia objects.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use gryvia_client::resources::{ListPart, RawWatch, Resources};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::PyList;
use serde_json::Value;

use crate::list_dicts::ListDicts;
use crate::{
    ApiError, ConflictError, GryviaError, NotFoundError, Resource, TypeMeta, ValidationError,
    to_json, to_py,
};

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `fut` on the shared runtime and waits for it with the GIL released, checking for
/// signals (Ctrl-C cancels the request) every 100 ms.
fn block<T: Send + 'static>(
    py: Python<'_>,
    fut: impl Future<Output = PyResult<T>> + Send + 'static,
) -> PyResult<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let task = runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    loop {
        let (back, next) = py.detach(move || {
            let next = rx.recv_timeout(Duration::from_millis(100));
            (rx, next)
        });
        rx = back;
        match next {
            Ok(result) => return result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    task.abort();
                    return Err(e);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(GryviaError::new_err(
                    "the request's task ended without a result",
                ));
            }
        }
    }
}

/// A client error as the Python exception its status calls for.
fn py_err(e: gryvia_client::Error) -> PyErr {
    let msg = match &e {
        // One line: what was done, the server's message, its reason and code.
        gryvia_client::Error::Api {
            operation,
            source: kube::Error::Api(s),
        } => format!("{operation}: {} ({} {})", s.message, s.reason, s.code),
        other => other.to_string(),
    };
    match (&e, e.status_code()) {
        (_, Some(404)) => NotFoundError::new_err(msg),
        (_, Some(409)) => ConflictError::new_err(msg),
        (gryvia_client::Error::Api { .. }, _) => ApiError::new_err(msg),
        (gryvia_client::Error::Invalid(_), _) => ValidationError::new_err(msg),
        _ => GryviaError::new_err(msg),
    }
}

/// What the objects of a get, list or watch come as.
#[derive(Clone, Copy)]
enum Wanted {
    /// Objects of their Gryvia kind's class.
    Class,
    /// `Resource`s (objects of another kind).
    Resource,
    Dict,
}

/// The caller's `dicts` for objects of a Gryvia kind or not: unset, objects of their class for
/// Gryvia kinds and dicts for others; dicts of every kind with `True`, objects with `False`.
fn wanted(dicts: Option<bool>, gryvia: bool) -> Wanted {
    match (dicts, gryvia) {
        (Some(true), _) | (None, false) => Wanted::Dict,
        (Some(false), false) => Wanted::Resource,
        (_, true) => Wanted::Class,
    }
}

/// An object the server returned, as Python data, as `dicts` asks ([`wanted`]); a Gryvia
/// object as the server has it (the API server checked it against the same schemas).
fn output(py: Python<'_>, value: Value, dicts: Option<bool>) -> PyResult<Py<PyAny>> {
    match wanted(dicts, crate::is_gryvia(&value)) {
        Wanted::Dict => to_py(py, &value),
        Wanted::Class => crate::kind_classes::typed_object(py, value),
        Wanted::Resource => Ok(Py::new(py, Resource::new(value))?.into_any()),
    }
}

/// An object given by the caller (a `Resource` or a dict), checked like the API server checks
/// it when it is a Gryvia kind.
fn input(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let value = to_json(obj)?;
    crate::check_gryvia(&value, None)?;
    Ok(value)
}

fn api_version_of(kind: &str, api_version: Option<&str>) -> PyResult<String> {
    match api_version {
        Some(v) => Ok(v.to_owned()),
        None if crate::gryvia_kinds()
            .binary_search_by(|k| k.as_str().cmp(kind))
            .is_ok() =>
        {
            Ok(gryvia_types::API_VERSION.to_owned())
        }
        None => Err(ValidationError::new_err(format!(
            "api_version: required for {kind:?}, which is not a Gryvia kind"
        ))),
    }
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| ValidationError::new_err(format!("{what}: {s} is not a duration in seconds")))
}

/// What both clients share.
struct Inner {
    resources: Resources,
    field_manager: String,
}

type Shared = Arc<Inner>;

fn connect(
    py: Python<'_>,
    kubeconfig: Option<String>,
    context: Option<String>,
    field_manager: Option<String>,
) -> PyResult<Shared> {
    let client = block(py, async move {
        gryvia_client::connect_with(
            kubeconfig.as_deref().map(std::path::Path::new),
            context.as_deref(),
        )
        .await
        .map_err(py_err)
    })?;
    Ok(Arc::new(Inner {
        resources: Resources::new(client),
        field_manager: field_manager
            .unwrap_or_else(|| gryvia_client::resources::FIELD_MANAGER.to_owned()),
    }))
}

// The operations, as futures both clients run.

async fn op_get(
    s: Shared,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    dicts: Option<bool>,
) -> PyResult<Py<PyAny>> {
    let v = s
        .resources
        .get(&api_version, &kind, namespace.as_deref(), &name)
        .await
        .map_err(py_err)?;
    Python::attach(|py| output(py, v, dicts))
}

async fn op_list(
    s: Shared,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    label_selector: Option<String>,
    dicts: Option<bool>,
) -> PyResult<Py<PyAny>> {
    let (ns, sel) = (namespace.as_deref(), label_selector.as_deref());
    let (k, mut parts) = s
        .resources
        .list_stream(&api_version, &kind, ns, sel)
        .await
        .map_err(py_err)?;
    let decode = Decode::of(&k.resource.api_version, &k.resource.kind, dicts)?;
    let out = Python::attach(|py| PyList::empty(py).unbind());
    let list = decode.list();
    let mut whole = false;
    // Items are decoded as they arrive, while the server still sends the rest of the body.
    while let Some(part) = parts.recv().await {
        let mut batch = vec![part];
        while let Ok(p) = parts.try_recv() {
            batch.push(p);
        }
        Python::attach(|py| -> PyResult<()> {
            let paused = crate::pyjson::GcPause::new(py);
            let out = out.bind(py);
            for part in batch {
                match part.map_err(py_err)? {
                    ListPart::Items(items) => {
                        for item in &items {
                            out.append(decode.object(py, &paused, item, list.as_ref())?)?;
                        }
                    }
                    ListPart::End(_) => whole = true,
                }
            }
            Ok(())
        })?;
    }
    if !whole {
        return Err(ApiError::new_err(format!(
            "list {kind}: the body ended before the list did"
        )));
    }
    Ok(out.into_any())
}

/// How the objects of a list or watch become Python objects.
#[derive(Clone)]
struct Decode {
    /// Their `apiVersion` and `kind`, which a list's items may leave out.
    meta: Arc<TypeMeta>,
    form: Form,
}

#[derive(Clone, Copy)]
enum Form {
    /// An object of its Gryvia kind's class, kept as the server's JSON until read.
    Class(crate::kind_classes::Unparsed),
    /// A `Resource` (an object of another kind, asked for with `dicts=False`), kept as the
    /// server's JSON until read.
    Object,
    /// A dict, with `apiVersion` and `kind` filled in where the server left them out.
    Dict,
}

impl Decode {
    /// How objects of `kind` are decoded, as `dicts` asks ([`wanted`]).
    fn of(api_version: &str, kind: &str, dicts: Option<bool>) -> PyResult<Decode> {
        let form = match wanted(dicts, api_version == gryvia_types::API_VERSION) {
            Wanted::Dict => Form::Dict,
            Wanted::Resource => Form::Object,
            Wanted::Class => crate::kind_classes::unparsed(kind)
                .map(Form::Class)
                .ok_or_else(|| {
                    GryviaError::new_err(format!("kind: {kind:?} is not a Gryvia kind"))
                })?,
        };
        Ok(Decode {
            meta: TypeMeta::new(api_version, kind),
            form,
        })
    }

    /// Where a list's items kept as objects take their places (for `to_dict()` a batch at a
    /// time); none for dicts.
    fn list(&self) -> Option<Arc<ListDicts>> {
        match self.form {
            Form::Class(_) | Form::Object => Some(ListDicts::new(self.meta.clone())),
            Form::Dict => None,
        }
    }

    /// The object of `json`, as the next item of `list` when given; a dict is built under
    /// `paused` (objects kept as JSON build no containers).
    fn object(
        &self,
        py: Python<'_>,
        paused: &crate::pyjson::GcPause<'_>,
        json: &str,
        list: Option<&Arc<ListDicts>>,
    ) -> PyResult<Py<PyAny>> {
        match self.form {
            Form::Class(make) => make(py, json, &self.meta, list),
            Form::Object => Ok(Py::new(py, Resource::unparsed(json, &self.meta, list))?.into_any()),
            Form::Dict => paused.object_dict(py, json, &self.meta),
        }
    }
}

async fn op_create(s: Shared, obj: Value) -> PyResult<Py<PyAny>> {
    let v = s.resources.create(&obj).await.map_err(py_err)?;
    Python::attach(|py| output(py, v, None))
}

async fn op_apply(
    s: Shared,
    obj: Value,
    field_manager: Option<String>,
    force: bool,
) -> PyResult<Py<PyAny>> {
    let manager = field_manager.unwrap_or_else(|| s.field_manager.clone());
    let v = s
        .resources
        .apply(&obj, &manager, force)
        .await
        .map_err(py_err)?;
    Python::attach(|py| output(py, v, None))
}

async fn op_delete(
    s: Shared,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
) -> PyResult<bool> {
    s.resources
        .delete(&api_version, &kind, namespace.as_deref(), &name)
        .await
        .map_err(py_err)
}

async fn op_wait_job(
    s: Shared,
    namespace: Option<String>,
    name: String,
    timeout: Duration,
) -> PyResult<Py<PyAny>> {
    let ns = namespace.unwrap_or_else(|| s.resources.default_namespace().to_owned());
    let job =
        gryvia_client::ops::jobs::wait_finished(s.resources.client(), &ns, &name, timeout, |_| {})
            .await
            .map_err(py_err)?;
    let v = serde_json::to_value(&job).map_err(|e| GryviaError::new_err(e.to_string()))?;
    Python::attach(|py| output(py, v, None))
}

async fn op_submit(s: Shared, job: Value, wait: bool, timeout: Duration) -> PyResult<Py<PyAny>> {
    let mut job: gryvia_types::GryviaAIJob =
        serde_json::from_value(job).map_err(|e| ValidationError::new_err(format!("job: {e}")))?;
    if job.metadata.namespace.is_none() {
        job.metadata.namespace = Some(s.resources.default_namespace().to_owned());
    }
    let created = gryvia_client::ops::jobs::submit(s.resources.client(), &job)
        .await
        .map_err(py_err)?;
    if wait {
        return op_wait_job(
            s,
            created.metadata.namespace.clone(),
            created.metadata.name.clone().unwrap_or_default(),
            timeout,
        )
        .await;
    }
    let v = serde_json::to_value(&created).map_err(|e| GryviaError::new_err(e.to_string()))?;
    Python::attach(|py| output(py, v, None))
}

async fn op_install_crds(s: Shared, timeout: Duration) -> PyResult<Vec<String>> {
    gryvia_client::crds::install(s.resources.client(), timeout)
        .await
        .map_err(py_err)
}

fn submitted_job(job: &Bound<'_, PyAny>) -> PyResult<Value> {
    let value = input(job)?;
    match value.get("kind").and_then(Value::as_str) {
        Some("GryviaAIJob") => Ok(value),
        other => Err(ValidationError::new_err(format!(
            "kind: submit takes a GryviaAIJob, not {other:?}"
        ))),
    }
}

/// One change seen by a watch.
#[pyclass(module = "gryvia._gryvia", frozen)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    #[pyo3(get, name = "type")]
    kind: &'static str,
    /// The object (of its class for Gryvia kinds, a dict otherwise; as the watch's `dicts`
    /// asks).
    #[pyo3(get)]
    object: Py<PyAny>,
}

#[pymethods]
impl WatchEvent {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "WatchEvent({}, {})",
            self.kind,
            self.object.bind(py).repr()?
        ))
    }
}

/// A watch of one kind: iterate it (`for e in w`) with `Client`, or `async for e in w` with
/// `AsyncClient`. It starts on the first event asked for, yields the current objects as
/// `ADDED`, then every change, and reconnects by itself; with a `timeout` it ends that many
/// seconds after it was made.
#[pyclass(module = "gryvia._gryvia", frozen)]
pub struct Watch {
    shared: Shared,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    label_selector: Option<String>,
    deadline: Option<tokio::time::Instant>,
    /// How its objects come: as `Client.list`'s `dicts`.
    dicts: Option<bool>,
    /// The watch (its task reads ahead), once started, and how its objects are decoded.
    stream: Arc<tokio::sync::Mutex<Option<(RawWatch, Decode)>>>,
    /// Events that arrived with the last one handed out, not yet asked for.
    ready: Arc<std::sync::Mutex<VecDeque<Py<PyAny>>>>,
}

/// Events taken in one go at most.
const EVENT_BATCH: usize = 1024;
/// How long after an event the next one is waited for, to come in the same batch: each batch
/// costs a hand-over between threads (about 150 us here), and the events of a watch's start
/// arrive one every few tens of microseconds.
const COALESCE: Duration = Duration::from_millis(1);
/// How long a batch is gathered at most while its events keep coming, each within
/// [`COALESCE`] of the one before: a burst (a watch's start) goes over in a few hundred events
/// a batch, not the few dozen of one window, and a lone event waits no longer than before.
const GATHER: Duration = Duration::from_millis(20);

impl Watch {
    /// An event that arrived with an earlier one.
    fn buffered(&self) -> Option<Py<PyAny>> {
        self.ready
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front()
    }

    /// The next event; `None` when the timeout has passed. The events already waiting behind
    /// it are made into Python objects with it (one taking of the GIL) and kept for the next
    /// calls, which then return at once.
    fn next_event(&self) -> impl Future<Output = PyResult<Option<Py<PyAny>>>> + Send + 'static {
        let ready = self.ready.clone();
        let batch = self.next_batch();
        async move {
            let Some(mut events) = batch.await? else {
                return Ok(None);
            };
            let first = events.pop_front();
            ready
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(events);
            Ok(first)
        }
    }

    fn next_batch(
        &self,
    ) -> impl Future<Output = PyResult<Option<VecDeque<Py<PyAny>>>>> + Send + 'static {
        let shared = self.shared.clone();
        let (api_version, kind) = (self.api_version.clone(), self.kind.clone());
        let (namespace, selector) = (self.namespace.clone(), self.label_selector.clone());
        let (deadline, dicts) = (self.deadline, self.dicts);
        let stream = self.stream.clone();
        async move {
            let mut guard = stream.lock().await;
            if guard.is_none() {
                let w = shared
                    .resources
                    .watch(
                        &api_version,
                        &kind,
                        namespace.as_deref(),
                        selector.as_deref(),
                    )
                    .await
                    .map_err(py_err)?;
                *guard = Some((w, Decode::of(&api_version, &kind, dicts)?));
            }
            let Some((w, decode)) = guard.as_mut() else {
                return Ok(None);
            };
            let next = match deadline {
                Some(d) => match tokio::time::timeout_at(d, w.next()).await {
                    Ok(n) => n,
                    Err(_) => return Ok(None),
                },
                None => w.next().await,
            };
            let first = match next {
                None => return Ok(None),
                Some(Err(e)) => return Err(py_err(e)),
                Some(Ok(event)) => event,
            };
            // The events that follow, each within COALESCE of the one before, come with it
            // (for GATHER at most): a burst (a watch's start) is handed over in hundreds, not
            // one by one. An error waits for the next call.
            let mut waiting = vec![first];
            let now = tokio::time::Instant::now();
            let limit = deadline.map_or(now + GATHER, |d| d.min(now + GATHER));
            let mut window = (now + COALESCE).min(limit);
            // Events already waiting are taken even once the window has passed.
            while waiting.len() < EVENT_BATCH {
                match w.next_before(window).await {
                    Some(event) => {
                        waiting.push(event);
                        window = (tokio::time::Instant::now() + COALESCE).min(limit);
                    }
                    None => break,
                }
            }
            Python::attach(|py| {
                let paused = crate::pyjson::GcPause::new(py);
                waiting
                    .into_iter()
                    .map(|(t, json)| {
                        let event = WatchEvent {
                            kind: t.as_str(),
                            object: decode.object(py, &paused, &json, None)?,
                        };
                        Ok(Py::new(py, event)?.into_any())
                    })
                    .collect::<PyResult<VecDeque<_>>>()
                    .map(Some)
            })
        }
    }
}

#[pymethods]
impl Watch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if let Some(event) = self.buffered() {
            return Ok(event);
        }
        block(py, self.next_event())?.ok_or_else(|| PyStopIteration::new_err(()))
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(event) = self.buffered() {
            return pyo3_async_runtimes::tokio::future_into_py(py, async move { Ok(event) });
        }
        let next = self.next_event();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            next.await?.ok_or_else(|| PyStopAsyncIteration::new_err(()))
        })
    }
}

fn make_watch(
    shared: &Shared,
    kind: &str,
    namespace: Option<String>,
    label_selector: Option<String>,
    api_version: Option<&str>,
    timeout: Option<f64>,
    dicts: Option<bool>,
) -> PyResult<Watch> {
    let deadline = match timeout {
        Some(t) => Some(tokio::time::Instant::now() + seconds("timeout", t)?),
        None => None,
    };
    Ok(Watch {
        shared: shared.clone(),
        api_version: api_version_of(kind, api_version)?,
        kind: kind.to_owned(),
        namespace,
        label_selector,
        deadline,
        dicts,
        stream: Arc::new(tokio::sync::Mutex::new(None)),
        ready: Arc::default(),
    })
}

/// A Kubernetes client with blocking methods.
///
/// `Client()` finds its configuration as kubectl does (in-cluster, `KUBECONFIG`,
/// `~/.kube/config`); `kubeconfig` and `context` choose explicitly. Kinds are Gryvia kinds
/// unless `api_version` names another group (`"v1"` for Namespace, `"batch/v1"` for Job).
#[pyclass(module = "gryvia._gryvia", frozen)]
pub struct Client {
    shared: Shared,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (kubeconfig=None, context=None, field_manager=None))]
    fn new(
        py: Python<'_>,
        kubeconfig: Option<String>,
        context: Option<String>,
        field_manager: Option<String>,
    ) -> PyResult<Self> {
        Ok(Client {
            shared: connect(py, kubeconfig, context, field_manager)?,
        })
    }

    /// The namespace of the configuration's context (`default` when it names none).
    #[getter]
    fn namespace(&self) -> String {
        self.shared.resources.default_namespace().to_owned()
    }

    /// Reads one object; raises `NotFoundError` when it does not exist. With `dicts=True` it
    /// comes as a dict, with `dicts=False` as an object (`Resource` for kinds not Gryvia's);
    /// unset, as an object for Gryvia kinds and a dict for others.
    #[pyo3(signature = (kind, name, namespace=None, api_version=None, dicts=None))]
    fn get(
        &self,
        py: Python<'_>,
        kind: &str,
        name: &str,
        namespace: Option<String>,
        api_version: Option<&str>,
        dicts: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let av = api_version_of(kind, api_version)?;
        block(
            py,
            op_get(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                name.to_owned(),
                dicts,
            ),
        )
    }

    /// Lists objects in `namespace`, or in every namespace without one. With `dicts=True` they
    /// come as dicts, with `dicts=False` as objects (`Resource` for kinds not Gryvia's, each
    /// kept as the server's JSON until read); unset, as objects for Gryvia kinds and dicts for
    /// others.
    #[pyo3(signature = (kind, namespace=None, label_selector=None, api_version=None, dicts=None))]
    fn list(
        &self,
        py: Python<'_>,
        kind: &str,
        namespace: Option<String>,
        label_selector: Option<String>,
        api_version: Option<&str>,
        dicts: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let av = api_version_of(kind, api_version)?;
        block(
            py,
            op_list(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                label_selector,
                dicts,
            ),
        )
    }

    /// Creates an object (a `Resource` or a dict); raises `ConflictError` when it exists.
    fn create(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let value = input(obj)?;
        block(py, op_create(self.shared.clone(), value))
    }

    /// Server-side applies an object; `force` takes fields over from other managers.
    #[pyo3(signature = (obj, force=true, field_manager=None))]
    fn apply(
        &self,
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        force: bool,
        field_manager: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let value = input(obj)?;
        block(
            py,
            op_apply(self.shared.clone(), value, field_manager, force),
        )
    }

    /// Deletes an object; `False` when it did not exist.
    #[pyo3(signature = (kind, name, namespace=None, api_version=None))]
    fn delete(
        &self,
        py: Python<'_>,
        kind: &str,
        name: &str,
        namespace: Option<String>,
        api_version: Option<&str>,
    ) -> PyResult<bool> {
        let av = api_version_of(kind, api_version)?;
        block(
            py,
            op_delete(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                name.to_owned(),
            ),
        )
    }

    /// Watches a kind: an iterator of `WatchEvent`s (ends after `timeout` seconds if given);
    /// their objects come as `list`'s, by `dicts`.
    #[pyo3(signature = (kind, namespace=None, label_selector=None, api_version=None, timeout=None, dicts=None))]
    fn watch(
        &self,
        kind: &str,
        namespace: Option<String>,
        label_selector: Option<String>,
        api_version: Option<&str>,
        timeout: Option<f64>,
        dicts: Option<bool>,
    ) -> PyResult<Watch> {
        make_watch(
            &self.shared,
            kind,
            namespace,
            label_selector,
            api_version,
            timeout,
            dicts,
        )
    }

    /// Submits a GryviaAIJob; with `wait`, returns it once it Succeeded or Failed (raises
    /// `GryviaError` after `timeout` seconds).
    #[pyo3(signature = (job, wait=false, timeout=600.0))]
    fn submit(
        &self,
        py: Python<'_>,
        job: &Bound<'_, PyAny>,
        wait: bool,
        timeout: f64,
    ) -> PyResult<Py<PyAny>> {
        let value = submitted_job(job)?;
        let timeout = seconds("timeout", timeout)?;
        block(py, op_submit(self.shared.clone(), value, wait, timeout))
    }

    /// Waits until the GryviaAIJob `name` Succeeded or Failed and returns it.
    #[pyo3(signature = (name, namespace=None, timeout=600.0))]
    fn wait_job(
        &self,
        py: Python<'_>,
        name: &str,
        namespace: Option<String>,
        timeout: f64,
    ) -> PyResult<Py<PyAny>> {
        let timeout = seconds("timeout", timeout)?;
        block(
            py,
            op_wait_job(self.shared.clone(), namespace, name.to_owned(), timeout),
        )
    }

    /// Installs or updates every Gryvia CRD and waits until they are Established; returns
    /// their names.
    #[pyo3(signature = (timeout=60.0))]
    fn install_crds(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<String>> {
        let timeout = seconds("timeout", timeout)?;
        block(py, op_install_crds(self.shared.clone(), timeout))
    }
}

/// A Kubernetes client with asyncio methods: the methods of `Client`, each returning an
/// awaitable; `watch` returns an async iterator.
#[pyclass(module = "gryvia._gryvia", frozen)]
pub struct AsyncClient {
    shared: Shared,
}

#[pymethods]
impl AsyncClient {
    #[new]
    #[pyo3(signature = (kubeconfig=None, context=None, field_manager=None))]
    fn new(
        py: Python<'_>,
        kubeconfig: Option<String>,
        context: Option<String>,
        field_manager: Option<String>,
    ) -> PyResult<Self> {
        Ok(AsyncClient {
            shared: connect(py, kubeconfig, context, field_manager)?,
        })
    }

    /// The namespace of the configuration's context (`default` when it names none).
    #[getter]
    fn namespace(&self) -> String {
        self.shared.resources.default_namespace().to_owned()
    }

    /// Reads one object; raises `NotFoundError` when it does not exist. With `dicts=True` it
    /// comes as a dict, with `dicts=False` as an object (`Resource` for kinds not Gryvia's);
    /// unset, as an object for Gryvia kinds and a dict for others.
    #[pyo3(signature = (kind, name, namespace=None, api_version=None, dicts=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        name: &str,
        namespace: Option<String>,
        api_version: Option<&str>,
        dicts: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let av = api_version_of(kind, api_version)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_get(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                name.to_owned(),
                dicts,
            ),
        )
    }

    /// Lists objects in `namespace`, or in every namespace without one. With `dicts=True` they
    /// come as dicts, with `dicts=False` as objects (`Resource` for kinds not Gryvia's, each
    /// kept as the server's JSON until read); unset, as objects for Gryvia kinds and dicts for
    /// others.
    #[pyo3(signature = (kind, namespace=None, label_selector=None, api_version=None, dicts=None))]
    fn list<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        namespace: Option<String>,
        label_selector: Option<String>,
        api_version: Option<&str>,
        dicts: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let av = api_version_of(kind, api_version)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_list(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                label_selector,
                dicts,
            ),
        )
    }

    /// Creates an object (a `Resource` or a dict); raises `ConflictError` when it exists.
    fn create<'py>(&self, py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let value = input(obj)?;
        pyo3_async_runtimes::tokio::future_into_py(py, op_create(self.shared.clone(), value))
    }

    /// Server-side applies an object; `force` takes fields over from other managers.
    #[pyo3(signature = (obj, force=true, field_manager=None))]
    fn apply<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        force: bool,
        field_manager: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = input(obj)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_apply(self.shared.clone(), value, field_manager, force),
        )
    }

    /// Deletes an object; `False` when it did not exist.
    #[pyo3(signature = (kind, name, namespace=None, api_version=None))]
    fn delete<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        name: &str,
        namespace: Option<String>,
        api_version: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let av = api_version_of(kind, api_version)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_delete(
                self.shared.clone(),
                av,
                kind.to_owned(),
                namespace,
                name.to_owned(),
            ),
        )
    }

    /// Watches a kind: an async iterator of `WatchEvent`s (ends after `timeout` seconds if
    /// given); their objects come as `list`'s, by `dicts`.
    #[pyo3(signature = (kind, namespace=None, label_selector=None, api_version=None, timeout=None, dicts=None))]
    fn watch(
        &self,
        kind: &str,
        namespace: Option<String>,
        label_selector: Option<String>,
        api_version: Option<&str>,
        timeout: Option<f64>,
        dicts: Option<bool>,
    ) -> PyResult<Watch> {
        make_watch(
            &self.shared,
            kind,
            namespace,
            label_selector,
            api_version,
            timeout,
            dicts,
        )
    }

    /// Submits a GryviaAIJob; with `wait`, the result is the job once it Succeeded or Failed.
    #[pyo3(signature = (job, wait=false, timeout=600.0))]
    fn submit<'py>(
        &self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
        wait: bool,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = submitted_job(job)?;
        let timeout = seconds("timeout", timeout)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_submit(self.shared.clone(), value, wait, timeout),
        )
    }

    /// Waits until the GryviaAIJob `name` Succeeded or Failed; the result is the job.
    #[pyo3(signature = (name, namespace=None, timeout=600.0))]
    fn wait_job<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        namespace: Option<String>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds("timeout", timeout)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_wait_job(self.shared.clone(), namespace, name.to_owned(), timeout),
        )
    }

    /// Installs or updates every Gryvia CRD and waits until they are Established.
    #[pyo3(signature = (timeout=60.0))]
    fn install_crds<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds("timeout", timeout)?;
        pyo3_async_runtimes::tokio::future_into_py(
            py,
            op_install_crds(self.shared.clone(), timeout),
        )
    }
}

/// Registers the client classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<AsyncClient>()?;
    m.add_class::<Watch>()?;
    m.add_class::<WatchEvent>()?;
    Ok(())
}
