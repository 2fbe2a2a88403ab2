//! `Object`: the read-only view of a nested object of a resource (`job.spec`,
//! `job.spec.env[0]`), with attribute access. A view copies nothing. Of an object built or
//! parsed it shares the parsed tree and keeps the way to its node; of an object still kept as
//! the server's JSON (a list's, a get's or a watch's, not parsed whole) it shares the text and
//! keeps where its node stands in it, and a field is read by going through that node's keys
//! only (`rawjson`). Reading `spec.gpus` of every item of a list of 5,000 GryviaAIJobs took 1.2
//! to 1.6 us an item this way against 13.7 us through a parse of each whole item (testenv,
//! median of 5 lists); reading it again from one object, about 0.4 us from the text or from a
//! parsed tree, against 2.2 us when every `job.spec` cloned the subtree.
//!
//! One walk serves both kinds of view: [`Object::locate`] finds a member, [`to_python`] turns
//! a node into a view, a list or plain data.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};
use serde_json::Value;

use crate::rawjson::{self, Malformed, Shape};
use crate::{GryviaError, camel, pyjson, to_json, to_py};

/// A read-only view of a nested object of a resource, with attribute access.
#[pyclass(module = "gryvia._gryvia", frozen)]
pub struct Object {
    node: Node,
    /// The way from the resource to this node, for messages (and to the node, when parsed).
    path: Path,
}

/// What a view reads.
#[derive(Clone)]
enum Node {
    /// The whole object, parsed; the node is at the end of the view's path.
    Parsed(Arc<Value>),
    /// The server's JSON of the whole object, and where the node stands in it.
    Raw(Arc<str>, Range<usize>),
}

/// One step from an object to a node nested in it.
enum Step {
    Key(Box<str>),
    Index(usize),
}

/// The way from the resource to a node: its last step and the way to that step's object,
/// shared with the view it was taken from (a view of a node `n` levels down costs one step, not
/// a copy of `n`).
#[derive(Clone, Default)]
struct Path(Option<Arc<Link>>);

struct Link {
    up: Path,
    step: Step,
}

impl Path {
    fn then(&self, step: Step) -> Path {
        Path(Some(Arc::new(Link {
            up: self.clone(),
            step,
        })))
    }

    /// The node this way leads to from `root`.
    fn find<'v>(&self, root: &'v Value) -> Option<&'v Value> {
        let Some(link) = &self.0 else {
            return Some(root);
        };
        let up = link.up.find(root)?;
        match &link.step {
            Step::Key(k) => up.get(&**k),
            Step::Index(i) => up.get(*i),
        }
    }

    /// `spec.env[0].value`: where the node is, for messages.
    fn text(&self) -> String {
        let Some(link) = &self.0 else {
            return String::new();
        };
        let mut out = link.up.text();
        match &link.step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
        out
    }
}

/// The error for JSON that is not what its scan checked it to be (never expected).
fn malformed(e: Malformed) -> PyErr {
    GryviaError::new_err(format!(
        "the server's JSON of the object is not valid at byte {}",
        e.0
    ))
}

impl Object {
    /// A view of a whole parsed object.
    pub(crate) fn parsed(root: Arc<Value>) -> Self {
        Object {
            node: Node::Parsed(root),
            path: Path::default(),
        }
    }

    /// A view of a whole object kept as the server's JSON (one JSON object).
    pub(crate) fn raw(json: Arc<str>) -> Self {
        let span = rawjson::whole(&json);
        Object {
            node: Node::Raw(json, span),
            path: Path::default(),
        }
    }

    /// The node as a tree: borrowed when parsed, parsed from its text when not.
    pub(crate) fn value(&self) -> PyResult<Cow<'_, Value>> {
        match &self.node {
            Node::Parsed(root) => Ok(Cow::Borrowed(self.path.find(root).unwrap_or(&Value::Null))),
            Node::Raw(json, span) => serde_json::from_str(&json[span.clone()])
                .map(Cow::Owned)
                .map_err(|e| GryviaError::new_err(format!("the server's JSON: {e}"))),
        }
    }

    /// The view of the node `step` leads to, standing at `span` when the text is read.
    fn child(&self, step: Step, span: Range<usize>) -> Object {
        let path = self.path.then(step);
        let node = match &self.node {
            Node::Parsed(root) => Node::Parsed(root.clone()),
            Node::Raw(json, _) => Node::Raw(json.clone(), span),
        };
        Object { node, path }
    }

    /// The view of member `key` of this node, when it has one.
    pub(crate) fn locate(&self, key: &str) -> PyResult<Option<Object>> {
        let span = match &self.node {
            Node::Parsed(_) => self.value()?.get(key).map(|_| Range::default()),
            Node::Raw(json, span) => rawjson::member(json, span, key).map_err(malformed)?,
        };
        Ok(span.map(|span| self.child(Step::Key(key.into()), span)))
    }

    /// The views of this node's elements (it is an array).
    fn elements(&self) -> PyResult<Vec<Object>> {
        let spans = match &self.node {
            Node::Parsed(_) => {
                let len = self.value()?.as_array().map_or(0, Vec::len);
                vec![Range::default(); len]
            }
            Node::Raw(json, span) => rawjson::elements(json, span).map_err(malformed)?,
        };
        Ok(spans
            .into_iter()
            .enumerate()
            .map(|(i, span)| self.child(Step::Index(i), span))
            .collect())
    }

    /// The node as plain Python data.
    fn plain(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.node {
            Node::Parsed(_) => to_py(py, &*self.value()?),
            Node::Raw(json, span) => pyjson::value(py, json[span.clone()].as_bytes())
                .map(Bound::unbind)
                .map_err(|e| GryviaError::new_err(format!("the server's JSON: {e}"))),
        }
    }

    /// Member `key` of this node, as Python, when it has one.
    pub(crate) fn member(&self, py: Python<'_>, key: &str) -> PyResult<Option<Py<PyAny>>> {
        self.locate(key)?.map(|at| to_python(py, at)).transpose()
    }

    /// Field `name` (as written, or `batch_size` as `batchSize`), when set.
    pub(crate) fn field(&self, py: Python<'_>, name: &str) -> PyResult<Option<Py<PyAny>>> {
        if let Some(v) = self.member(py, name)? {
            return Ok(Some(v));
        }
        let key = camel(name);
        if key == name {
            return Ok(None);
        }
        self.member(py, &key)
    }

    /// The error for field `name`, not set here.
    pub(crate) fn not_set(&self, name: &str) -> PyErr {
        let at = self.child(Step::Key(camel(name).into_boxed_str()), Range::default());
        pyo3::exceptions::PyAttributeError::new_err(format!("{} is not set", at.path.text()))
    }

    /// Field `name`, or the error that it is not set.
    pub(crate) fn attr(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyAny>> {
        self.field(py, name)?.ok_or_else(|| self.not_set(name))
    }
}

/// The node of `at` as Python: the view itself for an object, a list of views (or values) for
/// an array, plain data otherwise.
fn to_python(py: Python<'_>, at: Object) -> PyResult<Py<PyAny>> {
    let shape = match &at.node {
        Node::Parsed(_) => match &*at.value()? {
            Value::Object(_) => Shape::Object,
            Value::Array(_) => Shape::Array,
            scalar => return to_py(py, scalar),
        },
        Node::Raw(json, span) => rawjson::shape(json, span),
    };
    match shape {
        Shape::Object => Ok(Py::new(py, at)?.into_any()),
        Shape::Array => {
            let list = PyList::empty(py);
            for element in at.elements()? {
                list.append(to_python(py, element)?)?;
            }
            Ok(list.into_any().unbind())
        }
        Shape::Scalar => at.plain(py),
    }
}

#[pymethods]
impl Object {
    /// A field first (the common case, found without a failed lookup of the class's
    /// attributes first); then the class's own (`to_dict`, `__class__` ...).
    fn __getattribute__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let text = name.to_cow()?;
        if !text.starts_with("__")
            && let Some(v) = slf.get().field(py, &text)?
        {
            return Ok(v);
        }
        static GENERIC: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
        let generic = GENERIC.get_or_try_init(py, || {
            py.get_type::<PyAny>()
                .getattr(pyo3::intern!(py, "__getattribute__"))
                .map(Bound::unbind)
        })?;
        generic.call1(py, (slf, name))
    }

    /// Called by Python when `__getattribute__` found nothing: the field is not set.
    fn __getattr__(&self, name: &str) -> PyResult<Py<PyAny>> {
        Err(if name.starts_with("__") {
            pyo3::exceptions::PyAttributeError::new_err(format!(
                "'Object' object has no attribute '{name}'"
            ))
        } else {
            self.not_set(name)
        })
    }

    fn __getitem__(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        self.member(py, key)?
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(key.to_owned()))
    }

    fn __contains__(&self, key: &str) -> PyResult<bool> {
        Ok(self.locate(key)?.is_some())
    }

    /// The nested object as plain Python data.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.plain(py)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let mine = self.value()?;
        Ok(match other.extract::<PyRef<'_, Object>>() {
            Ok(o) => *o.value()? == *mine,
            Err(_) => to_json(other).is_ok_and(|v| v == *mine),
        })
    }

    fn __repr__(&self) -> PyResult<String> {
        Ok(format!("Object({}: {})", self.path.text(), self.value()?))
    }
}
