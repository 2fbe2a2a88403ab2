"""The pure policies from Python: the same functions the operators run."""

import pytest

import gryvia


def template():
    return {
        "apiVersion": "gryvia.io/v1alpha1",
        "kind": "GryviaTemplate",
        "metadata": {"name": "fine-tune"},
        "spec": {
            "category": "fine-tuning",
            "defaults": {
                "image": "registry.local/ft:{{ .version }}",
                "gpus": 4,
                "command": ["torchrun", "ft.py", "--lr={{ .lr }}"],
            },
            "parameters": [
                {"name": "version", "required": True},
                {"name": "lr", "type": "number", "default": "0.001", "validation": {"min": 0, "max": 1}},
            ],
        },
    }


def test_a_template_renders_into_a_valid_job():
    j = gryvia.render_template(template(), "run-1", "team-a", {"version": "v2"})
    assert j.kind == "GryviaAIJob"
    assert j.spec.image == "registry.local/ft:v2"
    assert j.spec.command == ["torchrun", "ft.py", "--lr=0.001"]
    assert j.metadata.labels["gryvia.io/template"] == "fine-tune"
    assert j.spec.template_ref.parameters.to_dict() == {"version": "v2", "lr": "0.001"}


def test_a_bad_parameter_names_itself():
    with pytest.raises(gryvia.ValidationError) as e:
        gryvia.render_template(template(), "r", "ns", {"version": "v2", "lr": "2"})
    assert str(e.value) == "parameters.lr: 2 is above the maximum 1"
    with pytest.raises(gryvia.ValidationError, match="parameters.version: required"):
        gryvia.render_template(template(), "r", "ns")


def test_check_template_reports_an_undeclared_placeholder():
    t = template()
    t["spec"]["defaults"]["args"] = ["--x={{ .nope }}"]
    with pytest.raises(gryvia.ValidationError, match=r"defaults.args\[0\]"):
        gryvia.check_template(t)


def job(**spec):
    body = {"image": "img", "gpus": 1}
    body.update(spec)
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": "train", "namespace": "tenant-ml"}, "spec": body}


def test_the_admission_decision_matches_the_webhook():
    world = {
        "tenant": {"name": "ml", "allowedSkus": ["h100"], "gpusPerType": {}, "gpusInUseByType": {}},
        "skus": {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"},
    }
    d = gryvia.admit_job(job(gpuType="NVIDIA-A100-SXM4-80GB"), world)
    assert d["allowed"] is False
    assert d["message"].startswith("spec.gpuType: NVIDIA-A100-SXM4-80GB is not allowed for tenant ml")
    assert gryvia.admit_job(job(gpuType="h100"), world)["allowed"] is True
    assert gryvia.admit_job(job(gpus=0))["allowed"] is True


def test_the_mutation_adds_the_training_environment():
    ops = gryvia.mutate_job(job(framework="pytorch", replicas=2))
    env = {e["name"]: e["value"] for e in ops[0]["value"]}
    assert env["PET_NNODES"] == "2"
    assert env["NCCL_DEBUG"] == "WARN"


def test_the_controller_plan_for_a_new_job():
    plan = gryvia.reconcile_job(job(retryLimit=2), now="2026-12-02T12:00:00Z")
    kinds = [c["objectRef"]["kind"] for c in plan["apply"]]
    assert kinds == ["Job"]
    batch = plan["apply"][0]["object"]
    assert batch["spec"]["backoffLimit"] == 2
    assert plan["status"]["phase"] == "Pending"
    rendered = gryvia.render_job(job(replicas=3))
    assert rendered["spec"]["completionMode"] == "Indexed"


def test_reconcile_dispatches_on_the_kind_and_names_one_it_cannot_take():
    now = "2026-12-02T12:00:00Z"
    assert gryvia.reconcile(job(retryLimit=2), now=now) == gryvia.reconcile_job(job(retryLimit=2), now=now)
    with pytest.raises(gryvia.ValidationError, match=r'object.kind: "GryviaTemplate" has no reconciler; one of GryviaAIJob'):
        gryvia.reconcile(template(), now=now)
    with pytest.raises(gryvia.ValidationError, match=r"object: .*spec"):
        gryvia.reconcile({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
                          "metadata": {"name": "j", "namespace": "n"}, "spec": {"gpus": 1}}, now=now)


def test_an_evicted_pod_costs_no_retry():
    world = {
        "job": {"owned": True, "backoffLimit": 0, "active": 1, "ready": 1, "succeeded": 0, "failed": 0,
                "startTime": None, "finishTime": None, "complete": False, "failedCondition": None},
        "pods": [
            {"name": "train-a", "node": "n1", "phase": "Failed", "deleting": False,
             "disruption": "EvictionByEvictionAPI", "unschedulable": None, "reason": None, "exitCode": 137},
            {"name": "train-b", "node": "n2", "phase": "Running", "deleting": False,
             "disruption": None, "unschedulable": None, "reason": None, "exitCode": None},
        ],
        "nodes": {"n1": {"quarantined": "hc"}, "n2": {"quarantined": None}},
        "priorityClassExists": False,
    }
    plan = gryvia.reconcile_job(job(retryLimit=0), world, "2026-12-02T12:00:00Z")
    st = plan["status"]
    assert st["retries"] == 0
    assert st["infrastructureFailures"] == 1
    assert st["avoidedNodes"] == ["n1"]


def test_reservation_windows_and_cron():
    r = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaReservation", "metadata": {"name": "r"},
         "spec": {"owner": {"type": "team", "name": "ml"}, "resources": {"gpuType": "H100", "gpuCount": 8},
                  "schedule": {"type": "recurring", "recurrence": {"startTime": "22:00", "durationMinutes": 480,
                                                                  "timeZone": "Europe/Berlin"}}}}
    w = gryvia.reservation_window(r, "2026-12-02T22:30:00Z")
    assert w == {"state": "open", "start": "2026-12-02T21:00:00Z", "end": "2026-12-03T05:00:00Z"}
    r["spec"]["schedule"]["recurrence"]["timeZone"] = "Nowhere/Atlantis"
    with pytest.raises(gryvia.ValidationError, match="timeZone"):
        gryvia.reservation_window(r, "2026-12-02T22:30:00Z")
    assert gryvia.next_cron("*/5 * * * *", "2026-12-02T12:01:00Z") == "2026-12-02T12:05:00Z"
    with pytest.raises(gryvia.ValidationError, match="minute"):
        gryvia.next_cron("61 * * * *", "2026-12-02T12:01:00Z")


def test_schedule_admits_what_fits_and_says_why_the_rest_waits():
    h100 = "NVIDIA-H100-80GB-HBM3"
    queue = {"name": "ml", "namespaces": ["ml"], "cohort": None,
             "resources": [{"gpuType": h100, "nominal": 8000, "borrowingLimit": None, "lendingLimit": None}],
             "strategy": "StrictFIFO", "preemptLowerPriority": False, "reclaimWithinCohort": False,
             "gangAdmission": True}

    def job(name, gpus, minute):
        return {"key": f"ml/{name}", "created": f"2026-12-03T11:{minute:02d}:00Z",
                "classValue": 0, "priority": 50, "gpuType": h100, "workers": 1, "share": {"Gpus": gpus},
                "reservation": None, "expectedSeconds": None, "graceSeconds": 30, "state": "Pending", "live": {}}

    node = {"name": "n1", "product": h100, "allocatable": {"nvidia.com/gpu": 8}, "replicas": 0,
            "gpuMemoryMib": None, "unavailable": None, "reservedBy": None, "used": {}}
    world = {"queues": [queue], "jobs": [job("a", 8, 1), job("b", 4, 2)], "nodes": [node]}
    c = gryvia.schedule(world, now="2026-12-03T12:00:00Z")
    assert [a["job"] for a in c["admitted"]] == ["ml/a"]
    assert c["admitted"][0]["admission"]["nodes"] == ["n1"]
    waiting = c["pending"]["ml/b"]
    assert waiting["reason"] == f"needs 4 GPUs of {h100}; queue ml has 0 of 8 nominal free"
    assert gryvia.expected_start(world, "ml", "a", now="2026-12-03T12:00:00Z") == "2026-12-03T12:00:00Z"
    with pytest.raises(gryvia.ValidationError, match="not a GPU resource"):
        node["allocatable"] = {"cpu": 8}
        gryvia.schedule(world)


def test_a_queue_world_from_cluster_objects_answers_when_a_job_would_start():
    h100 = "NVIDIA-H100-80GB-HBM3"
    queue = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQueue", "metadata": {"name": "ml"},
             "spec": {"namespaces": ["ml"], "resources": [{"gpuType": h100, "nominal": 8}]}}
    job = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
           "metadata": {"name": "train", "namespace": "ml", "creationTimestamp": "2026-12-03T11:00:00Z"},
           "spec": {"image": "i", "gpus": 4, "replicas": 2, "gpuType": h100}}
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": h100}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    busy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "x"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            "status": {"phase": "Running"}}
    world = gryvia.queue_world([queue], [job], [node], [busy])
    assert world["nodes"][0]["used"] == {"nvidia.com/gpu": 2}
    c = gryvia.schedule(world, now="2026-12-03T12:00:00Z")
    assert c["pending"]["ml/train"]["reason"] == (
        f"needs 2 workers x 4 GPUs of {h100}; room for 1 worker on 1 node of {h100}")
    assert gryvia.queue_world([queue], [job], [node], [])["nodes"][0]["used"] == {}
    assert gryvia.schedule(gryvia.queue_world([queue], [job], [node], []))["admitted"][0]["job"] == "ml/train"
