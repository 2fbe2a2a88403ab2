//! JSON straight into Python objects: one pass over the bytes, with no `serde_json::Value` in
//! between (the list of a kind that is not Gryvia's, and `to_dict` of an object read from the
//! server). The same few dozen keys repeat in every object of a list: each is made into a
//! Python string once per document and shared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

fn custom<E: de::Error>(e: PyErr) -> E {
    E::custom(e)
}

/// The keys seen in one document, as Python strings (keys longer than this are not kept).
type Keys<'py> = RefCell<HashMap<Box<str>, Bound<'py, PyString>>>;
const KEPT_KEY_LEN: usize = 64;
const KEPT_KEYS: usize = 4096;

/// Builds the Python value of one JSON value (`dict`, `list`, `str`, `int`, `float`, `bool`,
/// `None`).
#[derive(Clone, Copy)]
pub(crate) struct Build<'a, 'py>(pub(crate) Python<'py>, &'a Keys<'py>);

impl<'de, 'py> DeserializeSeed<'de> for Build<'_, 'py> {
    type Value = Bound<'py, PyAny>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for Build<'_, 'py> {
    type Value = Bound<'py, PyAny>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.0.None().into_bound(self.0))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        Ok(PyBool::new(self.0, b).to_owned().into_any())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        let Ok(i) = v.into_pyobject(self.0);
        Ok(i.into_any())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        let Ok(i) = v.into_pyobject(self.0);
        Ok(i.into_any())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(PyFloat::new(self.0, v).into_any())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        Ok(PyString::new(self.0, s).into_any())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.0);
        while let Some(v) = seq.next_element_seed(self)? {
            list.append(v).map_err(custom)?;
        }
        Ok(list.into_any())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let dict = PyDict::new(self.0);
        while let Some(k) = map.next_key_seed(Key(self.0, self.1))? {
            let v = map.next_value_seed(self)?;
            dict.set_item(k, v).map_err(custom)?;
        }
        Ok(dict.into_any())
    }
}

/// A dict key, shared with the same key elsewhere in the document.
struct Key<'a, 'py>(Python<'py>, &'a Keys<'py>);

impl<'de, 'py> DeserializeSeed<'de> for Key<'_, 'py> {
    type Value = Bound<'py, PyString>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, 'py> Visitor<'de> for Key<'_, 'py> {
    type Value = Bound<'py, PyString>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
        if s.len() > KEPT_KEY_LEN {
            return Ok(PyString::new(self.0, s));
        }
        let mut keys = self.1.borrow_mut();
        if let Some(k) = keys.get(s) {
            return Ok(k.clone());
        }
        let k = PyString::new(self.0, s);
        if keys.len() < KEPT_KEYS {
            keys.insert(s.into(), k.clone());
        }
        Ok(k)
    }
}

/// The `items` of a list response, each a dict with `apiVersion` and `kind` set where the
/// list leaves them out (lists of built-in kinds do).
struct Items<'a, 'py> {
    py: Python<'py>,
    keys: &'a Keys<'py>,
    api_version: &'a str,
    kind: &'a str,
}

impl<'de, 'py> DeserializeSeed<'de> for Items<'_, 'py> {
    type Value = Bound<'py, PyList>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for Items<'_, 'py> {
    type Value = Bound<'py, PyList>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of objects or null")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(PyList::empty(self.py))
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.py);
        let identity = [
            (PyString::intern(self.py, "apiVersion"), self.api_version),
            (PyString::intern(self.py, "kind"), self.kind),
        ];
        while let Some(item) = seq.next_element_seed(Build(self.py, self.keys))? {
            if let Ok(dict) = item.cast::<PyDict>() {
                for (key, value) in &identity {
                    if !dict.contains(key).map_err(custom)? {
                        dict.set_item(key, value).map_err(custom)?;
                    }
                }
            }
            list.append(item).map_err(custom)?;
        }
        Ok(list)
    }
}

/// The list response as Python: its items (the rest is skipped, not built).
struct ListBody<'a, 'py>(Items<'a, 'py>);

impl<'de, 'py> DeserializeSeed<'de> for ListBody<'_, 'py> {
    type Value = Bound<'py, PyList>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'py> Visitor<'de> for ListBody<'_, 'py> {
    type Value = Bound<'py, PyList>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list response (an object with items)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let py = self.0.py;
        let mut items = None;
        let mut seed = Some(self.0);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match (key.as_ref(), seed.take()) {
                ("items", Some(s)) => items = Some(map.next_value_seed(s)?),
                (_, s) => {
                    seed = s;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(items.unwrap_or_else(|| PyList::empty(py)))
    }
}

/// The items of a list response body as Python dicts, `apiVersion` and `kind` filled in.
///
/// # Errors
/// A `ValueError`-like message naming where the JSON is malformed.
pub(crate) fn list_items<'py>(
    py: Python<'py>,
    body: &[u8],
    api_version: &str,
    kind: &str,
) -> Result<Bound<'py, PyList>, serde_json::Error> {
    let keys = Keys::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let list = ListBody(Items {
        py,
        keys: &keys,
        api_version,
        kind,
    })
    .deserialize(&mut de)?;
    de.end()?;
    Ok(list)
}

/// One JSON document as Python.
///
/// # Errors
/// When the bytes are not one JSON value.
pub(crate) fn value<'py>(
    py: Python<'py>,
    json: &[u8],
) -> Result<Bound<'py, PyAny>, serde_json::Error> {
    let keys = Keys::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    let v = Build(py, &keys).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}
