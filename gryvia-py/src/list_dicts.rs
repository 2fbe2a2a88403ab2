//! `to_dict()` of a list's items, a batch at a time. An item kept as an object (every item of a
//! Gryvia kind, and of any kind with `dicts=False`) stays the server's JSON until it is read; a
//! loop that calls `to_dict()` on every item builds a few dozen containers per item, and those
//! set off the garbage collector over and over, each collection of the older generations
//! walking everything the loop built so far. So when an item's `to_dict()` comes in a loop over
//! the list (the first item's first, or the third of a run of items in order), the dicts of the
//! next items are built with it under one pause, and each is handed out on its own item's next
//! `to_dict()`. The same list's items in order against in reverse (item by item), against
//! testenv: 5,000 items 0.091 s against 0.149 s (0.102 s against 0.260 s with 50,000 other
//! objects' dicts alive), 50,000 items 1.24 s against 2.00 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::prelude::*;

use crate::pyjson::GcPause;
use crate::{GryviaError, TypeMeta};

/// Items whose dicts are built together, at most.
const AHEAD: usize = 256;

/// The items of one list kept as objects, as the server's JSON, in their order.
pub(crate) struct ListDicts {
    meta: Arc<TypeMeta>,
    items: Mutex<Vec<Arc<str>>>,
    ahead: Mutex<Ahead>,
}

#[derive(Default)]
struct Ahead {
    /// The item whose dict was asked for last.
    last: Option<usize>,
    /// How many asks in a row before that one were each for the item after the one before.
    run: usize,
    /// Dicts built ahead, by item; each is handed out once, on its item's next `to_dict()`.
    built: HashMap<usize, Py<PyAny>>,
}

impl ListDicts {
    pub(crate) fn new(meta: Arc<TypeMeta>) -> Arc<Self> {
        Arc::new(ListDicts {
            meta,
            items: Mutex::new(Vec::new()),
            ahead: Mutex::new(Ahead::default()),
        })
    }

    /// Adds the next item; its place in the list.
    pub(crate) fn push(&self, json: Arc<str>) -> usize {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        items.push(json);
        items.len() - 1
    }

    /// A new dict of item `index`: the one built ahead for it, or built now, with the next
    /// items' under one collector pause when this looks like a loop over the list.
    pub(crate) fn dict(&self, py: Python<'_>, index: usize) -> PyResult<Py<PyAny>> {
        let (in_order, ready) = {
            let mut a = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
            let first = a.last.is_none() && index == 0;
            a.run = match a.last {
                Some(last) if index == last + 1 => a.run + 1,
                _ => 0,
            };
            a.last = Some(index);
            (first || a.run >= 2, a.built.remove(&index))
        };
        if let Some(dict) = ready {
            return Ok(dict);
        }
        let jsons: Vec<Arc<str>> = {
            let items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
            let end = if in_order { index + AHEAD } else { index + 1 };
            items
                .get(index..end.min(items.len()))
                .unwrap_or_default()
                .to_vec()
        };
        let paused = GcPause::new(py);
        let mut dicts = Vec::with_capacity(jsons.len());
        for json in &jsons {
            dicts.push(paused.object_dict(py, json, &self.meta)?);
        }
        let mut dicts = dicts.into_iter();
        let first = dicts.next().ok_or_else(|| {
            GryviaError::new_err(format!(
                "{}: item {index} is not in its list",
                self.meta.kind
            ))
        })?;
        let mut a = self.ahead.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, dict) in (index + 1..).zip(dicts) {
            a.built.entry(i).or_insert(dict);
        }
        Ok(first)
    }
}
