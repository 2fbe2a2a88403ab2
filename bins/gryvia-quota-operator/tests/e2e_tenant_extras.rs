//! End-to-end: the quota-operator binary against a real control plane (testenv/), for the
//! tenant features the README claims beyond the namespace and its GPU quota: the opt-in member
//! RoleBindings (`--tenant-rbac`) and storage quotas per StorageClass, enforced by the API
//! server's ResourceQuota admission.
//!
//! Tests in this file run one at a time (a static lock): each starts its own operator, with
//! its Lease in a namespace of its own.

#![expect(clippy::unwrap_used, reason = "test helpers panic on failure")]

use std::time::Duration;

use gryvia_testsupport::{Process, TestNamespace, unique, wait_for};
use gryvia_types::GryviaTenant;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A client, the CRDs, the test lock and one quota-operator started with `flags`, its Lease
/// in a namespace of the test's own.
struct Setup {
    client: kube::Client,
    // Fields drop in declaration order: the operator is killed before the lock is released.
    _operator: Process,
    _lease_ns: TestNamespace,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    async fn with_operator(log_name: &str, flags: &[&str]) -> Option<Setup> {
        let client = gryvia_testsupport::client().await?;
        let serial = SERIAL.lock().await;
        gryvia_client::crds::install(&client, Duration::from_secs(60))
            .await
            .unwrap();
        let lease_ns = TestNamespace::create(&client, "qop-x").await.unwrap();
        let (operator, _) = Process::operator(
            env!("CARGO_BIN_EXE_gryvia-quota-operator"),
            &lease_ns.name,
            flags,
            None,
            &format!("quota-operator-{log_name}"),
        )
        .unwrap();
        Some(Setup {
            client,
            _operator: operator,
            _lease_ns: lease_ns,
            _serial: serial,
        })
    }
}

/// Deletes the tenant and its namespace when dropped (also when the test panics); drop it
/// before the operator, which removes the tenant's finalizer.
struct TenantCleanup(String);

impl Drop for TenantCleanup {
    fn drop(&mut self) {
        let name = self.0.clone();
        gryvia_testsupport::on_drop(move |client| async move {
            let tenants = Api::<GryviaTenant>::all(client.clone());
            let _ = tenants.delete(&name, &DeleteParams::default()).await;
            // The operator (still running) removes its finalizer.
            let _ = wait_for("the tenant to go", Duration::from_secs(30), || async {
                matches!(tenants.get_opt(&name).await, Ok(None)).then_some(())
            })
            .await;
            let _ = Api::<Namespace>::all(client)
                .delete(&format!("tenant-{name}"), &DeleteParams::background())
                .await;
        });
    }
}

async fn create_tenant(client: &kube::Client, name: &str, spec: Value) -> TenantCleanup {
    let tenant: GryviaTenant = serde_json::from_value(json!({
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    Api::<GryviaTenant>::all(client.clone())
        .create(&PostParams::default(), &tenant)
        .await
        .unwrap();
    TenantCleanup(name.to_owned())
}

async fn wait_ready(client: &kube::Client, name: &str) -> GryviaTenant {
    let api: Api<GryviaTenant> = Api::all(client.clone());
    wait_for(
        &format!("tenant {name} Ready"),
        Duration::from_secs(60),
        || async {
            let t = api.get(name).await.ok()?;
            let ready = t
                .status
                .as_ref()
                .is_some_and(|s| gryvia_types::conditions::is_true(&s.conditions, "Ready"));
            ready.then_some(t)
        },
    )
    .await
    .unwrap()
}

/// The Gryvia RoleBindings of a namespace, by name: (ClusterRole, subjects as (kind, name)).
async fn tenant_bindings(
    client: &kube::Client,
    ns: &str,
) -> Vec<(String, String, Vec<(String, String)>)> {
    let mut out: Vec<_> = Api::<RoleBinding>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|b| {
            let name = b.metadata.name.clone()?;
            name.starts_with("gryvia-tenant-").then(|| {
                let subjects = b
                    .subjects
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| (s.kind, s.name))
                    .collect();
                (name, b.role_ref.name, subjects)
            })
        })
        .collect();
    out.sort();
    out
}

/// Whether the API server's RBAC authorizer lets `user` do `verb` on pods in `ns`.
async fn may(client: &kube::Client, user: &str, verb: &str, ns: &str) -> bool {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": user, "resourceAttributes": {"namespace": ns, "verb": verb, "resource": "pods"}}
    }))
    .unwrap();
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

fn user(name: &str) -> (String, String) {
    ("User".to_owned(), name.to_owned())
}

#[tokio::test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
async fn with_tenant_rbac_members_get_role_bindings_of_their_roles_that_follow_the_member_list() {
    let Some(s) = Setup::with_operator("rbac", &["--tenant-rbac"]).await else {
        return;
    };
    let client = s.client.clone();
    let name = unique("rbac");
    let ns = format!("tenant-{name}");
    let alice = format!("alice-{name}@example.com");
    let (bob, carol, dave) = (
        format!("bob-{name}"),
        format!("carol-{name}"),
        format!("dave-{name}"),
    );
    let _cleanup = create_tenant(
        &client,
        &name,
        json!({"displayName": "RBAC", "members": [
            {"username": alice, "role": "admin"},
            {"username": dave, "role": "member"},
            {"username": bob, "role": "member"},
            {"username": carol, "role": "viewer"},
        ]}),
    )
    .await;
    wait_ready(&client, &name).await;

    // One RoleBinding per role, to the ClusterRole of the role, its members sorted by name.
    let want = vec![
        (
            "gryvia-tenant-admin".to_owned(),
            "admin".to_owned(),
            vec![user(&alice)],
        ),
        (
            "gryvia-tenant-edit".to_owned(),
            "edit".to_owned(),
            vec![user(&bob), user(&dave)],
        ),
        (
            "gryvia-tenant-view".to_owned(),
            "view".to_owned(),
            vec![user(&carol)],
        ),
    ];
    let c = client.clone();
    let got = wait_for("the members' RoleBindings", Duration::from_secs(30), || {
        let (c, ns, want) = (c.clone(), ns.clone(), want.clone());
        async move {
            let got = tenant_bindings(&c, &ns).await;
            (got == want).then_some(got)
        }
    })
    .await;
    assert!(
        got.is_ok(),
        "{got:?}; bindings now: {:?}",
        tenant_bindings(&client, &ns).await
    );
    let admin = Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .get("gryvia-tenant-admin")
        .await
        .unwrap();
    assert_eq!(admin.role_ref.kind, "ClusterRole");
    assert_eq!(admin.role_ref.api_group, "rbac.authorization.k8s.io");
    let subject = &admin.subjects.unwrap()[0];
    assert_eq!(
        subject.api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    let labels = admin.metadata.labels.unwrap();
    assert_eq!(labels["gryvia.io/tenant"], name);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "gryvia");

    // The API server's RBAC authorizer grants what the roles say, in the tenant's namespace
    // only (waiting for its caches first).
    wait_for(
        "the authorizer to see the bindings",
        Duration::from_secs(30),
        || async {
            (may(&client, &alice, "create", &ns).await && may(&client, &carol, "list", &ns).await)
                .then_some(())
        },
    )
    .await
    .unwrap();
    assert!(may(&client, &bob, "create", &ns).await);
    assert!(may(&client, &carol, "list", &ns).await);
    assert!(!may(&client, &carol, "create", &ns).await);
    assert!(!may(&client, &alice, "list", "default").await);
    assert!(!may(&client, &format!("mallory-{name}"), "list", &ns).await);

    // Members leave: dave's binding entry goes, and the viewer binding with its last member.
    Api::<GryviaTenant>::all(client.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"members": [
                {"username": alice, "role": "admin"},
                {"username": bob, "role": "member"},
            ]}})),
        )
        .await
        .unwrap();
    let want = vec![
        (
            "gryvia-tenant-admin".to_owned(),
            "admin".to_owned(),
            vec![user(&alice)],
        ),
        (
            "gryvia-tenant-edit".to_owned(),
            "edit".to_owned(),
            vec![user(&bob)],
        ),
    ];
    let c = client.clone();
    let got = wait_for(
        "the RoleBindings to follow the members",
        Duration::from_secs(30),
        || {
            let (c, ns, want) = (c.clone(), ns.clone(), want.clone());
            async move { (tenant_bindings(&c, &ns).await == want).then_some(()) }
        },
    )
    .await;
    assert!(
        got.is_ok(),
        "{got:?}; bindings now: {:?}",
        tenant_bindings(&client, &ns).await
    );
    wait_for(
        "the removed viewer to lose access",
        Duration::from_secs(30),
        || async { (!may(&client, &carol, "list", &ns).await).then_some(()) },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn without_tenant_rbac_a_tenant_with_members_gets_no_role_bindings() {
    let Some(s) = Setup::with_operator("no-rbac", &[]).await else {
        return;
    };
    let client = s.client.clone();
    let name = unique("norbac");
    let ns = format!("tenant-{name}");
    let _cleanup = create_tenant(
        &client,
        &name,
        json!({"displayName": "No RBAC", "members": [
            {"username": format!("alice-{name}"), "role": "admin"},
            {"username": format!("bob-{name}"), "role": "member"},
            {"username": format!("carol-{name}"), "role": "viewer"},
        ]}),
    )
    .await;
    let t = wait_ready(&client, &name).await;
    assert_eq!(t.status.unwrap().namespace.as_deref(), Some(ns.as_str()));
    // Ready is written after the reconcile applied its children: the namespace and its
    // LimitRange are there, the RoleBindings are not.
    Api::<k8s_openapi::api::core::v1::LimitRange>::namespaced(client.clone(), &ns)
        .get("gryvia-defaults")
        .await
        .unwrap();
    assert_eq!(tenant_bindings(&client, &ns).await, vec![]);
    let labelled = Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("gryvia.io/tenant={name}")))
        .await
        .unwrap();
    assert!(labelled.items.is_empty(), "{:?}", labelled.items);
}

fn pvc(name: &str, class: &str, size: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn storage_quotas_per_storage_class_become_quota_entries_the_api_server_enforces() {
    let Some(s) = Setup::with_operator("storage", &[]).await else {
        return;
    };
    let client = s.client.clone();
    let name = unique("store");
    let ns = format!("tenant-{name}");
    let _cleanup = create_tenant(
        &client,
        &name,
        json!({"displayName": "Storage", "quotas": {"concurrentGPUs": 2},
               "storageQuotas": {"fast-ssd": "10Gi", "archive": "1Gi"}}),
    )
    .await;
    wait_ready(&client, &name).await;
    let fast = "fast-ssd.storageclass.storage.k8s.io/requests.storage";
    let archive = "archive.storageclass.storage.k8s.io/requests.storage";
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let hard = quotas
        .get("gryvia-tenant")
        .await
        .unwrap()
        .spec
        .unwrap()
        .hard
        .unwrap();
    assert_eq!(hard[fast].0, "10Gi");
    assert_eq!(hard[archive].0, "1Gi");
    assert_eq!(hard["requests.nvidia.com/gpu"].0, "2");

    // The quota controller of kube-controller-manager counts the namespace; until it has, the
    // API server refuses every claim the quota covers, so the first claim is retried.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    wait_for(
        "a claim within the fast-ssd quota to be admitted",
        Duration::from_secs(30),
        || async {
            pvcs.create(&PostParams::default(), &pvc("data-1", "fast-ssd", "6Gi"))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await
    .unwrap();
    let refused = |claim: PersistentVolumeClaim, resource: &'static str| {
        let pvcs = pvcs.clone();
        async move {
            match pvcs.create(&PostParams::default(), &claim).await {
                Err(kube::Error::Api(e)) => {
                    assert_eq!(e.code, 403, "{e:?}");
                    assert!(e.message.contains("exceeded quota"), "{}", e.message);
                    assert!(e.message.contains(resource), "{}", e.message);
                }
                other => panic!("a claim over the {resource} quota was admitted: {other:?}"),
            }
        }
    };
    // 6 + 6 GiB is over 10 GiB of fast-ssd; 2 GiB is over 1 GiB of archive.
    refused(pvc("data-2", "fast-ssd", "6Gi"), fast).await;
    refused(pvc("cold", "archive", "2Gi"), archive).await;
    // Within the rest of the fast-ssd quota, and a class without a quota, are admitted.
    pvcs.create(&PostParams::default(), &pvc("data-3", "fast-ssd", "4Gi"))
        .await
        .unwrap();
    pvcs.create(
        &PostParams::default(),
        &pvc("scratch", "no-quota-class", "100Gi"),
    )
    .await
    .unwrap();
    let used = wait_for(
        "the quota's usage to count the claims",
        Duration::from_secs(30),
        || async {
            let used = quotas.get("gryvia-tenant").await.ok()?.status?.used?;
            (used.get(fast)?.0 == "10Gi").then_some(used)
        },
    )
    .await
    .unwrap();
    assert_eq!(used[archive].0, "0");
}
