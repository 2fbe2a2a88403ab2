//! The items of a list response cut out of the body while it streams in: a caller decodes the
//! first items while the API server is still sending the last ones (the Python SDK's lists and
//! watches). [`Splitter`] is pure (bytes in, item texts out) and tested with bodies cut at every
//! byte; [`Resources::list_stream`](crate::resources::Resources::list_stream) feeds it.

use std::fmt;

/// Where the splitter is in the list response `{"kind": ..., "metadata": {...}, "items": [...]}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Before the opening `{`.
    Start,
    /// Expecting a key or the closing `}`.
    Key,
    /// Inside a key.
    InKey,
    /// After a key, expecting `:`.
    Colon,
    /// Expecting a value of the response.
    Value,
    /// Inside a value of the response (not `items`).
    InValue,
    /// Inside `items`, expecting an item or `]`.
    Items,
    /// Inside an item.
    InItem,
    /// After a value of the response, expecting `,` or `}`.
    AfterValue,
    /// After an item, expecting `,` or `]`.
    AfterItem,
    /// After the closing `}`.
    End,
}

/// Why the body is not a list response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitError {
    /// What was expected.
    pub expected: &'static str,
    /// Bytes of the body before the offending one.
    pub offset: usize,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a list response: expected {} at byte {}",
            self.expected, self.offset
        )
    }
}

impl std::error::Error for SplitError {}

/// The bytes as text: checked as UTF-8 (std's check runs a word at a time over ASCII), with any
/// invalid sequence replaced by U+FFFD, which the item's parser then reads as it stands.
fn text_of(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// Cuts a list response into its items as the bytes arrive. Keeps only the bytes of the item
/// (or response field) under way between chunks. It checks the response's structure, not each
/// item's JSON: the caller parses every item and finds any error there.
#[derive(Debug)]
pub struct Splitter {
    at: At,
    /// Bytes not handed out yet, from `mark` (the start of the value under way) on.
    buf: Vec<u8>,
    /// Bytes of the body dropped from the front of `buf`.
    dropped: usize,
    /// Index in `buf` of the next byte to look at.
    pos: usize,
    /// Index in `buf` where the value under way began.
    mark: usize,
    /// Open `{` and `[` inside the value under way.
    nest: u32,
    in_string: bool,
    escaped: bool,
    /// A scalar value of the response (not a string) is under way.
    in_scalar: bool,
    /// The key being read, and the last one read.
    key: Vec<u8>,
    /// Whether the response had `items`.
    saw_items: bool,
    /// No item of `items` has begun yet.
    first_item: bool,
    /// Every field of the response but `items`: key and JSON text.
    fields: Vec<(String, String)>,
}

impl Default for Splitter {
    fn default() -> Self {
        Splitter {
            at: At::Start,
            buf: Vec::new(),
            dropped: 0,
            pos: 0,
            mark: 0,
            nest: 0,
            in_string: false,
            escaped: false,
            in_scalar: false,
            key: Vec::new(),
            saw_items: false,
            first_item: false,
            fields: Vec::new(),
        }
    }
}

/// The response without its items, once the body is whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListRest {
    /// `metadata.resourceVersion` of the list (empty when the response has none).
    pub resource_version: String,
    /// `metadata.continue` (empty when the list is whole).
    pub continue_token: String,
}

impl Splitter {
    /// Takes the next bytes of the body; each item completed by them is pushed to `items` as
    /// its JSON text.
    ///
    /// # Errors
    /// When the body is not a JSON object, its `items` not an array of objects, or it goes on
    /// after its end.
    pub fn push(&mut self, chunk: &[u8], items: &mut Vec<String>) -> Result<(), SplitError> {
        self.buf.extend_from_slice(chunk);
        while self.pos < self.buf.len() {
            // Inside a string of an item or value only `"` and `\` matter: skip to the next.
            if self.in_string && !self.escaped && matches!(self.at, At::InItem | At::InValue) {
                match memchr::memchr2(b'"', b'\\', &self.buf[self.pos..]) {
                    Some(k) => self.pos += k,
                    None => {
                        self.pos = self.buf.len();
                        break;
                    }
                }
            }
            let b = self.buf[self.pos];
            self.step(b, items)?;
            self.pos += 1;
        }
        // Keep only the value under way (or nothing between values).
        let keep_from = match self.at {
            At::InValue | At::InItem => self.mark,
            _ => self.pos,
        };
        if keep_from > 0 {
            self.buf.drain(..keep_from);
            self.dropped += keep_from;
            self.pos -= keep_from;
            self.mark -= keep_from.min(self.mark);
        }
        Ok(())
    }

    /// The end of the body: what the response said besides its items.
    ///
    /// # Errors
    /// When the body stopped before its end.
    pub fn finish(self) -> Result<ListRest, SplitError> {
        if self.at != At::End {
            return Err(self.error("the rest of the list (the body ended early)"));
        }
        let mut rest = ListRest::default();
        if let Some((_, meta)) = self.fields.iter().find(|(k, _)| k == "metadata") {
            #[derive(serde::Deserialize, Default)]
            #[serde(rename_all = "camelCase", default)]
            struct Meta {
                resource_version: String,
                #[serde(rename = "continue")]
                continue_token: String,
            }
            let m: Meta = serde_json::from_str(meta).unwrap_or_default();
            rest.resource_version = m.resource_version;
            rest.continue_token = m.continue_token;
        }
        Ok(rest)
    }

    /// Whether the response had `items` (a response without them, such as a `Status`, is not
    /// a list).
    pub fn saw_items(&self) -> bool {
        self.saw_items
    }

    /// The response's fields besides `items`, as JSON texts (complete once the body is).
    pub fn fields(&self) -> &[(String, String)] {
        &self.fields
    }

    fn error(&self, expected: &'static str) -> SplitError {
        SplitError {
            expected,
            offset: self.dropped + self.pos,
        }
    }

    fn step(&mut self, b: u8, items: &mut Vec<String>) -> Result<(), SplitError> {
        let space = matches!(b, b' ' | b'\n' | b'\r' | b'\t');
        match self.at {
            At::Start if space => {}
            At::Start if b == b'{' => self.at = At::Key,
            At::Start => return Err(self.error("`{`")),
            At::Key if space => {}
            At::Key if b == b'"' => {
                self.key.clear();
                self.at = At::InKey;
            }
            At::Key if b == b'}' && self.fields.is_empty() && !self.saw_items => {
                self.at = At::End;
            }
            At::Key => return Err(self.error("a key")),
            At::InKey => {
                if self.escaped {
                    self.escaped = false;
                    self.key.push(b);
                } else if b == b'\\' {
                    self.escaped = true;
                    self.key.push(b);
                } else if b == b'"' {
                    self.at = At::Colon;
                } else {
                    self.key.push(b);
                }
            }
            At::Colon if space => {}
            At::Colon if b == b':' => self.at = At::Value,
            At::Colon => return Err(self.error("`:`")),
            At::Value if space => {}
            At::Value if self.key == b"items" && b == b'[' => {
                self.saw_items = true;
                self.first_item = true;
                self.at = At::Items;
            }
            At::Value if self.key == b"items" && b == b'n' => {
                // `"items": null` (an empty list of some kinds): read as a value.
                self.saw_items = true;
                self.begin_value(b);
            }
            At::Value => self.begin_value(b),
            At::InValue => {
                if self.in_scalar {
                    if space || b == b',' || b == b'}' {
                        self.end_value();
                        self.at = At::AfterValue;
                        return self.step(b, items);
                    }
                } else if self.scan(b) {
                    self.end_value();
                    self.at = At::AfterValue;
                }
            }
            At::AfterValue if space => {}
            At::AfterValue if b == b',' => self.at = At::Key,
            At::AfterValue if b == b'}' => self.at = At::End,
            At::AfterValue => return Err(self.error("`,` or `}`")),
            At::Items if space => {}
            At::Items if b == b'{' => {
                self.first_item = false;
                self.mark = self.pos;
                self.nest = 1;
                self.at = At::InItem;
            }
            At::Items if b == b']' && self.first_item => self.at = At::AfterValue,
            At::Items => return Err(self.error("an item (an object)")),
            At::InItem => {
                if self.scan(b) {
                    items.push(text_of(&self.buf[self.mark..=self.pos]));
                    self.at = At::AfterItem;
                }
            }
            At::AfterItem if space => {}
            At::AfterItem if b == b',' => self.at = At::Items,
            At::AfterItem if b == b']' => self.at = At::AfterValue,
            At::AfterItem => return Err(self.error("`,` or `]`")),
            At::End if space => {}
            At::End => return Err(self.error("nothing after the end of the list")),
        }
        Ok(())
    }

    /// Starts a value of the response at byte `b`.
    fn begin_value(&mut self, b: u8) {
        self.mark = self.pos;
        self.at = At::InValue;
        self.in_scalar = false;
        self.nest = 0;
        match b {
            b'{' | b'[' => self.nest = 1,
            b'"' => self.in_string = true,
            _ => self.in_scalar = true,
        }
    }

    /// The value under way ended before `pos` (a scalar) or at it.
    fn end_value(&mut self) {
        let end = if self.in_scalar {
            self.pos
        } else {
            self.pos + 1
        };
        self.in_scalar = false;
        let key = text_of(&self.key);
        let text = text_of(&self.buf[self.mark..end]);
        self.fields.push((key, text));
    }

    /// One byte of a string, object or array under way: true when it closed it.
    fn scan(&mut self, b: u8) -> bool {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                return self.nest == 0;
            }
            return false;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.nest += 1,
            b'}' | b']' => {
                self.nest = self.nest.saturating_sub(1);
                return self.nest == 0;
            }
            _ => {}
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn split_in(body: &[u8], cuts: &[usize]) -> Result<(Vec<String>, ListRest), SplitError> {
        let mut s = Splitter::default();
        let mut items = Vec::new();
        let mut from = 0;
        for &c in cuts {
            let c = c.clamp(from, body.len());
            s.push(&body[from..c], &mut items)?;
            from = c;
        }
        s.push(&body[from..], &mut items)?;
        Ok((items, s.finish()?))
    }

    fn list(n: usize) -> Value {
        json!({
            "kind": "JobList",
            "apiVersion": "batch/v1",
            "metadata": {"resourceVersion": "4711", "continue": ""},
            "items": (0..n).map(|i| json!({
                "metadata": {"name": format!("j-{i}"), "annotations": {"q": "a \"}]{[ b\\", "u": "é✓"}},
                "spec": {"n": i, "f": 1.5e3, "b": [true, false, null, [], {}]},
            })).collect::<Vec<_>>(),
        })
    }

    fn items_of(v: &Value) -> Vec<Value> {
        v["items"].as_array().cloned().unwrap_or_default()
    }

    #[test]
    fn a_body_cut_at_every_byte_gives_the_same_items_and_resource_version() {
        let v = list(3);
        let body = serde_json::to_vec_pretty(&v).unwrap();
        for cut in 0..=body.len() {
            let (items, rest) = split_in(&body, &[cut]).unwrap();
            let parsed: Vec<Value> = items
                .iter()
                .map(|t| serde_json::from_str(t).unwrap())
                .collect();
            assert_eq!(parsed, items_of(&v), "cut at {cut}");
            assert_eq!(rest.resource_version, "4711");
        }
    }

    #[test]
    fn empty_and_null_items_are_lists_of_nothing() {
        for body in [
            r#"{"kind":"JobList","metadata":{"resourceVersion":"9"},"items":[]}"#,
            r#"{"kind":"JobList","metadata":{"resourceVersion":"9"},"items":null}"#,
            r#"{"items":[],"metadata":{"resourceVersion":"9"}}"#,
        ] {
            let (items, rest) = split_in(body.as_bytes(), &[]).unwrap();
            assert!(items.is_empty(), "{body}");
            assert_eq!(rest.resource_version, "9", "{body}");
        }
    }

    #[test]
    fn a_continue_token_is_kept() {
        let body = br#"{"metadata":{"resourceVersion":"3","continue":"abc"},"items":[{"a":1}]}"#;
        let (items, rest) = split_in(body, &[7, 40]).unwrap();
        assert_eq!(items, vec![r#"{"a":1}"#.to_owned()]);
        assert_eq!(rest.continue_token, "abc");
    }

    #[test]
    fn what_is_not_a_list_response_is_refused_with_where() {
        let cases: [(&str, &str); 6] = [
            (r#"{"items":[{},]}"#, "an item (an object)"),
            ("[1,2]", "`{`"),
            (r#"{"items":[1]}"#, "an item (an object)"),
            (r#"{"items":[{}] x"#, "`,` or `}`"),
            (r#"{"items":[{}]} {"#, "nothing after the end of the list"),
            (
                r#"{"items":[{"a":"#,
                "the rest of the list (the body ended early)",
            ),
        ];
        for (body, expected) in cases {
            let err = split_in(body.as_bytes(), &[]).unwrap_err();
            assert_eq!(err.expected, expected, "{body}");
        }
        let err = split_in(br#"{"items":[1]}"#, &[]).unwrap_err();
        assert_eq!(err.offset, 10);
        assert!(err.to_string().contains("at byte 10"));
    }

    #[test]
    fn a_status_instead_of_a_list_has_no_items() {
        let body = br#"{"kind":"Status","code":410,"reason":"Expired"}"#;
        let mut s = Splitter::default();
        let mut items = Vec::new();
        s.push(body, &mut items).unwrap();
        assert!(!s.saw_items());
        assert!(s.fields().iter().any(|(k, v)| k == "code" && v == "410"));
    }

    proptest! {
        #[test]
        fn any_cuts_give_the_items_serde_json_reads(
            n in 0usize..6,
            cuts in proptest::collection::vec(0usize..2000, 0..8),
            pretty in any::<bool>(),
        ) {
            let v = list(n);
            let body = if pretty { serde_json::to_vec_pretty(&v) } else { serde_json::to_vec(&v) }.unwrap();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let (items, rest) = split_in(&body, &cuts).unwrap();
            let parsed: Vec<Value> = items.iter().map(|t| serde_json::from_str(t).unwrap()).collect();
            prop_assert_eq!(parsed, items_of(&v));
            prop_assert_eq!(rest.resource_version, "4711");
        }
    }
}
