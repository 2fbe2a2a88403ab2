"""GPU health, drains, tenants and quotas from Python: the same functions the operators run."""

import json

import pytest

import gryvia

NOW = "2026-12-02T12:00:00Z"


def health_check(max_temp=90, remediation=None):
    spec = {
        "target": {"type": "nodes", "nodes": ["gpu-1"]},
        "schedule": "*/1 * * * *",
        "checks": [{"name": "temperature", "type": "gpu-temperature", "threshold": {"max": max_temp}}],
        "onFailure": {"cordon": True, "drain": True, "consecutiveFailures": 1},
        "maxQuarantinedPercent": 100,
    }
    if remediation:
        spec["remediation"] = remediation
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaHealthCheck",
            "metadata": {"name": "gpu-temp", "uid": "u-1", "generation": 1}, "spec": spec}


def gpu_node(temp):
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaGpuNode", "metadata": {"name": "gpu-1"},
            "spec": {"nodeName": "gpu-1"},
            "status": {"gpus": [{"index": 0, "uuid": "GPU-0", "temperatureC": temp, "observedAt": NOW}],
                       "observedAt": NOW}}


def test_a_hot_gpu_fails_its_node_and_names_the_reading():
    e = gryvia.evaluate_node(health_check(), gpu_node(95), NOW)
    assert e["verdict"] == "Failed"
    assert e["reasons"] == ["gpu 0: temperature: temperature (C) 95 above max 90"]
    assert gryvia.evaluate_node(health_check(), gpu_node(60), NOW)["verdict"] == "Healthy"
    assert gryvia.evaluate_node(health_check(), None, NOW)["verdict"] == "Unknown"


def test_the_health_plan_quarantines_a_failing_node_only_with_remediation_on():
    world = {
        "nodes": [{"name": "gpu-1", "labels": {}, "gpuCapacity": 8}],
        "gpuNodes": {"gpu-1": gpu_node(95)},
    }
    report_only = gryvia.reconcile_health_check(health_check(), world, NOW)
    assert report_only["status"]["summary"]["failed"] == 1
    assert not report_only.get("nodeOps")
    acting = gryvia.reconcile_health_check(health_check(), world, NOW, remediation=True)
    ops = json.dumps(acting["nodeOps"])
    assert "gpu-1" in ops and "gryvia.io/gpu-unhealthy" in ops


def test_a_drain_respects_pod_disruption_budgets():
    pods = [
        {"namespace": "ml", "name": "a", "labels": {"app": "x"}, "phase": "Running"},
        {"namespace": "ml", "name": "b", "labels": {"app": "y"}, "phase": "Running"},
        {"namespace": "kube-system", "name": "agent", "ownerKind": "DaemonSet", "phase": "Running"},
    ]
    pdbs = [{"namespace": "ml", "name": "keep-x", "selector": {"matchLabels": {"app": "x"}},
             "disruptionsAllowed": 0}]
    plan = gryvia.drain_plan(pods, pdbs)
    assert [p["name"] for p in plan["evict"]] == ["b"]
    assert [(b["pod"]["name"], b["pdb"]) for b in plan["blocked"]] == [("a", "keep-x")]
    assert plan["skipped"] == ["kube-system/agent"]
    with pytest.raises(gryvia.ValidationError, match="pods"):
        gryvia.drain_plan([{"namespace": 1}], [])


def test_policy_inputs_are_validated_like_the_api_server_does():
    bad = health_check()
    bad["spec"]["onFailure"]["quarantine"] = True
    with pytest.raises(gryvia.ValidationError, match=r"check: .*spec\.onFailure"):
        gryvia.reconcile_health_check(bad)
    lost = tenant("x")
    lost["spec"]["owner"] = "me"
    with pytest.raises(gryvia.ValidationError, match=r"tenants\[1\]: .*spec\.owner"):
        gryvia.allocate_tenants([tenant("ok"), lost])


def tenant(name, gpus=None, parent=None, created="2026-12-01T00:00:00Z"):
    spec = {"displayName": name}
    if gpus is not None:
        spec["quotas"] = {"concurrentGPUs": gpus}
    if parent:
        spec["parentTenant"] = parent
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
            "metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_the_tenant_tree_splits_gpus_down_the_hierarchy():
    a = gryvia.allocate_tenants([
        tenant("org", 16),
        tenant("ml", 10, "org", "2026-12-01T01:00:00Z"),
        tenant("cv", 10, "org", "2026-12-01T02:00:00Z"),
        tenant("lost", 4, "nobody"),
    ])
    assert (a["org"]["granted"], a["org"]["own"]) == (16, 0)
    assert a["ml"]["granted"] == 10
    assert a["cv"]["granted"] == 6 and a["cv"]["capped"]
    assert a["lost"]["granted"] == 0 and a["lost"]["problem"][0]


def test_the_tenant_plan_wants_a_namespace_and_its_quota():
    plan = gryvia.reconcile_tenant(tenant("ml", 8), {"tenants": [{"name": "ml", "gpus": 8}]}, NOW)
    kinds = sorted(c["objectRef"]["kind"] for c in plan["apply"])
    assert "Namespace" in kinds and "ResourceQuota" in kinds
    quota = next(c["object"] for c in plan["apply"] if c["objectRef"]["kind"] == "ResourceQuota")
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"


def test_the_quota_plan_makes_a_resource_quota_per_existing_namespace():
    quota = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQuota", "metadata": {"name": "q"},
             "spec": {"namespaces": ["a", "b"], "hard": {"gpus": 4}}}
    plan = gryvia.reconcile_quota(quota, {"existingNamespaces": ["a"]}, NOW)
    made = [(c["objectRef"]["namespace"], c["objectRef"]["name"]) for c in plan["apply"]]
    assert made == [("a", "gryvia-quota-q")]


def job_list(n):
    items = [{"metadata": {"name": f"j{i}", "namespace": "ml", "uid": f"u{i}"},
              "spec": {"image": "img", "gpus": 1}} for i in range(n)]
    return json.dumps({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJobList",
                       "metadata": {"resourceVersion": "7"}, "items": items})


def test_decode_list_types_every_item():
    jobs = gryvia.decode_list(job_list(3))
    assert [j.name for j in jobs] == ["j0", "j1", "j2"]
    assert jobs[0].kind == "GryviaAIJob"
    assert jobs[0].spec.retry_limit == 3
    assert gryvia.decode_list(job_list(2).encode()) == gryvia.decode_list(job_list(2))
    bad = json.loads(job_list(2))
    bad["items"][1]["spec"]["gpus"] = "many"
    with pytest.raises(gryvia.ValidationError, match=r"items\[1\]"):
        gryvia.decode_list(json.dumps(bad))


def test_reconcile_is_the_one_path_behind_the_named_reconcilers():
    world = {"nodes": [{"name": "gpu-1", "labels": {}, "gpuCapacity": 8}], "gpuNodes": {"gpu-1": gpu_node(95)}}
    for remediation in (False, True):
        assert gryvia.reconcile(health_check(), world, NOW, remediation=remediation) == \
            gryvia.reconcile_health_check(health_check(), world, NOW, remediation=remediation)
    tenants = {"tenants": [{"name": "ml", "gpus": 8}]}
    assert gryvia.reconcile(tenant("ml", 8), tenants, NOW, tenant_rbac=True) == \
        gryvia.reconcile_tenant(tenant("ml", 8), tenants, NOW, tenant_rbac=True)
    quota = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQuota", "metadata": {"name": "q"},
             "spec": {"namespaces": ["a"], "hard": {"gpus": 4}}}
    assert gryvia.reconcile(quota, {"existingNamespaces": ["a"]}, NOW) == \
        gryvia.reconcile_quota(quota, {"existingNamespaces": ["a"]}, NOW)
