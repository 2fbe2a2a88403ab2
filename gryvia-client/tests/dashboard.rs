//! The chart's Grafana dashboard queries only metrics the operators serve: every `gryvia_*`
//! name in its expressions is a family the operators' registry encodes (counters with their
//! `_total`, histograms with `_bucket`). No cluster needed.

use std::collections::BTreeSet;

#[test]
fn every_metric_the_dashboard_queries_is_one_the_operators_serve() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/helm/gryvia/files/dashboards/gryvia-operators.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("gryvia_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 9, "{queried:?}");

    // Every family with a sample (an empty family is not encoded), as /metrics shows them.
    use gryvia_client::metrics::{
        CacheLabels, ControllerLabels, ErrorLabels, RequestLabels, WebhookLabels,
    };
    let metrics = gryvia_client::metrics::Metrics::new();
    let c = ControllerLabels {
        controller: "c".into(),
    };
    metrics.reconciles.get_or_create(&c).inc();
    metrics
        .errors
        .get_or_create(&ErrorLabels {
            controller: "c".into(),
            error: "e".into(),
        })
        .inc();
    metrics.duration.get_or_create(&c).observe(0.1);
    metrics.leader.get_or_create(&c).set(1);
    metrics
        .webhook_reviews
        .get_or_create(&WebhookLabels {
            hook: "validate".into(),
            allowed: true,
        })
        .inc();
    metrics.webhook_duration.get_or_create(&c).observe(0.1);
    metrics.evictions.get_or_create(&c).inc();
    metrics.blocked_evictions.get_or_create(&c).inc();
    gryvia_client::metrics::api_requests()
        .get_or_create(&RequestLabels {
            verb: "get".into(),
            resource: "pods".into(),
        })
        .inc();
    gryvia_client::metrics::cache_objects()
        .get_or_create(&CacheLabels {
            kind: "Pod".into(),
            selector: String::new(),
        })
        .set(1);
    let text = metrics.encode();
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| {
            let (name, kind) = l.split_once(' ')?;
            Some(match kind {
                "counter" => format!("{name}_total"),
                "histogram" => format!("{name}_bucket"),
                _ => name.to_owned(),
            })
        })
        .collect();
    let missing: Vec<&String> = queried.difference(&families).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no operator serves: {missing:?} (served: {families:?})"
    );
}
