"""gryvia.Client and gryvia.AsyncClient against a real control plane (testenv/up): get, list,
create, apply, delete and watch, errors by status, and a job submitted and awaited while the
real ai-operator runs it on KWOK GPU nodes."""

import asyncio
import threading

import pytest

import gryvia


def job(name, namespace, **spec):
    body = {"image": "registry.local/train:1", "gpus": 1, "command": ["python", "train.py"]}
    body.update(spec)
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}


def test_create_get_list_apply_delete(client, namespace):
    created = client.create(job("crud", namespace))
    assert isinstance(created, gryvia.Resource)
    assert created.metadata.uid
    assert created.spec.retry_limit == 3  # the CRD's default, read back typed

    got = client.get("GryviaAIJob", "crud", namespace)
    assert got.name == "crud" and got.namespace == namespace
    with pytest.raises(gryvia.ConflictError) as e:
        client.create(job("crud", namespace))
    assert str(e.value) == (f"create GryviaAIJob crud: gryviaaijobs.gryvia.io \"crud\" already exists "
                            "(AlreadyExists 409)")

    assert [j.name for j in client.list("GryviaAIJob", namespace)] == ["crud"]
    everywhere = client.list("GryviaAIJob")
    assert ("crud", namespace) in [(j.name, j.namespace) for j in everywhere]

    body = job("crud", namespace)
    body["metadata"]["labels"] = {"team": "ml"}
    applied = client.apply(body)
    assert applied.metadata.labels["team"] == "ml"
    assert [j.name for j in client.list("GryviaAIJob", namespace, label_selector="team=ml")] == ["crud"]
    assert client.list("GryviaAIJob", namespace, label_selector="team=cv") == []

    assert client.delete("GryviaAIJob", "crud", namespace) is True
    with pytest.raises(gryvia.NotFoundError):
        client.get("GryviaAIJob", "crud", namespace)
    assert client.delete("GryviaAIJob", "crud", namespace) is False


def test_cluster_scoped_and_built_in_kinds(client, namespace):
    name = f"{namespace}-prio"
    prio = {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority", "metadata": {"name": name},
            "spec": {"value": 1000, "description": "e2e"}}
    try:
        assert client.create(prio).name == name
        assert client.get("GryviaPriority", name).spec.value == 1000
    finally:
        client.delete("GryviaPriority", name)
    ns = client.get("Namespace", namespace, api_version="v1")
    assert isinstance(ns, dict) and ns["metadata"]["labels"]["gryvia.io/e2e"] == "true"
    with pytest.raises(gryvia.ValidationError, match="api_version: required"):
        client.get("Namespace", namespace)


def test_invalid_objects_are_refused_before_sending(client, namespace):
    with pytest.raises(gryvia.ValidationError, match=r"spec\.gpus"):
        client.create(job("bad", namespace, gpus=-1))
    with pytest.raises(gryvia.ValidationError, match="submit takes a GryviaAIJob"):
        client.submit({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaPriority",
                       "metadata": {"name": "x"}, "spec": {"value": 1}})
    assert client.list("GryviaAIJob", namespace) == []


def test_errors_of_the_server_and_of_the_configuration(client, kubeconfig, namespace):
    with pytest.raises(gryvia.NotFoundError) as e:
        client.get("GryviaAIJob", "nope", namespace)
    assert isinstance(e.value, gryvia.ApiError) and isinstance(e.value, gryvia.GryviaError)
    with pytest.raises(gryvia.GryviaError, match="context"):
        gryvia.Client(kubeconfig=kubeconfig, context="no-such-context")


def test_watch_reports_added_modified_deleted(client, namespace):
    client.create(job("w", namespace))
    seen = []
    for event in client.watch("GryviaAIJob", namespace, timeout=60):
        seen.append((event.type, event.object.name))
        if event.type == "ADDED":
            body = job("w", namespace)
            body["metadata"]["labels"] = {"step": "2"}
            client.apply(body)
        elif event.type == "MODIFIED":
            assert event.object.metadata.labels["step"] == "2"
            client.delete("GryviaAIJob", "w", namespace)
        elif event.type == "DELETED":
            break
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_a_watch_with_a_timeout_ends(client, namespace):
    assert list(client.watch("GryviaAIJob", namespace, timeout=1)) == []


def test_the_async_client(kubeconfig, namespace):
    async def main():
        c = gryvia.AsyncClient(kubeconfig=kubeconfig)
        created = await asyncio.gather(*(c.create(job(f"a{i}", namespace)) for i in range(5)))
        assert sorted(j.name for j in created) == [f"a{i}" for i in range(5)]
        got = await c.get("GryviaAIJob", "a3", namespace)
        assert got.spec.gpus == 1
        assert len(await c.list("GryviaAIJob", namespace)) == 5
        with pytest.raises(gryvia.NotFoundError):
            await c.get("GryviaAIJob", "nope", namespace)
        added = []
        async for event in c.watch("GryviaAIJob", namespace, timeout=30):
            added.append(event.object.name)
            if len(added) == 5:
                break
        assert sorted(added) == [f"a{i}" for i in range(5)]
        assert all(await asyncio.gather(*(c.delete("GryviaAIJob", f"a{i}", namespace) for i in range(5))))
        assert await c.list("GryviaAIJob", namespace) == []

    asyncio.run(main())


def test_submit_and_wait_for_a_job_the_operator_runs(client, kubeconfig, namespace, ai_operator):
    done = client.submit(job("train", namespace, replicas=2, gpus=2), wait=True, timeout=120)
    assert done.status.phase == "Succeeded"
    assert done.status.succeeded == 2

    async def main(c):
        return await c.submit(job("train-async", namespace), wait=True, timeout=120)

    done = asyncio.run(main(gryvia.AsyncClient(kubeconfig=kubeconfig)))
    assert done.status.phase == "Succeeded"


def test_a_blocking_wait_leaves_other_threads_running(client, namespace):
    """The sync client releases the GIL while it waits (no operator runs here: the job stays
    pending until the wait times out)."""
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            stop.wait(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        with pytest.raises(gryvia.GryviaError, match="timed out"):
            client.submit(job("slow", namespace), wait=True, timeout=1.5)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 20
