"""What the typed classes promise an editor and a type checker (checked by mypy --strict in
test_typed_classes.py; never run)."""

from typing import Any, List, assert_type

import gryvia
from gryvia.objects import GryviaAIJobSpec, GryviaAIJobStatusConditions, ObjectMap


def blocking(c: gryvia.Client) -> None:
    job = c.get("GryviaAIJob", "train", namespace="ml")
    assert_type(job, gryvia.GryviaAIJob)
    assert_type(job.spec, GryviaAIJobSpec)
    assert_type(job.spec.replicas, int)
    assert_type(job.spec.retry_limit, int)
    assert_type(job.spec.gpu_type, str)
    assert_type(job.spec.node_selector, ObjectMap[str])
    assert_type(job.spec.node_selector["zone"], str)
    assert_type(job.status.conditions, List[GryviaAIJobStatusConditions])
    assert_type(job.status.conditions[0].reason, str)
    assert_type(job.metadata.name, str)
    assert_type(job.metadata.labels["team"], str)
    assert_type(c.list("GryviaTenant"), List[gryvia.GryviaTenant])
    assert_type(c.list("GryviaTenant")[0].spec.display_name, str)
    assert_type(c.list("GryviaTenant", dicts=False), List[gryvia.GryviaTenant])
    assert_type(c.list("GryviaTenant", dicts=True), List[Any])
    assert_type(c.submit({"spec": {}}), gryvia.GryviaAIJob)
    assert_type(c.get("GryviaTenant", "t", dicts=False), gryvia.GryviaTenant)
    assert_type(c.get("GryviaTenant", "t", dicts=True), Any)
    # Other kinds and groups: untyped, as before; as dicts or as objects.
    c.get("Job", "x", api_version="batch/v1")["spec"]
    c.get("Job", "x", api_version="batch/v1", dicts=False).spec.parallelism
    c.list("Job", api_version="batch/v1", dicts=False)[0]["spec"]
    for e in c.watch("Job", api_version="batch/v1", timeout=1.0, dicts=False):
        e.object.spec


async def asynchronous(c: gryvia.AsyncClient) -> None:
    reservation = await c.get("GryviaReservation", "r")
    assert_type(reservation, gryvia.GryviaReservation)
    quotas = await c.list("GryviaQuota")
    assert_type(quotas, List[gryvia.GryviaQuota])


def built() -> None:
    job = gryvia.GryviaAIJob({"metadata": {"name": "t"}, "spec": {"image": "i"}})
    assert_type(job.spec.image, str)
    assert isinstance(job, gryvia.Resource)
