//! Fuzzing of what the node agent parses (issue #25): GPU traces, the YAML a test, a demo or an
//! operator hands `--source file:PATH`. [`CASES`] inputs per property; the claim is no panic,
//! no hang, and an error that names the file and the field. (Admission reviews are fuzzed in
//! `src/admission.rs`, webhook signatures in `src/webhook.rs`, the gateway's tokens and keys in
//! `gryvia_reconcile::gateway` and `src/gateway/oidc.rs`.)

use gryvia_client::gpu_agent::{GPU_FIELDS, Trace};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Inputs per property.
const CASES: u32 = 5_000;

/// A GPU field name: the known ones and a stranger.
fn gpu_key() -> impl Strategy<Value = String> {
    let mut keys = GPU_FIELDS.to_vec();
    keys.push("bogus");
    prop::sample::select(keys).prop_map(str::to_owned)
}

/// A value of any JSON type, numbers at the edges of their ranges included.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i64..70).prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN", |f| f.is_finite())
            .prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::vec(
                (prop::sample::select(vec!["code", "observedAt", "x"]), inner),
                0..3
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn gpu() -> impl Strategy<Value = Value> {
    (
        prop::option::of(-2i64..70),
        prop::collection::vec((gpu_key(), value()), 0..4),
    )
        .prop_map(|(index, fields)| {
            let mut m: Map<String, Value> = fields.into_iter().collect();
            if let Some(i) = index {
                m.insert("index".to_owned(), json!(i));
            }
            Value::Object(m)
        })
}

fn frame() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof![
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            (0u32..100).prop_map(Value::from),
            Just(json!("soon")),
        ]),
        prop::collection::vec(gpu(), 0..3),
        prop::option::of(prop_oneof![
            any::<i64>().prop_map(Value::from),
            (-100i64..100).prop_map(Value::from),
        ]),
    )
        .prop_map(|(hold, gpus, age)| {
            let mut f = json!({"gpus": gpus});
            if let Some(h) = hold {
                f["holdSeconds"] = h;
            }
            if let Some(a) = age {
                f["observedAgeSeconds"] = a;
            }
            f
        })
}

/// A near-valid trace as YAML (JSON is YAML), or arbitrary text, or YAML's own traps.
fn trace_text() -> impl Strategy<Value = String> {
    let structured = (
        prop::option::of(-2i64..70),
        prop::collection::vec((gpu_key(), value()), 0..3),
        prop::collection::vec(frame(), 0..4),
        prop::collection::vec(
            (
                prop::sample::select(vec!["gpu-reset", "driver-reload", "reboot", "drain"]),
                prop::collection::vec(frame(), 0..2),
            ),
            0..2,
        ),
    )
        .prop_map(|(count, defaults, frames, after)| {
            let mut t = json!({"frames": frames});
            if let Some(c) = count {
                t["gpuCount"] = json!(c);
            }
            if !defaults.is_empty() {
                t["defaults"] = Value::Object(defaults.into_iter().collect());
            }
            if !after.is_empty() {
                t["afterRemediation"] = Value::Object(
                    after
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), Value::from(v)))
                        .collect(),
                );
            }
            t.to_string()
        });
    prop_oneof![
        4 => structured,
        1 => ".{0,200}",
        1 => prop::sample::select(vec![
            // An alias bomb: must be refused or bounded, never expanded without limit.
            "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nframes: [{gpus: []}]\n",
            "frames:\n  - holdSeconds: .nan\n    gpus: []\n  - holdSeconds: -.inf\n",
            "frames: [{gpus: [{index: 0, xidEvents: [{code: 79}]}]}]\nfoo: 1\n",
            "frames: !!binary aGVsbG8=\n",
            "gpuCount: 99999999999999999999999\nframes: [{}]\n",
            "frames: [{observedAgeSeconds: 9223372036854775807}]\n",
            "frames: [{observedAgeSeconds: -9223372036854775808}]\n",
            "---\nframes: [{}]\n---\nframes: [{}]\n",
        ])
        .prop_map(str::to_owned),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any text: `Trace::parse` returns; an error names the file; a trace that parses renders
    /// every frame into one observation per GPU, indices 0..gpuCount in order, at any instant.
    #[test]
    fn traces_never_panic_and_a_parsed_trace_renders_every_frame(
        text in trace_text(),
        at in 0i64..4_102_444_800,
    ) {
        match Trace::parse(&text, "fuzz.yaml") {
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.contains("fuzz.yaml"), "{shown}");
            }
            Ok(trace) => {
                let now = jiff::Timestamp::from_second(at).unwrap();
                for frame in trace.frames.iter().chain(trace.after_remediation.values().flatten()) {
                    match trace.render(frame, "node-a", now) {
                        Ok(gpus) => {
                            let indices: Vec<i32> = gpus.iter().map(|g| g.index).collect();
                            prop_assert_eq!(indices, (0..trace.gpu_count).collect::<Vec<_>>());
                        }
                        // A backdating that reaches before year -9999 from this instant.
                        Err(e) => prop_assert!(e.to_string().contains("observedAgeSeconds"), "{e}"),
                    }
                }
            }
        }
    }
}
