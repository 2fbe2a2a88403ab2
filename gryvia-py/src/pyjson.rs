//! JSON straight into Python objects, in one pass over the text with nothing in between: each
//! item of a list or watch of a kind that is not Gryvia's, and `to_dict` of an object read from
//! the server. The same few hundred keys repeat in every object: each is made into a Python
//! string (interned) once per process and shared, its hash computed once. Short values repeat
//! too, and the last one seen in each slot of a cache is shared the same way: to_dict() of
//! 50,000 listed GryviaAIJobs (the collector off) took 0.48 to 0.50 s against 0.60 to 0.70 s
//! without, and a list of them as dicts holds 192 to 212 MB against 330 to 343 MB.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::TypeMeta;

/// Why the text is not one JSON value (with the line and column), or the Python error met
/// while building it.
#[derive(Debug)]
pub(crate) struct DecodeError(String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<PyErr> for DecodeError {
    fn from(e: PyErr) -> Self {
        DecodeError(e.to_string())
    }
}

/// Keys longer than this are made anew each time, not kept.
const KEPT_KEY_LEN: usize = 64;
/// Slots of each of the string caches, keys and values (a power of two): a string shares its
/// slot with others of the same hash and the last one made stays.
const CACHE_SLOTS: usize = 4096;
/// Objects and arrays nested deeper than this are refused (Python's own recursion limit is
/// 1,000).
const MAX_DEPTH: usize = 512;

/// Short string values longer than this are made anew each time, not kept.
const KEPT_VALUE_LEN: usize = 40;

/// Strings made so far, by a hash of their text: the keys (interned: they live as long as the
/// process) and the short values, which repeat from object to object too (an image, a label's
/// value, `Update`, `FieldsV1`, a manager's name, a timestamp of objects made in the same
/// second), not interned, so a value that is replaced in its slot is freed with its last user.
struct StringCache {
    keys: Vec<Option<(Box<str>, Py<PyString>)>>,
    values: Vec<Option<(Box<str>, Py<PyString>)>>,
}

impl StringCache {
    fn new() -> Self {
        StringCache {
            keys: (0..CACHE_SLOTS).map(|_| None).collect(),
            values: (0..CACHE_SLOTS).map(|_| None).collect(),
        }
    }

    fn key<'py>(&mut self, py: Python<'py>, key: &str) -> Bound<'py, PyString> {
        cached(&mut self.keys, py, key, PyString::intern)
    }

    fn value<'py>(&mut self, py: Python<'py>, value: &str) -> Bound<'py, PyString> {
        cached(&mut self.values, py, value, PyString::new)
    }
}

/// The string of `text` from its slot in `slots`, or made with `make` and kept there (in place
/// of the one that was).
fn cached<'py>(
    slots: &mut [Option<(Box<str>, Py<PyString>)>],
    py: Python<'py>,
    text: &str,
    make: fn(Python<'py>, &str) -> Bound<'py, PyString>,
) -> Bound<'py, PyString> {
    let slot = &mut slots[key_hash(text.as_bytes()) & (CACHE_SLOTS - 1)];
    if let Some((kept, s)) = slot
        && **kept == *text
    {
        return s.bind(py).clone();
    }
    let s = make(py, text);
    *slot = Some((text.into(), s.clone().unbind()));
    s
}

/// A hash of a key or short value, eight bytes at a time (most take one or two steps).
fn key_hash(key: &[u8]) -> usize {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = key.len() as u64;
    let mut words = key.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    (h >> 32) as usize
}

/// The process's string cache (behind the GIL, so never contended; a decode that finds it in use,
/// from a finalizer run in the middle of another, uses a cache of its own).
static STRINGS: Mutex<Option<StringCache>> = Mutex::new(None);

fn with_strings<R>(f: impl FnOnce(&mut StringCache) -> R) -> R {
    match STRINGS.try_lock() {
        Ok(mut strings) => f(strings.get_or_insert_with(StringCache::new)),
        Err(_) => f(&mut StringCache::new()),
    }
}

/// A string's text: as it stands in the JSON, or (with escapes) decoded into the scratch buffer.
enum Text<'s> {
    Plain(&'s str),
    Escaped,
}

struct Parser<'s, 'py, 'k> {
    py: Python<'py>,
    s: &'s str,
    b: &'s [u8],
    i: usize,
    depth: usize,
    strings: &'k mut StringCache,
    scratch: String,
}

type Built<'py> = Result<Bound<'py, PyAny>, DecodeError>;

impl<'s, 'py> Parser<'s, 'py, '_> {
    /// "expected `what` at line L column C" for the byte at `at`.
    fn fail_at(&self, at: usize, what: &str) -> DecodeError {
        let before = &self.b[..at.min(self.b.len())];
        let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != b'\n').count() + 1;
        DecodeError(format!("expected {what} at line {line} column {column}"))
    }

    fn fail(&self, what: &str) -> DecodeError {
        self.fail_at(self.i, what)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Built<'py> {
        self.ws();
        let py = self.py;
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(self.string()?.into_any()),
            Some(b't') => self.literal("true", PyBool::new(py, true).to_owned().into_any()),
            Some(b'f') => self.literal("false", PyBool::new(py, false).to_owned().into_any()),
            Some(b'n') => self.literal("null", py.None().into_bound(py)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.fail("a JSON value")),
        }
    }

    fn literal(&mut self, word: &str, v: Bound<'py, PyAny>) -> Built<'py> {
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.fail("a JSON value"))
        }
    }

    fn enter(&mut self) -> Result<(), DecodeError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.fail("at most 512 levels of nesting"));
        }
        self.i += 1;
        self.ws();
        Ok(())
    }

    fn object(&mut self) -> Built<'py> {
        self.enter()?;
        let dict = PyDict::new(self.py);
        if self.peek() == Some(b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(dict.into_any());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.fail("a key (a string)"));
            }
            let key = self.key()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.fail("`:`"));
            }
            self.i += 1;
            let v = self.value()?;
            dict.set_item(key, v)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.fail("`,` or `}`")),
            }
        }
        self.depth -= 1;
        Ok(dict.into_any())
    }

    fn array(&mut self) -> Built<'py> {
        self.enter()?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.i += 1;
        } else {
            loop {
                items.push(self.value()?);
                self.ws();
                match self.peek() {
                    Some(b',') => self.i += 1,
                    Some(b']') => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err(self.fail("`,` or `]`")),
                }
            }
        }
        self.depth -= 1;
        Ok(PyList::new(self.py, items)?.into_any())
    }

    fn string(&mut self) -> Result<Bound<'py, PyString>, DecodeError> {
        Ok(match self.text()? {
            Text::Plain(t) if t.len() <= KEPT_VALUE_LEN => self.strings.value(self.py, t),
            Text::Plain(t) => PyString::new(self.py, t),
            Text::Escaped => PyString::new(self.py, &self.scratch),
        })
    }

    fn key(&mut self) -> Result<Bound<'py, PyString>, DecodeError> {
        Ok(match self.text()? {
            Text::Plain(t) if t.len() <= KEPT_KEY_LEN => self.strings.key(self.py, t),
            Text::Plain(t) => PyString::new(self.py, t),
            Text::Escaped => PyString::new(self.py, &self.scratch),
        })
    }

    /// A slice of the text between two ASCII bytes (so on character boundaries).
    fn slice(&self, from: usize, to: usize) -> Result<&'s str, DecodeError> {
        let s: &'s str = self.s;
        s.get(from..to)
            .ok_or_else(|| self.fail_at(from, "a string"))
    }

    /// The string starting at `i` (its `"`); `i` then follows its closing `"`.
    fn text(&mut self) -> Result<Text<'s>, DecodeError> {
        let b = self.b;
        let start = self.i + 1;
        let mut j = start;
        loop {
            match b.get(j) {
                Some(b'"') => {
                    self.i = j + 1;
                    return self.slice(start, j).map(Text::Plain);
                }
                Some(b'\\') => break,
                Some(c) if *c < 0x20 => {
                    return Err(self.fail_at(j, "no control character in a string"));
                }
                Some(_) => j += 1,
                None => return Err(self.fail_at(j, "the end of a string")),
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.push_str(self.slice(start, j)?);
        let done = self.unescape(j, &mut scratch);
        self.scratch = scratch;
        done.map(|()| Text::Escaped)
    }

    /// Decodes the rest of a string with escapes, from `j` (a `\`), into `out`.
    fn unescape(&mut self, mut j: usize, out: &mut String) -> Result<(), DecodeError> {
        let b = self.b;
        loop {
            match b.get(j) {
                Some(b'"') => {
                    self.i = j + 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    let c = match b.get(j + 1) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            let (c, len) = self.unicode_escape(j)?;
                            out.push(c);
                            j += len;
                            continue;
                        }
                        _ => return Err(self.fail_at(j + 1, "an escape (one of \"\\/bfnrtu)")),
                    };
                    out.push(c);
                    j += 2;
                }
                Some(c) if *c < 0x20 => {
                    return Err(self.fail_at(j, "no control character in a string"));
                }
                Some(_) => {
                    let from = j;
                    while let Some(&c) = b.get(j) {
                        if c == b'"' || c == b'\\' || c < 0x20 {
                            break;
                        }
                        j += 1;
                    }
                    out.push_str(self.slice(from, j)?);
                }
                None => return Err(self.fail_at(j, "the end of a string")),
            }
        }
    }

    /// The character of `\uXXXX` at `j` (with its low surrogate's `\uXXXX` after a high one),
    /// and the bytes it took.
    fn unicode_escape(&self, j: usize) -> Result<(char, usize), DecodeError> {
        let hex = |at: usize| -> Result<u32, DecodeError> {
            self.b
                .get(at..at + 4)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .ok_or_else(|| self.fail_at(at, "four hex digits"))
        };
        let first = hex(j + 2)?;
        match first {
            0xD800..=0xDBFF => {
                if self.b.get(j + 6..j + 8) != Some(b"\\u".as_slice()) {
                    return Err(self.fail_at(j + 6, "a low surrogate after a high one"));
                }
                let second = hex(j + 8)?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.fail_at(j + 8, "a low surrogate after a high one"));
                }
                let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                char::from_u32(c)
                    .map(|c| (c, 12))
                    .ok_or_else(|| self.fail_at(j, "a character"))
            }
            0xDC00..=0xDFFF => Err(self.fail_at(j, "a high surrogate before a low one")),
            _ => char::from_u32(first)
                .map(|c| (c, 6))
                .ok_or_else(|| self.fail_at(j, "a character")),
        }
    }

    fn number(&mut self) -> Built<'py> {
        let b = self.b;
        let start = self.i;
        let mut j = start;
        let digits = |mut j: usize| {
            while let Some(b'0'..=b'9') = b.get(j) {
                j += 1;
            }
            j
        };
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        match b.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => j = digits(j),
            _ => return Err(self.fail_at(j, "a digit")),
        }
        let mut float = false;
        if b.get(j) == Some(&b'.') {
            float = true;
            let end = digits(j + 1);
            if end == j + 1 {
                return Err(self.fail_at(end, "a digit after `.`"));
            }
            j = end;
        }
        if let Some(b'e' | b'E') = b.get(j) {
            float = true;
            j += 1;
            if let Some(b'+' | b'-') = b.get(j) {
                j += 1;
            }
            let end = digits(j);
            if end == j {
                return Err(self.fail_at(end, "a digit in the exponent"));
            }
            j = end;
        }
        self.i = j;
        let text = self.slice(start, j)?;
        let py = self.py;
        if !float {
            if let Ok(n) = text.parse::<i64>() {
                let Ok(n) = n.into_pyobject(py);
                return Ok(n.into_any());
            }
            // Beyond 64 bits: Python's own int.
            return Ok(py.get_type::<PyInt>().call1((text,))?);
        }
        let f: f64 = text.parse().map_err(|_| self.fail_at(start, "a number"))?;
        Ok(PyFloat::new(py, f).into_any())
    }
}

/// One JSON document as Python (`dict`, `list`, `str`, `int`, `float`, `bool`, `None`).
///
/// # Errors
/// When the bytes are not UTF-8 or not exactly one JSON value (naming the line and column).
pub(crate) fn value<'py>(py: Python<'py>, json: &[u8]) -> Built<'py> {
    let s = std::str::from_utf8(json)
        .map_err(|e| DecodeError(format!("not UTF-8 after byte {}", e.valid_up_to())))?;
    with_strings(|strings| {
        let mut p = Parser {
            py,
            s,
            b: s.as_bytes(),
            i: 0,
            depth: 0,
            strings,
            scratch: String::new(),
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(p.fail("the end of the document"));
        }
        Ok(v)
    })
}

/// An object's JSON as a dict, with `apiVersion` and `kind` filled in where it lacks them
/// (items of a list of a built-in kind carry neither).
///
/// # Errors
/// As [`value`].
pub(crate) fn object<'py>(
    py: Python<'py>,
    json: &[u8],
    api_version: &str,
    kind: &str,
) -> Built<'py> {
    let v = value(py, json)?;
    if let Ok(d) = v.cast::<PyDict>() {
        for (key, wanted) in [
            (pyo3::intern!(py, "apiVersion"), api_version),
            (pyo3::intern!(py, "kind"), kind),
        ] {
            if !d.contains(key)? {
                d.set_item(key, with_strings(|strings| strings.key(py, wanted)))?;
            }
        }
    }
    Ok(v)
}

/// The cyclic garbage collector paused while a batch of objects is built, and resumed after
/// (unless it was off already), with the young generation collected every 16 KB of JSON built
/// ([`GcPause::object_dict`]). Left running, the collector's full collections, set off again and
/// again as the heap grows, walk everything built so far: a list of 5,000 Jobs decoded item by
/// item took 0.166 s with it running, 0.075 s paused per batch of 10 items (the collection
/// after it not counted). But paused throughout, all that was built waits in the young
/// generation for the next collection, which then walks hundreds of thousands of containers
/// gone cold in the cache: the 5,000 Jobs' dicts (13.3 MB of JSON, 380,000 objects) took 0.11
/// to 0.20 s to collect after the list. Collected young while still in the cache, a few items
/// at a time, they cost about 0.02 s (`json.loads` of each item with the collector paused:
/// 0.13 s to build and 0.13 to 0.17 s for the collection after, against 0.14 to 0.15 s in all
/// with the young generation collected every 3 to 10 items and the next one every tenth of
/// those). A full collection that falls due meanwhile (the collector makes one once its oldest
/// generation grew by a quarter) comes at the first allocation after the pause, as for any
/// code that builds objects with the collector paused. Made and dropped with the GIL held
/// throughout, so no other thread ever sees the collector paused.
pub(crate) struct GcPause<'py>(Option<Bound<'py, PyAny>>);

/// JSON built into Python objects between two collections of the young generation, about
/// 6 Jobs (CPython's own threshold, 700 containers, is about 9).
const YOUNG_BYTES: usize = 16 * 1024;
/// Every this many young collections, the next generation is collected too (CPython's own
/// ratio), so that what survives moves on to the oldest and is not walked again.
const MIDDLE_EVERY: usize = 10;

/// Bytes of JSON built since the last young collection, and young collections so far: for
/// the whole process, as the collector's generations are (changed with the GIL held only).
static BUILT: AtomicUsize = AtomicUsize::new(0);
static YOUNG: AtomicUsize = AtomicUsize::new(0);

impl<'py> GcPause<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        static GC: pyo3::sync::PyOnceLock<Py<PyModule>> = pyo3::sync::PyOnceLock::new();
        let Ok(gc) = GC.get_or_try_init(py, || py.import("gc").map(Bound::unbind)) else {
            return GcPause(None);
        };
        let gc = gc.bind(py).clone().into_any();
        let running = gc
            .call_method0(pyo3::intern!(py, "isenabled"))
            .and_then(|b| b.extract::<bool>())
            .unwrap_or(false);
        if running && gc.call_method0(pyo3::intern!(py, "disable")).is_ok() {
            GcPause(Some(gc))
        } else {
            GcPause(None)
        }
    }

    /// An object of `meta`'s kind from the server's JSON of it, as a dict (`apiVersion` and
    /// `kind` filled in where a list's item leaves them out), built under this pause and
    /// counted toward its next young collection ([`GcPause::built`]).
    pub(crate) fn object_dict(
        &self,
        py: Python<'_>,
        json: &str,
        meta: &TypeMeta,
    ) -> PyResult<Py<PyAny>> {
        let dict = object(py, json.as_bytes(), &meta.api_version, &meta.kind)
            .map(Bound::unbind)
            .map_err(|e| crate::GryviaError::new_err(format!("decode a {}: {e}", meta.kind)));
        self.built(json.len());
        dict
    }

    /// `bytes` of JSON were built into Python objects: the young generation is collected
    /// when 16 KB were since the last time (never when the caller had the collector off).
    fn built(&self, bytes: usize) {
        let Some(gc) = &self.0 else {
            return;
        };
        if BUILT.fetch_add(bytes, Ordering::Relaxed) + bytes < YOUNG_BYTES {
            return;
        }
        BUILT.store(0, Ordering::Relaxed);
        let n = YOUNG.fetch_add(1, Ordering::Relaxed) + 1;
        let generation = usize::from(n.is_multiple_of(MIDDLE_EVERY));
        // A failed collection (a finalizer's error is reported, not raised) leaves the next to
        // the collector.
        let _ = gc.call_method1(pyo3::intern!(gc.py(), "collect"), (generation,));
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.0 {
            let _ = gc.call_method0(pyo3::intern!(gc.py(), "enable"));
        }
    }
}
