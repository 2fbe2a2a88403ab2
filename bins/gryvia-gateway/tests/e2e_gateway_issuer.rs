//! End-to-end: the gateway binary with an issuer whose signing keys the test holds (served on
//! loopback: discovery and JWKS), for what a real provider never does on cue: a validly signed
//! token that expired, that names another issuer, that is not valid yet, and a key rotation
//! (the issuer starts signing with a new key: the gateway fetches the JWKS again and accepts
//! it). Also the per-identity rate limit. The Dex test (`e2e_gateway.rs`) covers the rest.

#![expect(
    clippy::unwrap_used,
    reason = "helpers outside #[test] fns: a failure is the test failing"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::{call, counter, gateway_access, start_gateway};
use gryvia_testsupport::{TestNamespace, free_port};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

struct Key {
    kid: String,
    pkcs8: Vec<u8>,
    jwk: Value,
}

fn key(kid: &str) -> Key {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
        .unwrap()
        .as_ref()
        .to_vec();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng).unwrap();
    let point = pair.public_key().as_ref();
    let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
                     "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                     "y": URL_SAFE_NO_PAD.encode(&point[33..65])});
    Key {
        kid: kid.to_owned(),
        pkcs8,
        jwk,
    }
}

fn sign(k: &Key, claims: &Value) -> String {
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    h.kid = Some(k.kid.clone());
    jsonwebtoken::encode(
        &h,
        claims,
        &jsonwebtoken::EncodingKey::from_ec_der(&k.pkcs8),
    )
    .unwrap()
}

/// Serves `/.well-known/openid-configuration` and `/keys` (whatever `jwks` holds now).
async fn issuer(jwks: Arc<Mutex<Value>>) -> String {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let discovery = json!({"issuer": base, "jwks_uri": format!("{base}/keys"),
        "authorization_endpoint": format!("{base}/auth"), "token_endpoint": format!("{base}/token")});
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let d = discovery.clone();
                async move { axum::Json(d) }
            }),
        )
        .route(
            "/keys",
            axum::routing::get(move || {
                let j = jwks.lock().unwrap().clone();
                async move { axum::Json(j) }
            }),
        );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

#[tokio::test]
async fn expired_foreign_and_premature_tokens_are_refused_rotation_is_followed_and_rates_limited() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let ns = TestNamespace::create(&client, "gwi").await.unwrap();
    let access = gateway_access(&client, &ns.name).await;
    let first = key("k1");
    let jwks = Arc::new(Mutex::new(json!({"keys": [first.jwk]})));
    let iss = issuer(Arc::clone(&jwks)).await;
    let (_gw, port) = start_gateway(
        &[
            "--oidc-enabled",
            "--oidc-issuer-url",
            &iss,
            "--oidc-client-id",
            "gryvia",
            "--keys-namespace",
            &ns.name,
            "--rate-limit",
            "1",
            "--rate-burst",
            "5",
        ],
        &access.kubeconfig,
        "gateway-e2e-issuer",
    )
    .await;
    let now = jiff::Timestamp::now().as_second();
    let claims = |user: &str, iss: &str, exp: i64, nbf: Option<i64>| {
        let mut c = json!({"iss": iss, "aud": "gryvia", "sub": user, "email": user,
                           "groups": ["team-x"], "iat": now, "exp": exp});
        if let Some(n) = nbf {
            c["nbf"] = json!(n);
        }
        c
    };

    let ok = sign(&first, &claims("u1@x", &iss, now + 600, None));
    let (code, me) = call(port, "GET", "/api/v1/whoami", Some(&ok), None).await;
    assert_eq!(code, 200, "{me}");
    assert_eq!(me["user"], "u1@x");

    // Each refused and counted under its reason (the 30 s leeway is passed in both directions).
    let cases = [
        (
            "expired",
            "expired",
            sign(&first, &claims("u2@x", &iss, now - 120, None)),
        ),
        (
            "another issuer",
            "issuer",
            sign(
                &first,
                &claims("u3@x", "https://evil.example", now + 600, None),
            ),
        ),
        (
            "not yet valid",
            "not_yet_valid",
            sign(&first, &claims("u4@x", &iss, now + 600, Some(now + 300))),
        ),
        (
            "no username claim",
            "claims",
            sign(
                &first,
                &json!({"iss": iss, "aud": "gryvia", "sub": "s", "exp": now + 600}),
            ),
        ),
    ];
    for (what, reason, token) in &cases {
        let (code, body) = call(port, "GET", "/api/v1/whoami", Some(token), None).await;
        assert_eq!(code, 401, "{what}: {body}");
        let n = counter(
            port,
            "gryvia_gateway_auth_failures_total",
            &format!("reason=\"{reason}\""),
        )
        .await;
        assert!(n >= 1.0, "{what} not counted under {reason}");
    }

    // Rotation: the issuer publishes a second key and signs with it. Once the gateway may
    // fetch the keys again (at most every 10 s), a token of the new key is accepted.
    let second = key("k2");
    jwks.lock().unwrap()["keys"] = json!([first.jwk, second.jwk]);
    tokio::time::sleep(Duration::from_secs(11)).await;
    let rotated = sign(&second, &claims("u5@x", &iss, now + 600, None));
    let (code, me) = call(port, "GET", "/api/v1/whoami", Some(&rotated), None).await;
    assert_eq!(code, 200, "a rotated key is followed: {me}");

    // Rate limit: a burst of 5 per identity, then 429 with Retry-After; another identity is
    // unaffected.
    let burst = sign(&first, &claims("busy@x", &iss, now + 600, None));
    let mut limited = 0;
    for _ in 0..10 {
        let (code, body) = call(port, "GET", "/api/v1/whoami", Some(&burst), None).await;
        if code == 429 {
            assert_eq!(body["code"], "rate_limited");
            limited += 1;
        }
    }
    assert!(limited >= 4, "only {limited} of 10 requests limited");
    let calm = sign(&first, &claims("calm@x", &iss, now + 600, None));
    let (code, _) = call(port, "GET", "/api/v1/whoami", Some(&calm), None).await;
    assert_eq!(code, 200);
}
