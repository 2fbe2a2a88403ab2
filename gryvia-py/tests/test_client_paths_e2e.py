"""Every read path of gryvia.Client returns the same objects as the official ``kubernetes``
client against a real control plane (testenv/up): list, get and watch, of a Gryvia kind (typed,
each list item parsed when first read) and of a built-in kind (dicts, the list built straight
from the body), and ``to_dict()`` of objects read or not yet read."""

import asyncio
import json

import gryvia


def _official(kubeconfig):
    from kubernetes import client as k8s, config as k8s_config

    api = k8s_config.new_client_from_config(config_file=kubeconfig)
    return k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)


def _aijob(name, namespace, i):
    return {"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaAIJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {"i": str(i)}},
            "spec": {"image": "registry.local/train:1", "gpus": 1, "replicas": 1 + i % 3,
                     "env": [{"name": "I", "value": str(i)}]}}


def _job(name, namespace, i):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {"i": str(i)}},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "registry.local/x:1", "args": [str(i), "ünï"]}]}}}}


def _by_name(objs):
    return {o["metadata"]["name"]: o for o in objs}


def test_list_get_and_watch_return_what_the_official_client_returns(client, kubeconfig, namespace):
    for i in range(12):
        client.create(_aijob(f"a-{i:02d}", namespace, i))
        client.create(_job(f"j-{i:02d}", namespace, i))
    custom, batch = _official(kubeconfig)

    official_ai = custom.list_namespaced_custom_object("gryvia.io", "v1alpha1", namespace, "gryviaaijobs")["items"]
    listed = client.list("GryviaAIJob", namespace)
    assert all(type(j) is gryvia.GryviaAIJob for j in listed)
    # Half read through attributes first (parsed), half never read (to_dict from the JSON).
    assert [j.spec.replicas for j in listed[::2]] == [1 + int(j.metadata.labels["i"]) % 3 for j in listed[::2]]
    assert _by_name(j.to_dict() for j in listed) == _by_name(official_ai)
    assert listed == [client.get("GryviaAIJob", j.name, namespace) for j in listed]
    got = client.get("GryviaAIJob", "a-03", namespace)
    assert got.to_dict() == custom.get_namespaced_custom_object("gryvia.io", "v1alpha1", namespace, "gryviaaijobs", "a-03")

    # The official client's dicts of a built-in kind: the body as the server sent it.
    official_jobs = json.loads(batch.list_namespaced_job(namespace, _preload_content=False).data)["items"]
    for j in official_jobs:
        j.setdefault("apiVersion", "batch/v1")
        j.setdefault("kind", "Job")
    dicts = client.list("Job", namespace, api_version="batch/v1")
    assert all(type(j) is dict for j in dicts)
    assert _by_name(dicts) == _by_name(official_jobs)
    assert dicts[0]["spec"]["template"]["spec"]["containers"][0]["args"][1] == "ünï"
    assert client.get("Job", "j-05", namespace, api_version="batch/v1") == _by_name(official_jobs)["j-05"]

    watched = {}
    for e in client.watch("GryviaAIJob", namespace, timeout=30):
        assert e.type == "ADDED"
        watched[e.object.name] = e.object.to_dict()
        if len(watched) == 12:
            break
    assert watched == _by_name(official_ai)

    async def listed_async():
        return await gryvia.AsyncClient(kubeconfig=kubeconfig).list("Job", namespace, api_version="batch/v1")

    assert _by_name(asyncio.run(listed_async())) == _by_name(official_jobs)


def test_an_empty_list_and_a_label_selector(client, namespace):
    assert client.list("GryviaAIJob", namespace) == []
    assert client.list("Job", namespace, api_version="batch/v1") == []
    client.create(_aijob("one", namespace, 1))
    client.create(_aijob("two", namespace, 2))
    assert [j.name for j in client.list("GryviaAIJob", namespace, label_selector="i=2")] == ["two"]
