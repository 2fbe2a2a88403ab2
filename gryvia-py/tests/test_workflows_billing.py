"""Job hooks, workflows, metering and budgets from Python: the same functions the operators run."""

import pytest

import gryvia

NOW = "2026-08-11T00:00:00Z"


def job_hook():
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaJobHook",
            "metadata": {"name": "notify", "namespace": "ml", "uid": "hook-uid",
                         "creationTimestamp": "2026-08-01T00:00:00Z", "generation": 1},
            "spec": {"events": ["Succeeded", "Failed"], "url": "https://hooks.example/in",
                     "secretRef": {"name": "key"}}}


def test_a_job_hook_records_and_sends_a_finished_job_once():
    subject = {"kind": "GryviaAIJob", "name": "train", "uid": "j-1", "created": "2026-08-02T00:00:00Z",
               "phase": "Succeeded", "startTime": "2026-08-02T00:01:00Z",
               "completionTime": "2026-08-02T01:00:00Z"}
    plan = gryvia.reconcile_job_hook(job_hook(), {"subjects": [subject], "secret": "Present"}, NOW)
    [n] = plan["notifications"]
    assert n["id"] == "hook-uid.j-1.succeeded"
    assert n["body"]["event"] == "Succeeded"
    assert n["secret"] == ["ml", "key", "secret"]
    assert plan["status"]["deliveries"][0]["state"] == "Pending"
    # Without its key the hook sends nothing and says why.
    plan = gryvia.reconcile_job_hook(job_hook(), {"subjects": [subject], "secret": "Missing"}, NOW)
    assert "notifications" not in plan
    [ready] = plan["status"]["conditions"]
    assert ready["reason"] == "SecretMissing"


def workflow():
    step = lambda name, deps: {"name": name, "dependsOn": deps,
                               "job": {"image": f"registry.local/{name}:1", "gpus": 1}}
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaWorkflow",
            "metadata": {"name": "pipe", "namespace": "ml", "generation": 1},
            "spec": {"steps": [step("prepare", []), step("train", ["prepare"])]}}


def test_a_workflow_starts_a_step_when_its_dependency_succeeded():
    plan = gryvia.reconcile_workflow(workflow(), None, NOW)
    assert [c["objectRef"]["name"] for c in plan["apply"]] == ["pipe-prepare"]
    done = {"jobs": [{"step": "prepare", "name": "pipe-prepare", "phase": "Succeeded"}]}
    plan = gryvia.reconcile_workflow(workflow(), done, NOW)
    assert [c["objectRef"]["name"] for c in plan["apply"]] == ["pipe-train"]
    assert plan["status"]["phase"] == "Running"


def test_a_cycle_is_named():
    wf = workflow()
    wf["spec"]["steps"][0]["dependsOn"] = ["train"]
    plan = gryvia.reconcile_workflow(wf, None, NOW)
    assert plan["status"]["conditions"][0]["message"] == "spec.steps: dependency cycle prepare -> train -> prepare"


SKUS = [{"name": "h100", "gpuProduct": "NVIDIA-H100-80GB-HBM3", "priceMicros": 4000000, "currency": "USD"}]


def test_a_started_gpu_job_is_metered():
    job = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
           "metadata": {"name": "train", "namespace": "tenant-ml", "uid": "abcdef12-0000"},
           "spec": {"image": "i", "gpus": 4, "replicas": 2, "gpuType": "NVIDIA-H100-80GB-HBM3"},
           "status": {"startTime": "2026-08-02T00:00:00Z"}}
    r = gryvia.usage_record(job, {"skus": SKUS, "tenant": "ml"})
    assert r["metadata"]["name"] == "train-abcdef12"
    assert (r["spec"]["tenant"], r["spec"]["sku"], r["spec"]["gpuCount"]) == ("ml", "h100", 8)
    del job["status"]
    assert gryvia.usage_record(job, {"skus": SKUS}) is None


def test_a_budget_counts_its_tenants_records():
    budget = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget", "metadata": {"name": "ml"},
              "spec": {"scope": {"type": "tenant", "name": "ml"}, "period": {"type": "monthly"},
                       "limits": {"costUSD": 100}, "enforcement": {"enabled": True}}}
    record = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaUsageRecord", "metadata": {"name": "r"},
              "spec": {"tenant": "ml", "namespace": "tenant-ml", "workload": {"kind": "GryviaAIJob", "name": "j"},
                       "sku": "h100", "gpuCount": 5, "startTime": "2026-08-01T00:00:00Z",
                       "endTime": "2026-08-01T06:00:00Z"}}
    plan = gryvia.reconcile_budget(budget, {"records": [record], "skus": SKUS}, NOW)
    st = plan["status"]
    assert (st["state"], st["spendUSD"], st["gpuHours"]) == ("blocked", "120", "30")


def test_an_invalid_budget_is_refused_with_the_field_named():
    with pytest.raises(gryvia.ValidationError, match="limits"):
        gryvia.reconcile_budget({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget",
                                 "metadata": {"name": "b"},
                                 "spec": {"scope": {"type": "tenant", "name": "ml"},
                                          "period": {"type": "monthly"}, "limits": {}}})


def test_reconcile_takes_hooks_workflows_and_budgets_by_their_kind():
    subject = {"kind": "GryviaAIJob", "name": "train", "uid": "j-1", "created": "2026-08-02T00:00:00Z",
               "phase": "Failed"}
    hook_world = {"subjects": [subject], "secret": "Present"}
    assert gryvia.reconcile(job_hook(), hook_world, NOW) == gryvia.reconcile_job_hook(job_hook(), hook_world, NOW)
    assert gryvia.reconcile(workflow(), None, NOW) == gryvia.reconcile_workflow(workflow(), None, NOW)
    budget = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaBudget", "metadata": {"name": "ml"},
              "spec": {"scope": {"type": "tenant", "name": "ml"}, "period": {"type": "monthly"},
                       "limits": {"costUSD": 100}}}
    assert gryvia.reconcile(budget, {"skus": SKUS}, NOW) == gryvia.reconcile_budget(budget, {"skus": SKUS}, NOW)
