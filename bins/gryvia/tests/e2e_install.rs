//! End-to-end: `gryvia install` puts every CRD in place and waits until each is Established;
//! `gryvia version` then reports the API server's version and the installed CRDs' release,
//! against a real control plane (testenv/).

async fn gryvia(args: &[&str]) -> (bool, String, String) {
    gryvia_testsupport::run_binary(env!("CARGO_BIN_EXE_gryvia"), args).await
}

#[tokio::test]
async fn install_then_version_reports_the_server_and_every_crd_established() {
    if gryvia_testsupport::client().await.is_none() {
        return;
    }
    let (ok, out, err) = gryvia(&["install", "--timeout", "120"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "31 CRDs installed and Established\n");

    let (ok, out, err) = gryvia(&["version"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[0],
        format!("client: gryvia {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(lines[1].starts_with("server: Kubernetes v1."), "{out}");
    assert_eq!(
        lines[2],
        format!(
            "crds:   gryvia {} (31 of 31 kinds installed, 31 Established, group gryvia.io/v1alpha1)",
            env!("CARGO_PKG_VERSION")
        )
    );
}
