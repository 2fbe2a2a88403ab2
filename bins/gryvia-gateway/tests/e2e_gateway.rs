//! End-to-end: the gateway binary against a real control plane (testenv/) and a real OIDC
//! issuer (Dex, `testenv/up --with-dex`), under the RBAC the chart renders (deploy/gateway,
//! deploy/user-roles.yaml). Tenant users see and change only their tenants' namespaces, an admin
//! group sees everything, and RBAC (through impersonation) is what decides; forged and foreign
//! tokens are refused and counted; API keys are shown once, scoped, and revocable.

#![expect(
    clippy::unwrap_used,
    reason = "helpers outside #[test] fns: a failure is the test failing"
)]

mod common;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{Tenant, apply_rbac, call, counter, gateway_access, job, start_gateway};
use gryvia_testsupport::dex::dex;
use gryvia_testsupport::{TestNamespace, repo_root, unique, wait_for};
use serde_json::{Value, json};

fn b64(v: &Value) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
}

fn parts(token: &str) -> (Value, Value, String) {
    let mut it = token.split('.');
    let dec = |s: &str| serde_json::from_slice(&URL_SAFE_NO_PAD.decode(s).unwrap()).unwrap();
    let h = dec(it.next().unwrap());
    let p = dec(it.next().unwrap());
    (h, p, it.next().unwrap().to_owned())
}

/// Tokens the gateway must refuse, made from a real Dex token and Dex's published keys; each
/// with the reason label it must be counted under.
fn forged(real: &str, jwks: &Value) -> Vec<(&'static str, &'static str, String)> {
    let (header, payload, sig) = parts(real);
    let mut out = Vec::new();
    // alg none, no signature.
    out.push((
        "alg none",
        "algorithm",
        format!(
            "{}.{}.",
            b64(&json!({"alg": "none", "kid": header["kid"]})),
            b64(&payload)
        ),
    ));
    // HS256 with Dex's public key as the HMAC secret (the classic confusion attack).
    let key = &jwks["keys"][0];
    let secret = serde_json::to_vec(key).unwrap();
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    h.kid = header["kid"].as_str().map(str::to_owned);
    out.push((
        "HS256 signed with the public key",
        "algorithm",
        jsonwebtoken::encode(
            &h,
            &payload,
            &jsonwebtoken::EncodingKey::from_secret(&secret),
        )
        .unwrap(),
    ));
    // A key Dex never published.
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &rng,
    )
    .unwrap();
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    h.kid = Some("forged-key".to_owned());
    out.push((
        "unknown kid",
        "unknown_key",
        jsonwebtoken::encode(
            &h,
            &payload,
            &jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
        )
        .unwrap(),
    ));
    // The real signature over a changed payload: someone else's email and the admin group.
    let mut tampered = payload.clone();
    tampered["email"] = json!("admin@example.com");
    tampered["groups"] = json!(["gryvia-admins"]);
    out.push((
        "tampered payload",
        "signature",
        format!(
            "{}.{}.{sig}",
            real.split('.').next().unwrap(),
            b64(&tampered)
        ),
    ));
    out
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn tenants_see_only_their_own_through_impersonation_and_forged_tokens_are_refused() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let Some(dex) = dex() else { return };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let keys_ns = TestNamespace::create(&client, "gw").await.unwrap();
    apply_rbac(&client, "deploy/user-roles.yaml", &keys_ns.name).await;
    let access = gateway_access(&client, &keys_ns.name).await;

    // Tenant a: the group team-a (alice, carol). Tenant b: bob by name.
    let a = Tenant::create(
        &client,
        &unique("gwa"),
        json!([{"kind": "Group", "username": "team-a", "role": "member"}]),
    )
    .await;
    let b = Tenant::create(
        &client,
        &unique("gwb"),
        json!([{"username": "bob@example.com", "role": "member"}]),
    )
    .await;

    let ca = dex.ca.to_string_lossy().into_owned();
    let (_gw, port) = start_gateway(
        &[
            "--oidc-enabled",
            "--oidc-issuer-url",
            &dex.issuer,
            "--oidc-client-id",
            "gryvia-dashboard",
            "--oidc-audience",
            "gryvia-dashboard,gryvia",
            "--oidc-ca-file",
            &ca,
            "--oidc-admin-groups",
            "gryvia-admins",
            "--keys-namespace",
            &keys_ns.name,
            "--rate-limit",
            "1000",
            "--rate-burst",
            "2000",
        ],
        &access.kubeconfig,
        "gateway-e2e",
    )
    .await;
    let alice = dex.gryvia_token("alice@example.com").unwrap();
    let bob = dex.gryvia_token("bob@example.com").unwrap();
    let admin = dex.gryvia_token("admin@example.com").unwrap();

    // Who each is: tenants by group and by name, confirmed by RBAC.
    let (code, body) = call(port, "GET", "/api/v1/whoami", None, None).await;
    assert_eq!(
        (code, body["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let (_, me) = call(port, "GET", "/api/v1/whoami", Some(&alice), None).await;
    assert_eq!(me["user"], "alice@example.com");
    assert_eq!(me["tenants"], json!([a.name]), "{me}");
    let (_, me) = call(port, "GET", "/api/v1/whoami", Some(&bob), None).await;
    assert_eq!(me["tenants"], json!([b.name]), "{me}");
    let (_, me) = call(port, "GET", "/api/v1/whoami", Some(&admin), None).await;
    assert_eq!(me["admin"], true);
    let seen: Vec<&str> = me["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        seen.contains(&a.name.as_str()) && seen.contains(&b.name.as_str()),
        "{me}"
    );

    // Alice submits three jobs into her tenant; a bad one is refused naming the field.
    for i in 0..3 {
        let (code, body) = call(
            port,
            "POST",
            &format!("/api/v1/namespaces/{}/jobs", a.namespace),
            Some(&alice),
            Some(&job(&format!("train-{i}"), 2)),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        assert_eq!(body["metadata"]["namespace"], json!(a.namespace));
    }
    let (code, body) = call(
        port,
        "POST",
        &format!("/api/v1/namespaces/{}/jobs", a.namespace),
        Some(&alice),
        Some(&job("bad", -1)),
    )
    .await;
    assert_eq!(
        (code, body["code"].as_str()),
        (422, Some("invalid")),
        "{body}"
    );
    assert_eq!(body["field"], "spec.gpus", "{body}");
    // Bob may not submit into tenant a: RBAC says no, through impersonation.
    let (code, body) = call(
        port,
        "POST",
        &format!("/api/v1/namespaces/{}/jobs", a.namespace),
        Some(&bob),
        Some(&job("intruder", 1)),
    )
    .await;
    assert_eq!(
        (code, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );

    // Lists: alice sees her three, page by page; bob sees none of them, by list or by name.
    let (code, page1) = call(port, "GET", "/api/v1/jobs?limit=2", Some(&alice), None).await;
    assert_eq!(code, 200, "{page1}");
    assert_eq!(page1["items"].as_array().unwrap().len(), 2);
    let next = page1["continue"]
        .as_str()
        .expect("a continue token")
        .to_owned();
    let (_, page2) = call(
        port,
        "GET",
        &format!("/api/v1/jobs?limit=2&continue={next}"),
        Some(&alice),
        None,
    )
    .await;
    let mut names: Vec<String> = page1["items"]
        .as_array()
        .unwrap()
        .iter()
        .chain(page2["items"].as_array().unwrap())
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["train-0", "train-1", "train-2"]);
    assert!(page2.get("continue").is_none(), "{page2}");
    let (_, bobs) = call(port, "GET", "/api/v1/jobs", Some(&bob), None).await;
    assert!(
        bobs["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j["metadata"]["namespace"] != json!(a.namespace)),
        "{bobs}"
    );
    let (code, _) = call(
        port,
        "GET",
        &format!("/api/v1/namespaces/{}/jobs/train-0", a.namespace),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(code, 403, "bob reading alice's job by name");
    let (code, _) = call(
        port,
        "GET",
        &format!("/api/v1/namespaces/{}/jobs", a.namespace),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(code, 403, "bob listing alice's namespace");
    let (code, _) = call(
        port,
        "GET",
        &format!("/api/v1/tenants/{}", a.name),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(code, 404, "bob reading alice's tenant");
    let (code, t) = call(
        port,
        "GET",
        &format!("/api/v1/tenants/{}", a.name),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(code, 200, "{t}");
    assert_eq!(t["cost"]["tenant"], json!(a.name));
    let (code, _) = call(
        port,
        "GET",
        &format!("/api/v1/namespaces/{}/jobs/train-0", a.namespace),
        Some(&admin),
        None,
    )
    .await;
    assert_eq!(code, 200, "the admin group reads every tenant");

    // Why-pending: the job waits (nothing schedules it here) and says so.
    let (code, q) = call(port, "GET", "/api/v1/queue", Some(&alice), None).await;
    assert_eq!(code, 200, "{q}");
    let mine: Vec<&Value> = q["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["namespace"] == json!(a.namespace))
        .collect();
    assert_eq!(mine.len(), 3, "{q}");
    assert!(
        mine.iter()
            .all(|w| w["why"].as_str().is_some_and(|s| !s.is_empty()))
    );

    // Fleet health and maintenance are for admins (RBAC), not tenant users.
    let (code, _) = call(port, "GET", "/api/v1/nodes", Some(&alice), None).await;
    assert_eq!(code, 403);
    let (code, nodes) = call(port, "GET", "/api/v1/nodes", Some(&admin), None).await;
    assert_eq!(code, 200, "{nodes}");
    let (code, _) = call(port, "GET", "/api/v1/templates", Some(&alice), None).await;
    assert_eq!(code, 200, "every authenticated user reads the catalogue");

    // Alice cancels a job; the audit log names her.
    let (code, _) = call(
        port,
        "DELETE",
        &format!("/api/v1/namespaces/{}/jobs/train-2", a.namespace),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(code, 204);
    let log = std::fs::read_to_string(repo_root().join("target/e2e-logs/gateway-e2e.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("gryvia::audit")
            && l.contains("alice@example.com")
            && l.contains("DELETE")),
        "no audit line for alice's DELETE"
    );

    // Forged and foreign tokens: each refused and counted under its reason.
    let jwks_uri = dex
        .get(&format!("{}/.well-known/openid-configuration", dex.issuer))
        .unwrap()["jwks_uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let jwks = dex.get(&jwks_uri).unwrap();
    let mut cases = forged(&alice, &jwks);
    cases.push((
        "wrong audience",
        "audience",
        dex.token("gryvia-other", "gryvia-other-secret", "alice@example.com")
            .unwrap(),
    ));
    for (what, reason, token) in &cases {
        let before = counter(
            port,
            "gryvia_gateway_auth_failures_total",
            &format!("reason=\"{reason}\""),
        )
        .await;
        let (code, body) = call(port, "GET", "/api/v1/whoami", Some(token), None).await;
        assert_eq!(code, 401, "{what}: {body}");
        let after = counter(
            port,
            "gryvia_gateway_auth_failures_total",
            &format!("reason=\"{reason}\""),
        )
        .await;
        assert!(after > before, "{what} was not counted under {reason}");
    }

    // API keys: made from an OIDC login, shown once, read-only and limited to tenant a here.
    let (code, created) = call(
        port,
        "POST",
        "/api/v1/apikeys",
        Some(&alice),
        Some(&json!({"name": "ci", "scope": "read", "tenant": a.name, "expiresInDays": 7})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let key = created["key"].as_str().unwrap().to_owned();
    let id = created["record"]["id"].as_str().unwrap().to_owned();
    let secret: k8s_openapi::api::core::v1::Secret =
        kube::Api::namespaced(client.clone(), &keys_ns.name)
            .get(&format!("gryvia-apikey-{id}"))
            .await
            .unwrap();
    let stored = serde_json::to_string(&secret.data).unwrap();
    assert!(
        !stored.contains(key.rsplit('_').next().unwrap()),
        "the key itself is stored nowhere"
    );
    let (code, me) = call(port, "GET", "/api/v1/whoami", Some(&key), None).await;
    assert_eq!(code, 200, "{me}");
    assert_eq!(
        (me["method"].as_str(), me["scope"].as_str()),
        (Some("apiKey"), Some("read"))
    );
    let (code, body) = call(
        port,
        "POST",
        &format!("/api/v1/namespaces/{}/jobs", a.namespace),
        Some(&key),
        Some(&job("by-key", 1)),
    )
    .await;
    assert_eq!(
        (code, body["code"].as_str()),
        (403, Some("key_scope")),
        "{body}"
    );
    let (code, _) = call(
        port,
        "POST",
        "/api/v1/apikeys",
        Some(&key),
        Some(&json!({"name": "chain"})),
    )
    .await;
    assert_eq!(code, 403, "a key cannot make keys");
    // An admin's key limited to tenant a reaches nothing cluster-wide.
    let (code, created) = call(
        port,
        "POST",
        "/api/v1/apikeys",
        Some(&admin),
        Some(&json!({"name": "ops", "tenant": a.name})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let limited = created["key"].as_str().unwrap().to_owned();
    let (code, body) = call(port, "GET", "/api/v1/nodes", Some(&limited), None).await;
    assert_eq!(
        (code, body["code"].as_str()),
        (403, Some("key_scope")),
        "{body}"
    );
    let (code, _) = call(
        port,
        "GET",
        &format!("/api/v1/namespaces/{}/jobs/train-0", a.namespace),
        Some(&limited),
        None,
    )
    .await;
    assert_eq!(code, 200, "inside its tenant the key works");
    let (code, _) = call(
        port,
        "DELETE",
        &format!("/api/v1/apikeys/{id}"),
        Some(&bob),
        None,
    )
    .await;
    assert_eq!(code, 404, "bob cannot revoke alice's key");
    let (code, _) = call(
        port,
        "DELETE",
        &format!("/api/v1/apikeys/{id}"),
        Some(&alice),
        None,
    )
    .await;
    assert_eq!(code, 204);
    wait_for(
        "the revoked key to stop working",
        Duration::from_secs(20),
        || {
            let key = key.clone();
            async move {
                let (code, _) = call(port, "GET", "/api/v1/whoami", Some(&key), None).await;
                (code == 401).then_some(())
            }
        },
    )
    .await
    .unwrap();
    // An expired key (made by the library with a past expiry) is refused.
    let now = jiff::Timestamp::now();
    let (_, expired) = gryvia_client::gateway::apikeys::create(
        &client,
        &keys_ns.name,
        &gryvia_client::gateway::apikeys::NewKey {
            name: "old".into(),
            user: "alice@example.com".into(),
            groups: vec!["team-a".into()],
            tenant: None,
            scope: gryvia_reconcile::gateway::Scope::Write,
            expires: Some(now - jiff::SignedDuration::from_secs(1)),
        },
        now - jiff::SignedDuration::from_hours(1),
    )
    .await
    .unwrap();
    wait_for(
        "the expired key to be seen and refused",
        Duration::from_secs(20),
        || {
            let expired = expired.clone();
            async move {
                let c = counter(
                    port,
                    "gryvia_gateway_auth_failures_total",
                    "reason=\"key_expired\"",
                )
                .await;
                let (code, _) = call(port, "GET", "/api/v1/whoami", Some(&expired), None).await;
                (code == 401 && c >= 0.0).then_some(())
            }
        },
    )
    .await
    .unwrap();
    assert!(
        counter(
            port,
            "gryvia_gateway_auth_failures_total",
            "reason=\"key_expired\""
        )
        .await
            >= 1.0
    );

    // No credential reaches the gateway's log: not a token, not a key's secret part (and
    // scripts/check-logs-for-secrets looks for them in every other E2E log).
    let log = std::fs::read_to_string(repo_root().join("target/e2e-logs/gateway-e2e.log")).unwrap();
    for (what, secret) in [
        ("alice's token", alice.rsplit('.').next().unwrap()),
        ("the admin's token", admin.rsplit('.').next().unwrap()),
        ("alice's API key", key.rsplit('_').next().unwrap()),
        ("the limited key", limited.rsplit('_').next().unwrap()),
        ("the expired key", expired.rsplit('_').next().unwrap()),
    ] {
        gryvia_testsupport::record_secret(what, secret);
        assert!(!log.contains(secret), "{what} is in the gateway's log");
    }

    // The OpenAPI document lists only routes the gateway serves: unauthenticated, each answers
    // 401 (or its own answer when open), never the router's "no such route".
    let (code, doc) = call(port, "GET", "/openapi.json", None, None).await;
    assert_eq!((code, doc["openapi"].as_str()), (200, Some("3.1.0")));
    for (method, path) in gryvia_client::gateway::openapi::operations_listed() {
        let concrete = path
            .replace("{namespace}", &a.namespace)
            .replace("{name}", "x")
            .replace("{template}", "t")
            .replace("{id}", "abcdef123456");
        let (code, body) = call(port, &method, &concrete, None, None).await;
        assert_ne!(body["message"], "no such route", "{method} {path}");
        assert!(code == 401 || code == 200, "{method} {path}: {code} {body}");
    }
}
