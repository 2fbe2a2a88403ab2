//! Fuzzing of the pure parsers of untrusted text (issue #25): cron schedules (GryviaAIJob and
//! workflow `schedule`, written by any tenant) and template rendering (templates by platform
//! teams, parameter values by any user). Each property runs [`CASES`] inputs; the claim is no
//! panic, no hang (every call returns; a hang fails the run at the test harness's timeout) and
//! errors that name the field.
//!
//! Inputs are of two kinds for each parser: arbitrary text, and near-valid text built from the
//! grammar's own pieces with one part broken, which reaches the deeper branches.

use std::collections::BTreeMap;

use gryvia_reconcile::cron::Schedule;
use gryvia_reconcile::template::{instantiate, render};
use gryvia_types::GryviaTemplate;
use proptest::prelude::*;
use serde_json::json;

/// Inputs per property.
const CASES: u32 = 5_000;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One cron field made of the grammar's pieces: numbers in and out of range, names, ranges,
/// steps (zero and huge too), lists and stray characters.
fn cron_field() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("*".to_owned()),
        Just("?".to_owned()),
        (0u64..100).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        Just("-1".to_owned()),
        prop::sample::select(vec![
            "jan", "FEB", "dec", "sun", "Mon", "sat", "foo", "L", "W", "#"
        ])
        .prop_map(str::to_owned),
    ];
    let part = (
        atom.clone(),
        prop::option::of(atom),
        prop::option::of(prop_oneof![
            (0u64..70).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            Just(String::new()),
        ]),
    )
        .prop_map(|(a, b, step)| {
            let mut s = a;
            if let Some(b) = b {
                s = format!("{s}-{b}");
            }
            if let Some(step) = step {
                s = format!("{s}/{step}");
            }
            s
        });
    prop::collection::vec(part, 1..4).prop_map(|parts| parts.join(","))
}

fn cron_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,60}",
        prop::collection::vec(cron_field(), 4..8).prop_map(|f| f.join(" ")),
        prop::sample::select(vec![
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "@reboot",
            "@",
            "0 0 31 2 *",
            "0 0 30 2 *",
            "* * * * * *",
        ])
        .prop_map(str::to_owned),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// Any text: parse returns, and a schedule that parses names a next run strictly after the
    /// start (or none within its horizon), at whole seconds, and stepping again moves forward.
    #[test]
    fn cron_schedules_never_panic_and_next_runs_move_forward(
        text in cron_text(),
        start in 0i64..4_102_444_800,
    ) {
        let start = jiff::Timestamp::from_second(start).unwrap();
        match Schedule::parse(&text) {
            Err(e) => {
                prop_assert!(!e.to_string().is_empty());
            }
            Ok(schedule) => {
                if let Some(next) = schedule.next_after(start) {
                    prop_assert!(next > start, "{text:?}: {next} not after {start}");
                    prop_assert_eq!(next.subsec_nanosecond(), 0);
                    if let Some(after) = schedule.next_after(next) {
                        prop_assert!(after > next);
                    }
                }
            }
        }
    }
}

/// A template whose declarations and defaults are drawn from `parts`.
fn template(
    params: &[(String, &'static str, Option<String>, Option<String>)],
    image: &str,
    command: &[String],
) -> Option<GryviaTemplate> {
    let parameters: Vec<_> = params
        .iter()
        .map(|(name, ty, default, pattern)| {
            let mut p = json!({"name": name, "type": ty});
            if let Some(d) = default {
                p["default"] = json!(d);
            }
            if let Some(pat) = pattern {
                p["validation"] = json!({"pattern": pat, "min": -5, "max": 1e6});
            }
            p
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTemplate",
        "metadata": {"name": "fuzz"},
        "spec": {
            "category": "training",
            "defaults": {"image": image, "gpus": 1, "command": command},
            "parameters": parameters
        }
    }))
    .ok()
}

/// Placeholder-bearing text: literal pieces, well-formed placeholders for the declared names and
/// for undeclared ones, and broken ones (unclosed, undotted, not a name).
fn templated_text(names: Vec<String>) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[ -~]{0,8}",
        prop::sample::select(names).prop_map(|n| format!("{{{{ .{n} }}}}")),
        Just("{{ .undeclared }}".to_owned()),
        Just("{{".to_owned()),
        Just("}}".to_owned()),
        Just("{{ name }}".to_owned()),
        Just("{{ .9x }}".to_owned()),
        Just("{{.}}".to_owned()),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|p| p.concat())
}

fn declared() -> impl Strategy<Value = Vec<(String, &'static str, Option<String>, Option<String>)>>
{
    let ty = prop::sample::select(vec!["string", "integer", "number", "boolean"]);
    let value = prop_oneof![
        "[ -~]{0,6}",
        any::<i32>().prop_map(|n| n.to_string()),
        Just("true".to_owned()),
        Just("NaN".to_owned()),
        Just("1e400".to_owned()),
    ];
    let pattern = prop_oneof![
        Just("[a-z0-9/_-]+".to_owned()),
        Just("(".to_owned()),
        Just("a{1000}{1000}".to_owned()),
        "[ -~]{0,6}",
    ];
    prop::collection::vec(
        (
            prop::sample::select(vec!["a", "b", "dataPath", "x_1"]).prop_map(str::to_owned),
            ty,
            prop::option::of(value),
            prop::option::of(pattern),
        ),
        0..4,
    )
}

proptest! {
    #![proptest_config(config())]

    /// Any declarations, defaults and given values: rendering returns; an error names a
    /// parameter or a defaults field; a rendered job records exactly the values it used and
    /// carries no placeholder the template itself wrote.
    #[test]
    fn template_rendering_never_panics_and_errors_name_the_field(
        (params, image, command, given) in declared().prop_flat_map(|params| {
            let names: Vec<String> = params.iter().map(|p| p.0.clone()).chain(["y".to_owned()]).collect();
            (
                Just(params),
                templated_text(names.clone()),
                prop::collection::vec(templated_text(names.clone()), 0..3),
                prop::collection::btree_map(
                    prop::sample::select(names),
                    prop_oneof!["[ -~]{0,8}", any::<i64>().prop_map(|n| n.to_string())],
                    0..3,
                ),
            )
        }),
        name in prop::option::of("[a-z]{1,10}"),
    ) {
        let Some(tpl) = template(&params, &image, &command) else {
            return Ok(());
        };
        let given: BTreeMap<String, String> = given;
        match instantiate(&tpl, name.as_deref(), "team-a", &given) {
            Err(e) => {
                prop_assert!(
                    e.field.starts_with("parameters") || e.field.starts_with("defaults"),
                    "field {:?}", e.field
                );
                prop_assert!(!e.message.is_empty());
            }
            Ok(job) => {
                let used = &job.spec.template_ref.as_ref().unwrap().parameters;
                for (k, v) in &given {
                    prop_assert_eq!(used.get(k), Some(v));
                }
                // Rendering again gives the same job: nothing depends on order or time.
                let again = render(&tpl, name.as_deref().unwrap_or(""), "team-a", &given).unwrap();
                prop_assert_eq!(&again.spec, &job.spec);
                if !image.contains("{{") && !given.values().any(|v| v.contains("{{")) {
                    prop_assert_eq!(&job.spec.image, &image);
                }
            }
        }
    }
}
