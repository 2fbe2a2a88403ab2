//! Every branch of the tenancy reconcile, bad input included.

#![expect(clippy::unwrap_used, reason = "test helpers panic on broken fixtures")]

use std::collections::{BTreeMap, BTreeSet};

use gryvia_reconcile::tenancy::{
    Allocation, NamespaceState, QuotaReconciler, QuotaWorld, TenantOptions, TenantReconciler,
    TenantSummary, TenantWorld, allocate,
};
use gryvia_reconcile::{EventType, ObjectRef, Plan, Reconcile};
use gryvia_types::k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use gryvia_types::k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use gryvia_types::testing::tenant;
use gryvia_types::{
    DeletionPolicy, GryviaQuota, GryviaQuotaSpec, GryviaTenant, GryviaTenantStatus, MemberKind,
    MemberRole, QuotaLimits, TenantMember, TenantNetworkPolicy,
};
use proptest::prelude::*;
use serde_json::Value;

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000).unwrap()
}

fn world_for(tenants: &[&GryviaTenant]) -> TenantWorld {
    TenantWorld {
        tenants: tenants.iter().map(|t| TenantSummary::of(t)).collect(),
        namespace: None,
        gpus_in_use: 0,
        gpus_by_type: BTreeMap::new(),
        pods: 0,
        workloads: 0,
    }
}

fn run(t: &GryviaTenant, w: &TenantWorld) -> Plan<GryviaTenantStatus> {
    TenantReconciler::default().reconcile(t, w, now())
}

fn applied<'a, S>(plan: &'a Plan<S>, kind: &str, name: &str) -> Option<&'a Value> {
    plan.apply
        .iter()
        .find(|c| c.object_ref.kind == kind && c.object_ref.name == name)
        .map(|c| &c.object)
}

fn deleted<S>(plan: &Plan<S>, kind: &str, name: &str) -> bool {
    plan.delete.iter().any(|d| d.kind == kind && d.name == name)
}

fn condition<'a>(plan: &'a Plan<GryviaTenantStatus>, type_: &str) -> &'a Condition {
    plan.status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

fn child_of(name: &str, parent: &str, gpus: Option<i32>, created: i64) -> GryviaTenant {
    let mut t = tenant(name, gpus.unwrap_or(0));
    if gpus.is_none() {
        t.spec.quotas = None;
    }
    t.spec.parent_tenant = Some(parent.to_owned());
    t.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(created).unwrap()));
    t
}

#[test]
fn a_tenant_gets_an_unowned_namespace_quota_limit_range_and_ready_status() {
    let t = tenant("ml", 16);
    let plan = run(&t, &world_for(&[&t]));
    let ns_child = plan
        .apply
        .iter()
        .find(|c| c.object_ref.kind == "Namespace")
        .unwrap();
    assert_eq!(ns_child.object_ref.name, "tenant-ml");
    assert!(
        !ns_child.owned,
        "the namespace must outlive the tenant object"
    );
    assert_eq!(
        ns_child.object["metadata"]["labels"]["gryvia.io/tenant"],
        "ml"
    );
    let quota = applied(&plan, "ResourceQuota", "gryvia-tenant").unwrap();
    assert_eq!(quota["spec"]["hard"]["requests.nvidia.com/gpu"], "16");
    assert_eq!(quota["metadata"]["namespace"], "tenant-ml");
    let lr = applied(&plan, "LimitRange", "gryvia-defaults").unwrap();
    assert_eq!(lr["spec"]["limits"][0]["max"]["nvidia.com/gpu"], "16");
    assert_eq!(lr["spec"]["limits"][0]["default"]["nvidia.com/gpu"], "0");
    assert_eq!(lr["spec"]["limits"][0]["defaultRequest"]["cpu"], "100m");
    assert!(deleted(&plan, "NetworkPolicy", "gryvia-tenant-isolation"));
    for rb in [
        "gryvia-tenant-admin",
        "gryvia-tenant-edit",
        "gryvia-tenant-view",
    ] {
        assert!(deleted(&plan, "RoleBinding", rb), "{rb}");
    }
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status.namespace.as_deref(), Some("tenant-ml"));
    assert_eq!(status.gpu_limit, Some(16));
    assert_eq!(condition(&plan, "Ready").status, "True");
    assert_eq!(status.observed_generation, Some(1));
    assert!(
        plan.requeue_after().is_some(),
        "usage is refreshed periodically"
    );
}

#[test]
fn changing_concurrent_gpus_changes_the_quota() {
    let mut t = tenant("ml", 16);
    t.spec.quotas.as_mut().unwrap().concurrent_gpus = Some(4);
    let plan = run(&t, &world_for(&[&t]));
    assert_eq!(
        applied(&plan, "ResourceQuota", "gryvia-tenant").unwrap()["spec"]["hard"]["requests.nvidia.com/gpu"],
        "4"
    );
}

#[test]
fn storage_quotas_become_per_storage_class_quotas() {
    let mut t = tenant("ml", 2);
    t.spec.storage_quotas = BTreeMap::from([
        ("home".to_owned(), Quantity("10Ti".into())),
        ("datasets".to_owned(), Quantity("100Ti".into())),
    ]);
    let plan = run(&t, &world_for(&[&t]));
    let hard = &applied(&plan, "ResourceQuota", "gryvia-tenant").unwrap()["spec"]["hard"];
    assert_eq!(
        hard["home.storageclass.storage.k8s.io/requests.storage"],
        "10Ti"
    );
    assert_eq!(
        hard["datasets.storageclass.storage.k8s.io/requests.storage"],
        "100Ti"
    );
}

#[test]
fn a_tenant_without_quotas_has_no_resource_quota_and_no_gpu_cap() {
    let mut t = tenant("free", 0);
    t.spec.quotas = None;
    let plan = run(&t, &world_for(&[&t]));
    assert!(deleted(&plan, "ResourceQuota", "gryvia-tenant"));
    assert!(
        applied(&plan, "LimitRange", "gryvia-defaults").unwrap()["spec"]["limits"][0]
            .get("max")
            .is_none()
    );
    assert_eq!(plan.status.as_ref().unwrap().gpu_limit, None);
    assert!(condition(&plan, "Ready").message.contains("no GPU limit"));
}

#[test]
fn an_isolated_tenant_admits_only_itself_allowed_tenants_and_platform_namespaces() {
    let mut t = tenant("ml", 2);
    t.spec.network_policy = Some(TenantNetworkPolicy {
        isolated: true,
        allowed_tenants: vec!["data".into()],
    });
    let plan = run(&t, &world_for(&[&t]));
    let np = applied(&plan, "NetworkPolicy", "gryvia-tenant-isolation").unwrap();
    let from = &np["spec"]["ingress"][0]["from"];
    assert_eq!(
        from[0]["namespaceSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["data", "ml"])
    );
    assert_eq!(
        from[1]["namespaceSelector"]["matchExpressions"][0]["operator"],
        "DoesNotExist"
    );
    assert_eq!(np["spec"]["podSelector"], serde_json::json!({}));
}

#[test]
fn tenant_rbac_binds_members_by_role_only_when_enabled() {
    let mut t = tenant("ml", 2);
    t.spec.members = vec![
        TenantMember {
            kind: MemberKind::User,
            username: "bob".into(),
            role: MemberRole::Member,
        },
        TenantMember {
            kind: MemberKind::User,
            username: "alice".into(),
            role: MemberRole::Admin,
        },
        TenantMember {
            kind: MemberKind::User,
            username: "carol".into(),
            role: MemberRole::Member,
        },
        TenantMember {
            kind: MemberKind::Group,
            username: "team-ml".into(),
            role: MemberRole::Member,
        },
    ];
    let rbac = TenantReconciler {
        options: TenantOptions { tenant_rbac: true },
    };
    let plan = rbac.reconcile(&t, &world_for(&[&t]), now());
    let admin = applied(&plan, "RoleBinding", "gryvia-tenant-admin").unwrap();
    assert_eq!(admin["roleRef"]["name"], "admin");
    assert_eq!(admin["subjects"][0]["name"], "alice");
    let edit = applied(&plan, "RoleBinding", "gryvia-tenant-edit").unwrap();
    let names: Vec<&str> = edit["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["bob", "carol", "team-ml"],
        "users, then groups, sorted, deterministic"
    );
    let kinds: Vec<&str> = edit["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec!["User", "User", "Group"],
        "a group member binds a Group"
    );
    assert!(
        deleted(&plan, "RoleBinding", "gryvia-tenant-view"),
        "a role without members has no binding"
    );
    let off = run(&t, &world_for(&[&t]));
    assert!(applied(&off, "RoleBinding", "gryvia-tenant-admin").is_none());
}

#[test]
fn a_name_too_long_for_its_namespace_is_invalid_spec_naming_the_field() {
    let t = tenant(&"a".repeat(57), 1);
    let plan = run(&t, &world_for(&[&t]));
    assert!(plan.apply.is_empty() && plan.delete.is_empty());
    let ready = condition(&plan, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(
        ready.message.starts_with("metadata.name"),
        "{}",
        ready.message
    );
    let dotted = tenant("a.b", 1);
    assert!(
        condition(&run(&dotted, &world_for(&[&dotted])), "Ready")
            .message
            .contains("dots")
    );
}

#[test]
fn a_namespace_owned_by_someone_else_is_left_alone_and_reported() {
    let t = tenant("ml", 2);
    let mut w = world_for(&[&t]);
    w.namespace = Some(NamespaceState {
        tenant_label: None,
        terminating: false,
    });
    let plan = run(&t, &w);
    assert!(plan.apply.is_empty());
    assert_eq!(condition(&plan, "Ready").reason, "NamespaceConflict");
}

#[test]
fn reconciling_again_with_the_written_status_changes_nothing() {
    let mut t = tenant("ml", 8);
    let w = world_for(&[&t]);
    let first = run(&t, &w);
    t.status = first.status.clone();
    let second =
        TenantReconciler::default().reconcile(&t, &w, now() + jiff::SignedDuration::from_secs(600));
    assert!(second.status.is_none(), "unchanged status is not patched");
    assert!(second.events.is_empty());
    assert_eq!(first.apply, second.apply, "the same children are desired");
}

#[test]
fn usage_and_utilisation_come_from_the_world() {
    let t = tenant("ml", 8);
    let mut w = world_for(&[&t]);
    w.gpus_in_use = 6;
    w.pods = 3;
    w.namespace = Some(NamespaceState {
        tenant_label: Some("ml".into()),
        terminating: false,
    });
    let s = run(&t, &w).status.unwrap();
    assert_eq!(
        (s.gpus_in_use, s.pods, s.gpu_utilization_percent),
        (6, 3, Some(75))
    );
}

#[test]
fn a_child_asking_more_than_its_parent_has_left_is_capped_with_a_condition_and_event() {
    let parent = tenant("org", 10);
    let a = child_of("a", "org", Some(6), 100);
    let b = child_of("b", "org", Some(8), 200);
    let w = world_for(&[&parent, &a, &b]);
    let plan_b = run(&b, &w);
    assert_eq!(
        applied(&plan_b, "ResourceQuota", "gryvia-tenant").unwrap()["spec"]["hard"]["requests.nvidia.com/gpu"],
        "4"
    );
    let capped = condition(&plan_b, "QuotaCapped");
    assert_eq!(capped.status, "True");
    assert!(
        capped
            .message
            .contains("asked for 8 GPUs, parent \"org\" has 4 left"),
        "{}",
        capped.message
    );
    assert!(
        plan_b
            .events
            .iter()
            .any(|e| e.type_ == EventType::Warning && e.reason == "QuotaCapped")
    );
    // The earlier sibling gets all it asked for; the parent's own namespace keeps nothing.
    assert_eq!(
        applied(&run(&a, &w), "ResourceQuota", "gryvia-tenant").unwrap()["spec"]["hard"]["requests.nvidia.com/gpu"],
        "6"
    );
    assert_eq!(run(&parent, &w).status.unwrap().gpu_limit, Some(0));
}

#[test]
fn a_capped_child_is_uncapped_when_the_parent_grows() {
    let mut parent = tenant("org", 2);
    let mut c = child_of("c", "org", Some(4), 100);
    c.status = run(&c, &world_for(&[&parent, &c])).status;
    parent.spec.quotas.as_mut().unwrap().concurrent_gpus = Some(10);
    let plan = run(&c, &world_for(&[&parent, &c]));
    assert_eq!(condition(&plan, "QuotaCapped").status, "False");
    assert_eq!(plan.status.unwrap().gpu_limit, Some(4));
}

#[test]
fn a_missing_parent_grants_nothing_and_says_so() {
    let c = child_of("c", "ghost", Some(4), 1);
    let plan = run(&c, &world_for(&[&c]));
    let ready = condition(&plan, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "ParentNotFound")
    );
    assert!(ready.message.contains("spec.parentTenant"));
    assert_eq!(
        applied(&plan, "ResourceQuota", "gryvia-tenant").unwrap()["spec"]["hard"]["requests.nvidia.com/gpu"],
        "0"
    );
}

#[test]
fn a_parent_cycle_is_invalid_spec() {
    let a = child_of("a", "b", Some(1), 1);
    let b = child_of("b", "a", Some(1), 2);
    let plan = run(&a, &world_for(&[&a, &b]));
    let ready = condition(&plan, "Ready");
    assert_eq!(ready.reason, "InvalidSpec");
    assert!(ready.message.contains("cycle"));
}

#[test]
fn a_child_without_a_gpu_limit_under_a_limited_parent_gets_none() {
    let parent = tenant("org", 4);
    let c = child_of("c", "org", None, 1);
    let alloc = allocate(&world_for(&[&parent, &c]).tenants);
    assert_eq!(alloc["c"].granted, Some(0));
    assert!(
        alloc["c"]
            .capped
            .as_ref()
            .unwrap()
            .contains("set spec.quotas.concurrentGPUs")
    );
    assert_eq!(alloc["org"].own, Some(4));
}

#[test]
fn under_an_unlimited_parent_children_get_what_they_ask() {
    let mut parent = tenant("org", 0);
    parent.spec.quotas = None;
    let c = child_of("c", "org", Some(64), 1);
    let alloc = allocate(&world_for(&[&parent, &c]).tenants);
    assert_eq!(alloc["c"].granted, Some(64));
    assert_eq!(
        alloc["org"],
        Allocation {
            asked: None,
            granted: None,
            own: None,
            capped: None,
            problem: None
        }
    );
}

#[test]
fn deleting_a_tenant_with_workloads_keeps_its_namespace_by_default() {
    let t = tenant("ml", 2);
    let mut w = world_for(&[&t]);
    w.namespace = Some(NamespaceState {
        tenant_label: Some("ml".into()),
        terminating: false,
    });
    w.workloads = 3;
    let plan = TenantReconciler::default().cleanup(&t, &w, now());
    assert!(plan.delete.is_empty());
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "NamespaceRetained" && e.message.contains("3 workload(s)"))
    );
    assert_eq!(condition(&plan, "Ready").reason, "NamespaceRetained");
    let ns = applied(&plan, "Namespace", "tenant-ml").unwrap();
    assert_eq!(
        ns["metadata"]["annotations"]["gryvia.io/retained-from-tenant"],
        "ml"
    );
}

#[test]
fn deleting_an_empty_tenant_or_one_with_policy_delete_deletes_the_namespace() {
    let mut t = tenant("ml", 2);
    let mut w = world_for(&[&t]);
    w.namespace = Some(NamespaceState {
        tenant_label: Some("ml".into()),
        terminating: false,
    });
    let empty = TenantReconciler::default().cleanup(&t, &w, now());
    assert_eq!(
        empty.delete,
        vec![ObjectRef::cluster("v1", "Namespace", "tenant-ml")]
    );
    w.workloads = 5;
    t.spec.deletion_policy = DeletionPolicy::Delete;
    let forced = TenantReconciler::default().cleanup(&t, &w, now());
    assert_eq!(
        forced.delete,
        vec![ObjectRef::cluster("v1", "Namespace", "tenant-ml")]
    );
}

#[test]
fn deletion_never_touches_a_namespace_the_tenant_does_not_own_or_that_is_gone() {
    let t = tenant("ml", 2);
    let mut w = world_for(&[&t]);
    assert!(TenantReconciler::default().cleanup(&t, &w, now()).is_noop());
    w.namespace = Some(NamespaceState {
        tenant_label: Some("other".into()),
        terminating: false,
    });
    assert!(TenantReconciler::default().cleanup(&t, &w, now()).is_noop());
}

fn quota(name: &str, namespaces: &[&str], gpus: i32) -> GryviaQuota {
    GryviaQuota {
        metadata: ObjectMeta {
            name: Some(name.into()),
            generation: Some(2),
            ..Default::default()
        },
        spec: GryviaQuotaSpec {
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            hard: QuotaLimits {
                gpus: Some(gpus),
                memory: Some(Quantity("64Gi".into())),
                ..Default::default()
            },
        },
        status: None,
    }
}

#[test]
fn a_quota_is_applied_in_existing_namespaces_and_reports_missing_ones() {
    let q = quota("shared", &["a", "b", "c"], 8);
    let w = QuotaWorld {
        existing_namespaces: BTreeSet::from(["a".to_owned(), "b".to_owned()]),
        managed_in: BTreeSet::from(["a".to_owned(), "old".to_owned()]),
        gpus_used: BTreeMap::from([("a".to_owned(), 3), ("old".to_owned(), 1)]),
    };
    let plan = QuotaReconciler.reconcile(&q, &w, now());
    // A namespace not there yet is looked for again within seconds, not at the minute's resync.
    assert_eq!(
        plan.requeue_after(),
        Some(gryvia_reconcile::tenancy::MISSING_NAMESPACE_RECHECK)
    );
    let all_there = QuotaWorld {
        existing_namespaces: BTreeSet::from(["a".to_owned(), "b".to_owned(), "c".to_owned()]),
        ..w.clone()
    };
    assert!(
        QuotaReconciler
            .reconcile(&q, &all_there, now())
            .requeue_after()
            > Some(gryvia_reconcile::tenancy::MISSING_NAMESPACE_RECHECK)
    );
    let nss: Vec<&str> = plan
        .apply
        .iter()
        .map(|c| c.object_ref.namespace.as_deref().unwrap())
        .collect();
    assert_eq!(nss, vec!["a", "b"]);
    assert_eq!(
        plan.apply[0].object["spec"]["hard"]["requests.nvidia.com/gpu"],
        "8"
    );
    assert_eq!(
        plan.apply[0].object["spec"]["hard"]["requests.memory"],
        "64Gi"
    );
    assert_eq!(
        plan.delete,
        vec![ObjectRef::namespaced(
            "v1",
            "ResourceQuota",
            "old",
            "gryvia-quota-shared"
        )]
    );
    let status = plan.status.unwrap();
    assert_eq!(status.gpus_used, BTreeMap::from([("a".to_owned(), 3)]));
    let ready = &status.conditions[0];
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NamespaceNotFound")
    );
    assert!(ready.message.contains("c do(es) not exist"));
}

proptest! {
    /// However tenants are arranged, no family gets more GPUs than its root, nobody gets more
    /// than they asked for, and nothing is negative.
    #[test]
    fn allocations_never_exceed_the_parent(asks in proptest::collection::vec((proptest::option::of(0i32..50), 0usize..6), 1..12)) {
        let mut tenants = Vec::new();
        for (i, (gpus, parent)) in asks.iter().enumerate() {
            // Parents only point to earlier tenants, so the tree is acyclic.
            let parent = if i == 0 || *parent == 0 { None } else { Some(format!("t{}", parent % i)) };
            tenants.push(TenantSummary { name: format!("t{i}"), parent, gpus: *gpus, created: None });
        }
        let alloc = allocate(&tenants);
        prop_assert_eq!(alloc.len(), tenants.len());
        for t in &tenants {
            let a = &alloc[&t.name];
            if let (Some(g), Some(asked)) = (a.granted, a.asked) { prop_assert!(g <= asked); }
            if let Some(own) = a.own { prop_assert!(own >= 0); }
            if let Some(g) = a.granted {
                prop_assert!(g >= 0);
                let children: i32 = tenants.iter().filter(|c| c.parent.as_deref() == Some(t.name.as_str())).map(|c| alloc[&c.name].granted.unwrap_or(0)).sum();
                prop_assert!(children <= g, "children of {} got {} > {}", t.name, children, g);
                prop_assert_eq!(a.own, Some(g - children));
            }
        }
    }
}

#[test]
fn using_more_gpus_of_a_product_than_allowed_is_reported_with_an_event() {
    let mut t = tenant("ml", 16);
    t.spec.quotas.as_mut().unwrap().gpus_per_type =
        BTreeMap::from([("NVIDIA-H100-80GB-HBM3".to_owned(), 4)]);
    let mut w = world_for(&[&t]);
    w.gpus_by_type = BTreeMap::from([
        ("NVIDIA-H100-80GB-HBM3".to_owned(), 6),
        ("NVIDIA-A100-SXM4-80GB".to_owned(), 2),
    ]);
    let plan = run(&t, &w);
    let c = condition(&plan, "GpuTypeLimitExceeded");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "OverGpuTypeLimit")
    );
    assert!(
        c.message
            .contains("NVIDIA-H100-80GB-HBM3: 6 in use, limit 4"),
        "{}",
        c.message
    );
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "GpuTypeLimitExceeded")
    );
    assert_eq!(
        plan.status.as_ref().unwrap().gpus_in_use_by_type["NVIDIA-A100-SXM4-80GB"],
        2
    );
    // Within limits: the condition turns False, no event.
    w.gpus_by_type.insert("NVIDIA-H100-80GB-HBM3".to_owned(), 4);
    t.status = plan.status.clone();
    let again = run(&t, &w);
    assert_eq!(condition(&again, "GpuTypeLimitExceeded").status, "False");
    assert!(again.events.is_empty());
}

#[test]
fn without_per_type_limits_there_is_no_per_type_condition() {
    let t = tenant("ml", 16);
    let plan = run(&t, &world_for(&[&t]));
    assert!(
        plan.status
            .unwrap()
            .conditions
            .iter()
            .all(|c| c.type_ != "GpuTypeLimitExceeded")
    );
}

#[test]
fn a_pod_holds_the_gpus_its_containers_ask_for() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            {"name": "c"}
        ]}
    }))
    .unwrap();
    assert_eq!(gryvia_reconcile::tenancy::pod_gpus(&pod), 3);
    assert_eq!(
        gryvia_reconcile::tenancy::pod_gpus(&k8s_openapi::api::core::v1::Pod::default()),
        0
    );
}
