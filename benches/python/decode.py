"""Decoding 10,000 objects from a list response: gryvia's typed decode against the official
``kubernetes`` Python client.

Both sides get the JSON body of a list response, as an HTTP client hands it over:
- gryvia: ``gryvia.decode_list(body)`` on a ``GryviaAIJobList`` (what ``gryvia.Client.list``
  does after the request): every item decoded through its typed Rust struct into a
  ``Resource``. Also timed with ``to_dict()`` on every item, which builds the whole object as
  Python data (the cost of touching every field from Python).
- kubernetes: ``ApiClient().deserialize(body, "V1JobList", "application/json")``, the client's own path for
  ``BatchV1Api.list_job_for_all_namespaces``, into ``V1Job`` model objects.

The objects are equivalent: the same metadata (labels, annotations, owner reference, uid,
timestamps), a spec with image, command, GPU resources and environment, and a status with
conditions and times, about the same JSON size per object (printed).

Run: ``scripts/bench-python`` (installs the release wheel and the requirements), or
``python3 benches/python/decode.py [N] [ROUNDS]``.
"""

import json
import statistics
import sys
import time

import gryvia
from kubernetes.client import ApiClient

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def metadata(i):
    return {
        "name": f"train-{i:05d}",
        "namespace": f"team-{i % 20}",
        "uid": f"00000000-0000-4000-8000-{i:012d}",
        "resourceVersion": str(100_000 + i),
        "generation": 1,
        "creationTimestamp": "2026-12-02T12:00:00Z",
        "labels": {"gryvia.io/tenant": f"team-{i % 20}", "app": "train", "run": f"r{i % 7}"},
        "annotations": {"gryvia.io/owner": "ml-platform", "note": "nightly fine-tune"},
    }


def env(i):
    return [{"name": "EPOCHS", "value": "10"}, {"name": "SEED", "value": str(i)}]


def conditions():
    return [
        {"type": "Running", "status": "False", "reason": "Finished", "message": "all workers done",
         "lastTransitionTime": "2026-12-02T12:10:00Z"},
        {"type": "Succeeded", "status": "True", "reason": "Completed", "message": "2 of 2 succeeded",
         "lastTransitionTime": "2026-12-02T12:10:00Z"},
    ]


def gryvia_item(i):
    m = metadata(i)
    return {
        "apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob", "metadata": m,
        "spec": {"image": "registry.local/train:1.4", "command": ["torchrun", "train.py"],
                 "args": ["--epochs=10"], "gpus": 2, "replicas": 2, "framework": "pytorch",
                 "gpuType": "NVIDIA-H100-80GB-HBM3", "env": env(i), "retryLimit": 3},
        "status": {"phase": "Succeeded", "jobName": m["name"], "active": 0, "succeeded": 2, "failed": 0,
                   "retries": 0, "startTime": "2026-12-02T12:00:05Z",
                   "completionTime": "2026-12-02T12:10:00Z", "conditions": conditions()},
    }


def batch_item(i):
    m = metadata(i)
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": m,
        "spec": {"completions": 2, "parallelism": 2, "backoffLimit": 3, "completionMode": "Indexed",
                 "template": {"metadata": {"labels": m["labels"]},
                              "spec": {"restartPolicy": "Never", "containers": [{
                                  "name": "train", "image": "registry.local/train:1.4",
                                  "command": ["torchrun", "train.py"], "args": ["--epochs=10"],
                                  "env": env(i),
                                  "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}},
        "status": {"active": 0, "succeeded": 2, "failed": 0, "startTime": "2026-12-02T12:00:05Z",
                   "completionTime": "2026-12-02T12:10:00Z",
                   "conditions": [dict(c, type="Complete", status="True", lastProbeTime="2026-12-02T12:10:00Z")
                                  for c in conditions()[1:]]},
    }


def body(kind, items):
    return json.dumps({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "200000"},
                       "items": items})


def timed(fn):
    times = []
    out = None
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), out


def main():
    g_body = body("GryviaAIJobList", [gryvia_item(i) for i in range(N)])
    k_body = body("JobList", [batch_item(i) for i in range(N)])
    api = ApiClient()

    g_med, g_min, jobs = timed(lambda: gryvia.decode_list(g_body))
    assert len(jobs) == N and jobs[N - 1].status.succeeded == 2
    gd_med, gd_min, dicts = timed(lambda: [j.to_dict() for j in gryvia.decode_list(g_body)])
    assert dicts[0]["spec"]["env"][1]["value"] == "0"
    k_med, k_min, kjobs = timed(lambda: api.deserialize(k_body, "V1JobList", "application/json"))
    assert len(kjobs.items) == N and kjobs.items[N - 1].status.succeeded == 2

    print(f"objects: {N}, rounds: {ROUNDS} (median, best)")
    print(f"JSON body: gryvia {len(g_body) / N:.0f} B/object, kubernetes {len(k_body) / N:.0f} B/object")
    print(f"gryvia.decode_list                  : {g_med * 1e3:8.1f} ms  {g_min * 1e3:8.1f} ms")
    print(f"gryvia.decode_list + to_dict()      : {gd_med * 1e3:8.1f} ms  {gd_min * 1e3:8.1f} ms")
    print(f"kubernetes deserialize(V1JobList)   : {k_med * 1e3:8.1f} ms  {k_min * 1e3:8.1f} ms")
    print(f"ratio kubernetes / gryvia           : {k_med / g_med:8.1f}x")
    print(f"ratio kubernetes / gryvia + to_dict : {k_med / gd_med:8.1f}x")


if __name__ == "__main__":
    main()
