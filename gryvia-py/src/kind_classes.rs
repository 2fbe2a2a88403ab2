//! One Python class per Gryvia kind (`gryvia.GryviaAIJob` ...), each a subclass of
//! `Resource`: objects the SDK returns are of their kind's class, and
//! `gryvia.GryviaAIJob({...})` builds one (its `apiVersion` and `kind` may be left out). The
//! list of kinds is `kinds.rs`, generated with the typed stubs by `gen_kinds.py`.

use std::sync::Arc;

use pyo3::PyClassInitializer;
use pyo3::prelude::*;
use serde_json::Value;

use crate::list_dicts::ListDicts;
use crate::{Resource, TypeMeta, ValidationError, normalize, to_json};

/// `data` as an object of `kind`: `apiVersion` and `kind` filled in when left out, refused
/// (naming the field) when they name something else.
fn of_kind(kind: &str, data: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut value = to_json(data)?;
    let Some(map) = value.as_object_mut() else {
        return Err(ValidationError::new_err(format!(
            "{kind}: expected an object (a dict)"
        )));
    };
    for (field, wanted) in [("apiVersion", gryvia_types::API_VERSION), ("kind", kind)] {
        match map.get(field).map(Value::as_str) {
            None => {
                map.insert(field.to_owned(), Value::from(wanted));
            }
            Some(Some(given)) if given == wanted => {}
            Some(given) => {
                return Err(ValidationError::new_err(format!(
                    "{field}: is {}, expected {wanted:?} for a {kind}",
                    given.map_or_else(|| "not a string".to_owned(), |g| format!("{g:?}"))
                )));
            }
        }
    }
    normalize(&value)
}

/// Makes an object of one Gryvia kind's class from the server's JSON of it (its `apiVersion`
/// and `kind` are `meta`), kept unparsed, as the next item of a list when one is given.
pub(crate) type Unparsed =
    fn(Python<'_>, &str, &Arc<TypeMeta>, Option<&Arc<ListDicts>>) -> PyResult<Py<PyAny>>;

macro_rules! kind_classes {
    ($($kind:ident),* $(,)?) => {
        $(
            #[doc = concat!("A ", stringify!($kind), ", validated like the API server validates it.")]
            #[pyclass(module = "gryvia._gryvia", frozen, extends = Resource)]
            pub struct $kind;

            #[pymethods]
            impl $kind {
                #[new]
                fn new(data: &Bound<'_, PyAny>) -> PyResult<PyClassInitializer<Self>> {
                    let value = of_kind(stringify!($kind), data)?;
                    Ok(PyClassInitializer::from(Resource::new(value)).add_subclass($kind))
                }
            }
        )*

        /// A Gryvia object (validated already) as an instance of its kind's class; a plain
        /// `Resource` for a kind without one.
        pub(crate) fn typed_object(py: Python<'_>, value: Value) -> PyResult<Py<PyAny>> {
            let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
            match kind {
                $(stringify!($kind) => Ok(Py::new(
                    py,
                    PyClassInitializer::from(Resource::new(value)).add_subclass($kind),
                )?
                .into_any()),)*
                _ => Ok(Py::new(py, Resource::new(value))?.into_any()),
            }
        }

        /// How an object of `kind` is made from the server's JSON (kept as it is until read):
        /// `None` for a kind that is not Gryvia's.
        pub(crate) fn unparsed(kind: &str) -> Option<Unparsed> {
            match kind {
                $(stringify!($kind) => {
                    let make: Unparsed = |py, json, meta, list| {
                        Ok(Py::new(
                            py,
                            PyClassInitializer::from(Resource::unparsed(json, meta, list))
                                .add_subclass($kind),
                        )?
                        .into_any())
                    };
                    Some(make)
                })*
                _ => None,
            }
        }

        /// Adds every kind's class to the module.
        pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_class::<$kind>()?;)*
            Ok(())
        }
    };
}

include!("kinds.rs");
