//! A client of a Prometheus-compatible instant query API (`GET /api/v1/query`): Prometheus,
//! Thanos, Mimir, VictoriaMetrics. Used by the inference canary's checks.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Time allowed for one query.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The first sample's value of an instant query's answer: `Ok(None)` for an empty vector or a
/// value that is not a finite number (`NaN` from a ratio of zero rates).
///
/// # Errors
/// The answer is not a successful query result; the message says what it was.
pub fn first_value(answer: &Value) -> Result<Option<f64>, String> {
    if answer["status"] != "success" {
        let why = answer["error"].as_str().unwrap_or("no status success");
        return Err(format!("query failed: {why}"));
    }
    let data = &answer["data"];
    let sample = match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .and_then(|r| r.first())
            .map(|s| &s["value"]),
        Some("scalar") => Some(&data["result"]),
        other => return Err(format!("unexpected result type {other:?}")),
    };
    let value = sample
        .and_then(|v| v.get(1))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|v| v.is_finite());
    Ok(value)
}

/// Runs `query` at the API under `base` (for example `http://prometheus:9090`) now.
///
/// # Errors
/// No answer within [`QUERY_TIMEOUT`], an HTTP error, or an answer that is not a query result;
/// the message says which.
pub async fn query(base: &str, query: &str) -> Result<Option<f64>, String> {
    let encoded: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", query)
        .finish();
    let url = format!("{}/api/v1/query?{encoded}", base.trim_end_matches('/'));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .map_err(|e| format!("load trust roots: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(https);
    let req = http::Request::get(&url)
        .header("accept", "application/json")
        .body(Empty::new())
        .map_err(|e| format!("build request: {e}"))?;
    let resp = tokio::time::timeout(QUERY_TIMEOUT, client.request(req))
        .await
        .map_err(|_| format!("no answer from {base} within {QUERY_TIMEOUT:?}"))?
        .map_err(|e| format!("{base}: {e}"))?;
    let status = resp.status();
    let body = tokio::time::timeout(QUERY_TIMEOUT, resp.into_body().collect())
        .await
        .map_err(|_| format!("{base}: the answer did not finish within {QUERY_TIMEOUT:?}"))?
        .map_err(|e| format!("{base}: {e}"))?
        .to_bytes();
    let answer: Value = serde_json::from_slice(&body).map_err(|_| {
        format!(
            "{base} answered HTTP {status} with no JSON: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    })?;
    first_value(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_sample_is_read_and_nan_or_nothing_is_no_data() {
        let v = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {}, "value": [1_800_000_000.0, "0.25"]}]}});
        assert_eq!(first_value(&v), Ok(Some(0.25)));
        let nan = json!({"status": "success", "data": {"resultType": "vector",
            "result": [{"metric": {}, "value": [1.0, "NaN"]}]}});
        assert_eq!(first_value(&nan), Ok(None));
        let empty = json!({"status": "success", "data": {"resultType": "vector", "result": []}});
        assert_eq!(first_value(&empty), Ok(None));
        let scalar =
            json!({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "2"]}});
        assert_eq!(first_value(&scalar), Ok(Some(2.0)));
        let bad =
            json!({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"});
        assert_eq!(
            first_value(&bad),
            Err("query failed: parse error at char 3".to_owned())
        );
        let matrix = json!({"status": "success", "data": {"resultType": "matrix", "result": []}});
        assert!(first_value(&matrix).is_err());
    }
}
