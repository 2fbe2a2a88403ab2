//! Fields of an object read from the server's JSON of it, without parsing the rest: the view of
//! `job.spec` is where `spec` stands in the text, and reading `job.spec.gpus` goes through
//! `spec`'s keys, stepping over the values between (the metadata's managed fields, whole lists)
//! instead of building a tree of the whole object first. The text was checked as JSON when its
//! list or response was scanned; a scan that meets anything else stops with [`Malformed`] (it
//! never guesses).

use std::ops::Range;

/// The text is not the JSON it was checked to be, at this byte.
#[derive(Debug)]
pub(crate) struct Malformed(pub(crate) usize);

fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// The end (exclusive) of the string whose opening quote is at `i`: only `"` and `\` matter in
/// it, found a word at a time (`memchr2`); most of an object's text is strings (the managed
/// fields' keys, images, labels).
fn string_end(b: &[u8], i: usize) -> Result<usize, Malformed> {
    let mut j = i + 1;
    while let Some(k) = b
        .get(j..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        j += k;
        if b[j] == b'"' {
            return Ok(j + 1);
        }
        j += 2;
    }
    Err(Malformed(i))
}

/// The bytes that matter between the strings of an object or array.
const STRUCTURE: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'[' as usize] = true;
    t[b'}' as usize] = true;
    t[b']' as usize] = true;
    t
};

/// The end (exclusive) of the value that starts at `i`.
fn value_end(b: &[u8], i: usize) -> Result<usize, Malformed> {
    match b.get(i) {
        Some(b'"') => string_end(b, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                if !STRUCTURE[usize::from(b[j])] {
                    j += 1;
                    continue;
                }
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1).ok_or(Malformed(j))?;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Err(Malformed(i))
        }
        Some(_) => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            if j > i { Ok(j) } else { Err(Malformed(i)) }
        }
        None => Err(Malformed(i)),
    }
}

/// What the JSON value at `span` is, from its first byte.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Object,
    Array,
    /// A string, number, boolean or null.
    Scalar,
}

pub(crate) fn shape(json: &str, span: &Range<usize>) -> Shape {
    match json.as_bytes().get(span.start) {
        Some(b'{') => Shape::Object,
        Some(b'[') => Shape::Array,
        _ => Shape::Scalar,
    }
}

/// Where the value of member `key` of the object at `span` stands, if it has one.
pub(crate) fn member(
    json: &str,
    span: &Range<usize>,
    key: &str,
) -> Result<Option<Range<usize>>, Malformed> {
    let b = &json.as_bytes()[..span.end];
    let mut i = ws(b, span.start);
    if b.get(i) != Some(&b'{') {
        return Err(Malformed(i));
    }
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(None);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err(Malformed(i));
        }
        let key_end = string_end(b, i)?;
        let found = key_is(json, i..key_end, key);
        i = ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return Err(Malformed(i));
        }
        i = ws(b, i + 1);
        let end = value_end(b, i)?;
        if found {
            return Ok(Some(i..end));
        }
        i = ws(b, end);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => return Ok(None),
            _ => return Err(Malformed(i)),
        }
    }
}

/// Whether the quoted key at `quoted` reads `key` (decoding escapes where it has any).
fn key_is(json: &str, quoted: Range<usize>, key: &str) -> bool {
    let inner = &json[quoted.start + 1..quoted.end - 1];
    if inner.contains('\\') {
        serde_json::from_str::<String>(&json[quoted]).is_ok_and(|k| k == key)
    } else {
        inner == key
    }
}

/// Where each element of the array at `span` stands.
pub(crate) fn elements(json: &str, span: &Range<usize>) -> Result<Vec<Range<usize>>, Malformed> {
    let b = &json.as_bytes()[..span.end];
    let mut i = ws(b, span.start);
    if b.get(i) != Some(&b'[') {
        return Err(Malformed(i));
    }
    let mut out = Vec::new();
    i = ws(b, i + 1);
    if b.get(i) == Some(&b']') {
        return Ok(out);
    }
    loop {
        let end = value_end(b, i)?;
        out.push(i..end);
        i = ws(b, end);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b']') => return Ok(out),
            _ => return Err(Malformed(i)),
        }
    }
}

/// The whole text, less the whitespace around it.
pub(crate) fn whole(json: &str) -> Range<usize> {
    let start = json.len() - json.trim_start().len();
    start..json.trim_end().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = r#" {"metadata": {"name": "a\"b", "managedFields": [{"f:x": {"}": "]"}}]},
        "spec": {"gpus": 8, "env": [{"name": "A"}, 2, "x", [], {}], "ok": true, "n": null,
        "f": -1.5e3, "e\u0073c": "s"}} "#;

    fn at(span: Option<Range<usize>>) -> &'static str {
        span.map_or("<none>", |r| &JOB[r])
    }

    #[test]
    fn members_are_found_past_nested_values_and_strings_that_look_like_structure() {
        let top = whole(JOB);
        let spec = member(JOB, &top, "spec").unwrap().unwrap();
        assert_eq!(shape(JOB, &spec), Shape::Object);
        assert_eq!(at(member(JOB, &spec, "gpus").unwrap()), "8");
        assert_eq!(at(member(JOB, &spec, "ok").unwrap()), "true");
        assert_eq!(at(member(JOB, &spec, "n").unwrap()), "null");
        assert_eq!(at(member(JOB, &spec, "f").unwrap()), "-1.5e3");
        assert_eq!(at(member(JOB, &spec, "esc").unwrap()), r#""s""#);
        assert_eq!(member(JOB, &spec, "missing").unwrap(), None);
        let meta = member(JOB, &top, "metadata").unwrap().unwrap();
        assert_eq!(at(member(JOB, &meta, "name").unwrap()), r#""a\"b""#);
        // A key of a nested object is not a member of the outer one.
        assert_eq!(member(JOB, &top, "gpus").unwrap(), None);
        assert_eq!(member(JOB, &top, "f:x").unwrap(), None);
    }

    #[test]
    fn escapes_at_the_end_of_a_string_and_structure_inside_strings_are_stepped_over() {
        let text = r#"{"a\\": "x\\", "b": "\"}]", "c": ["\\\"[", {"d": "{"}], "e": 1}"#;
        let top = whole(text);
        assert_eq!(&text[member(text, &top, "e").unwrap().unwrap()], "1");
        assert_eq!(
            &text[member(text, &top, "a\\").unwrap().unwrap()],
            r#""x\\""#
        );
        let c = member(text, &top, "c").unwrap().unwrap();
        assert_eq!(elements(text, &c).unwrap().len(), 2);
        assert!(member(r#"{"a": "x\"}"#, &(0..11), "b").is_err());
    }

    #[test]
    fn elements_of_every_shape() {
        let spec = member(JOB, &whole(JOB), "spec").unwrap().unwrap();
        let env = member(JOB, &spec, "env").unwrap().unwrap();
        let items: Vec<&str> = elements(JOB, &env)
            .unwrap()
            .into_iter()
            .map(|r| &JOB[r])
            .collect();
        assert_eq!(items, [r#"{"name": "A"}"#, "2", r#""x""#, "[]", "{}"]);
        assert_eq!(
            elements("[ ]", &(0..3)).unwrap(),
            Vec::<Range<usize>>::new()
        );
    }

    #[test]
    fn text_that_is_not_what_was_checked_is_refused_not_guessed() {
        for bad in [
            r#"{"a" 1}"#,
            r#"{"a": 1"#,
            r#"{"a": "1}"#,
            r#"{a: 1}"#,
            "1",
            r#"{"a": 1]"#,
        ] {
            assert!(member(bad, &whole(bad), "b").is_err(), "{bad}");
        }
        for bad in ["[1 2]", "[1,", "[{]", "{}"] {
            assert!(elements(bad, &whole(bad)).is_err(), "{bad}");
        }
    }
}
