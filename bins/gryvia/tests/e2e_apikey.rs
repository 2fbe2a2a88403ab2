//! End-to-end: `gryvia apikey create|list|revoke` against a real control plane: the key is
//! printed once, stored only as an argon2id hash, listed without its secret, and revoked.

use gryvia_testsupport::{TestNamespace, run_binary};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

const GRYVIA: &str = env!("CARGO_BIN_EXE_gryvia");

#[tokio::test]
async fn a_key_is_shown_once_stored_hashed_listed_and_revoked() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    let ns = TestNamespace::create(&client, "apikey").await.unwrap();
    let (ok, out, err) = run_binary(
        GRYVIA,
        &[
            "apikey",
            "create",
            "--name",
            "ci",
            "--user",
            "alice@example.com",
            "--group",
            "team-a",
            "--scope",
            "read",
            "--expires-in-days",
            "7",
            "--namespace",
            &ns.name,
        ],
    )
    .await;
    assert!(ok, "{err}");
    let key = out.lines().next().unwrap().trim().to_owned();
    assert!(key.starts_with("gryvia_"), "{out}");
    let id = key.split('_').nth(1).unwrap().to_owned();
    gryvia_testsupport::record_secret(
        "the secret part of an API key made by the CLI",
        key.rsplit('_').next().unwrap(),
    );

    let secret = Api::<Secret>::namespaced(client.clone(), &ns.name)
        .get(&format!("gryvia-apikey-{id}"))
        .await
        .unwrap();
    let data = secret.data.unwrap();
    let hash = String::from_utf8(data["hash"].0.clone()).unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    let stored = serde_json::to_string(&data).unwrap();
    assert!(
        !stored.contains(key.rsplit('_').next().unwrap()),
        "the secret part is stored nowhere"
    );

    let (ok, out, err) = run_binary(
        GRYVIA,
        &["apikey", "list", "--namespace", &ns.name, "-o", "json"],
    )
    .await;
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["id"], serde_json::json!(id), "{out}");
    assert_eq!(listed["scope"], "read");
    assert!(!out.contains(key.rsplit('_').next().unwrap()));

    let (ok, out, _) =
        run_binary(GRYVIA, &["apikey", "revoke", &id, "--namespace", &ns.name]).await;
    assert!(ok && out.contains("revoked"), "{out}");
    let (ok, _, err) =
        run_binary(GRYVIA, &["apikey", "revoke", &id, "--namespace", &ns.name]).await;
    assert!(!ok, "revoking twice fails");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains(&id), "{err}");
}
