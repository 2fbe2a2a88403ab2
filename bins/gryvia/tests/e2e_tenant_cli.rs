//! End-to-end: `gryvia tenant create`, `list` and `get` against a real control plane
//! (testenv/), with the quota-operator's tenant controllers (`gryvia_client::controllers::{tenant, quota}`,
//! what the `gryvia-quota-operator` binary runs) in this process.

use std::time::Duration;

use gryvia_testsupport::{unique, wait_for};
use gryvia_types::GryviaTenant;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams};
use serde_json::json;

async fn gryvia(args: &[&str]) -> (bool, String, String) {
    gryvia_testsupport::run_binary(env!("CARGO_BIN_EXE_gryvia"), args).await
}

/// The quota-operator's tenant controllers, in this process, for as long as the guard lives;
/// on drop the test's tenants are deleted first (their finalizer needs the controllers).
struct Controllers {
    handle: tokio::task::JoinHandle<()>,
    client: kube::Client,
    tenants: Vec<String>,
}

impl Controllers {
    fn start(client: &kube::Client, tenants: &[&str]) -> Self {
        let options = gryvia_reconcile::tenancy::TenantOptions::default();
        let start = gryvia_client::operators::ControllerSet::new()
            .with(move |s| gryvia_client::controllers::tenant::controller(s, options))
            .with(gryvia_client::controllers::quota::controller)
            .into_controllers(
                client.clone(),
                gryvia_client::metrics::Metrics::new(),
                false,
            );
        Controllers {
            handle: tokio::spawn(start()),
            client: client.clone(),
            tenants: tenants.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    /// Deletes the tenants and waits until they are gone, then their namespaces.
    async fn clean_up(&self) {
        let api: Api<GryviaTenant> = Api::all(self.client.clone());
        for t in &self.tenants {
            let _ = api.delete(t, &DeleteParams::default()).await;
        }
        for t in &self.tenants {
            let _ = wait_for("a tenant to go", Duration::from_secs(30), || async {
                matches!(api.get_opt(t).await, Ok(None)).then_some(())
            })
            .await;
            let _ = Api::<Namespace>::all(self.client.clone())
                .delete(&format!("tenant-{t}"), &DeleteParams::background())
                .await;
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// The cells of the table row whose first cell is `name` (cells are separated by three
/// spaces or more).
fn row(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| {
            l.split("   ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
}

/// Asserts a failed run with exactly one line on standard error containing `want`.
fn one_line_error((ok, out, err): (bool, String, String), want: &str) {
    assert!(!ok, "succeeded: {out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(want), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn tenant_create_list_and_get_from_the_command_line_and_one_line_errors_on_bad_input() {
    let Some(client) = gryvia_testsupport::client().await else {
        return;
    };
    gryvia_client::crds::install(&client, Duration::from_secs(60))
        .await
        .unwrap();
    let team = unique("cli-team");
    let sub = unique("cli-sub");
    let controllers = Controllers::start(&client, &[&sub, &team]);

    // create: a tenant with a GPU limit, isolation and members, and one with an allowed SKU.
    // (Not a parent and its child: a child's creation does not re-allocate its parent until
    // the parent's next periodic reconcile, a minute later.)
    let (ok, out, err) = gryvia(&[
        "tenant",
        "create",
        &team,
        "--display-name",
        "CLI Team",
        "--max-gpus",
        "4",
        "--isolated",
        "true",
        "--member",
        "alice:admin",
        "--member",
        "bob:member",
    ])
    .await;
    assert!(ok, "{out}{err}");
    assert_eq!(
        out.trim(),
        format!("tenant {team} applied (namespace tenant-{team})")
    );
    let (ok, out, err) = gryvia(&[
        "tenant",
        "create",
        &sub,
        "--max-gpus",
        "1",
        "--allowed-sku",
        "e2e-h100",
    ])
    .await;
    assert!(ok, "{out}{err}");
    // The operator makes them Ready.
    let tenants: Api<GryviaTenant> = Api::all(client.clone());
    wait_for("both tenants Ready", Duration::from_secs(60), || async {
        let ready = |t: GryviaTenant| {
            let s = t.status?;
            gryvia_types::conditions::is_true(&s.conditions, "Ready").then_some(s.gpu_limit)
        };
        let a = ready(tenants.get(&team).await.ok()?)?;
        let b = ready(tenants.get(&sub).await.ok()?)?;
        (a == Some(4) && b == Some(1)).then_some(())
    })
    .await
    .unwrap();

    // list: a table, one row per tenant.
    let (ok, out, err) = gryvia(&["tenant", "list"]).await;
    assert!(ok, "{err}");
    assert_eq!(
        row(&out, "NAME"),
        [
            "NAME",
            "DISPLAY NAME",
            "NAMESPACE",
            "GPU LIMIT",
            "GPUS IN USE",
            "READY"
        ]
    );
    assert_eq!(
        row(&out, &team),
        [
            team.as_str(),
            "CLI Team",
            &format!("tenant-{team}"),
            "4",
            "0",
            "True"
        ]
    );
    assert_eq!(
        row(&out, &sub),
        [
            sub.as_str(),
            sub.as_str(),
            &format!("tenant-{sub}"),
            "1",
            "0",
            "True"
        ]
    );

    // list -o json: the objects as the API server has them.
    let (ok, out, err) = gryvia(&["tenant", "list", "-o", "json"]).await;
    assert!(ok, "{err}");
    let list: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let of = |name: &str| {
        list.iter()
            .find(|t| t["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {out}"))
            .clone()
    };
    let t = of(&team);
    assert_eq!(t["kind"], "GryviaTenant");
    assert_eq!(t["spec"]["displayName"], "CLI Team");
    assert_eq!(t["spec"]["quotas"]["concurrentGPUs"], 4);
    assert_eq!(t["spec"]["networkPolicy"]["isolated"], true);
    assert_eq!(t["status"]["gpuLimit"], 4);
    assert_eq!(of(&sub)["spec"]["allowedSkus"], json!(["e2e-h100"]));

    // get: the details, as text and as JSON.
    let (ok, out, err) = gryvia(&["tenant", "get", &team]).await;
    assert!(ok, "{err}");
    for line in [
        format!("Name:           {team}"),
        "Display name:   CLI Team".to_owned(),
        format!("Namespace:      tenant-{team}"),
        "GPUs asked:     4".to_owned(),
        "GPU limit:      4".to_owned(),
        "Isolated:       true".to_owned(),
        "Members:        alice (admin), bob (member)".to_owned(),
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "no line {line:?} in:\n{out}"
        );
    }
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("Ready") && l.contains("True")),
        "{out}"
    );
    let (ok, out, err) = gryvia(&["tenant", "get", &sub, "-o", "json"]).await;
    assert!(ok, "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(t["metadata"]["name"], sub.as_str());
    assert_eq!(t["status"]["namespace"], format!("tenant-{sub}"));

    // create again: an update, which the operator follows.
    let (ok, out, err) = gryvia(&[
        "tenant",
        "create",
        &team,
        "--display-name",
        "CLI Team",
        "--max-gpus",
        "6",
    ])
    .await;
    assert!(ok, "{out}{err}");
    wait_for(
        "the GPU limit to follow",
        Duration::from_secs(30),
        || async { (tenants.get(&team).await.ok()?.status?.gpu_limit == Some(6)).then_some(()) },
    )
    .await
    .unwrap();

    // Bad input: a non-zero exit and one line that says why.
    let missing = unique("no-such-tenant");
    one_line_error(
        gryvia(&["tenant", "get", &missing]).await,
        &format!("tenant \"{missing}\" not found"),
    );
    one_line_error(
        gryvia(&["tenant", "create", &missing, "--member", "alice"]).await,
        "expected USER:ROLE",
    );
    one_line_error(
        gryvia(&["tenant", "create", &missing, "--member", "alice:boss"]).await,
        "spec.members[0].role",
    );
    one_line_error(
        gryvia(&["tenant", "create", &missing, "--max-gpus=-1"]).await,
        "spec.quotas.concurrentGPUs",
    );
    one_line_error(
        gryvia(&["tenant", "create", "Not_A_Name"]).await,
        "metadata.name",
    );
    one_line_error(
        gryvia(&["tenant", "list", "-o", "xml"]).await,
        "invalid value 'xml'",
    );
    assert!(
        tenants.get_opt(&missing).await.unwrap().is_none(),
        "a refused tenant was created"
    );
    controllers.clean_up().await;
}
