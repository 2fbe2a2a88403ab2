"""Every read path of gryvia.Client returns the same objects as the official ``kubernetes``
client against a real control plane (testenv/up): list, get and watch, of a Gryvia kind (typed,
each object's fields read from the server's JSON, the whole object parsed only for equality, YAML
or JSON) and of a built-in kind (dicts, the list built straight from the body; or with
``dicts=False`` objects kept as the server's JSON like Gryvia objects), and ``to_dict()`` of
objects read or not yet read."""

import asyncio
import json

import pytest

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


def _official_jobs(batch, namespace):
    """The official client's Jobs by name, as the server's body has them (with the apiVersion
    and kind that a list's items leave out)."""
    items = json.loads(batch.list_namespaced_job(namespace, _preload_content=False).data)["items"]
    return _by_name({"apiVersion": "batch/v1", "kind": "Job", **j} for j in items)


def test_list_get_and_watch_return_what_the_official_client_returns(client, kubeconfig, namespace):
    for i in range(12):
        client.create(_aijob(f"a-{i:02d}", namespace, i))
        client.create(_job(f"j-{i:02d}", namespace, i))
    custom, batch = _official(kubeconfig)

    official_ai = custom.list_namespaced_custom_object("gryvia.io", "v1alpha1", namespace, "gryviaaijobs")["items"]
    listed = client.list("GryviaAIJob", namespace)
    assert all(type(j) is gryvia.GryviaAIJob for j in listed)
    # Half read through attributes first, half never read (to_dict from the JSON either way).
    assert [j.spec.replicas for j in listed[::2]] == [1 + int(j.metadata.labels["i"]) % 3 for j in listed[::2]]
    assert _by_name(j.to_dict() for j in listed) == _by_name(official_ai)
    assert listed == [client.get("GryviaAIJob", j.name, namespace) for j in listed]
    # dicts=True: the same objects as plain dicts, as the official client gives them.
    as_dicts = client.list("GryviaAIJob", namespace, dicts=True)
    assert all(type(j) is dict for j in as_dicts)
    assert _by_name(as_dicts) == _by_name(official_ai)
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

    async def listed_dicts_async():
        return await gryvia.AsyncClient(kubeconfig=kubeconfig).list("GryviaAIJob", namespace, dicts=True)

    assert _by_name(asyncio.run(listed_dicts_async())) == _by_name(official_ai)


def test_built_in_kinds_as_objects_read_what_the_official_client_reads(client, kubeconfig, namespace):
    # dicts=False: a built-in kind's objects kept as the server's JSON, like Gryvia objects.
    for i in range(8):
        client.create(_job(f"j-{i:02d}", namespace, i))
    _, batch = _official(kubeconfig)
    official = _official_jobs(batch, namespace)

    listed = client.list("Job", namespace, api_version="batch/v1", dicts=False)
    assert [type(j) for j in listed] == [gryvia.Resource] * 8
    for j in listed[::2]:
        want = official[j.name]
        # Read before to_dict(): attributes, items, what a list's items leave out.
        assert j.kind == "Job" and j.apiVersion == "batch/v1" and j["apiVersion"] == "batch/v1"
        assert j["kind"] == "Job" and "kind" in j and "spec" in j and "nope" not in j
        assert j.namespace == namespace
        assert j.metadata.labels["i"] == want["metadata"]["labels"]["i"]
        assert j.spec.template.spec.containers[0].args == want["spec"]["template"]["spec"]["containers"][0]["args"]
        assert j["spec"]["suspend"] is True and j.spec.suspend is True
        assert j.spec.backoff_limit == want["spec"]["backoffLimit"]
        with pytest.raises(KeyError):
            j["nope"]
        with pytest.raises(AttributeError, match="spec.activeDeadlineSeconds is not set"):
            j.spec.active_deadline_seconds
    # Every item's to_dict(), read or not, in order: the official client's dicts.
    assert {j.name: j.to_dict() for j in listed} == official
    assert {j.name: json.loads(j.to_json()) for j in listed} == official

    got = client.get("Job", "j-03", namespace, api_version="batch/v1", dicts=False)
    assert type(got) is gryvia.Resource and got.to_dict() == official["j-03"]
    assert got == listed[3] and got.spec.template.spec.containers[0].args[0] == "3"

    watched = {}
    for e in client.watch("Job", namespace, api_version="batch/v1", timeout=30, dicts=False):
        assert type(e.object) is gryvia.Resource
        watched[e.object.name] = e.object
        if len(watched) == 8:
            break
    assert watched["j-05"].spec.template.spec.containers[0].args[0] == "5"
    assert {n: o.to_dict()["spec"] for n, o in watched.items()} == {n: o["spec"] for n, o in official.items()}

    async def listed_async():
        return await gryvia.AsyncClient(kubeconfig=kubeconfig).list("Job", namespace, api_version="batch/v1", dicts=False)

    assert {j.name: j.to_dict() for j in asyncio.run(listed_async())} == _official_jobs(batch, namespace)

    # The other way round: a Gryvia kind's get as a dict, and dicts=False as the default.
    client.create(_aijob("a-00", namespace, 0))
    custom, _ = _official(kubeconfig)
    assert client.get("GryviaAIJob", "a-00", namespace, dicts=True) == custom.get_namespaced_custom_object(
        "gryvia.io", "v1alpha1", namespace, "gryviaaijobs", "a-00")
    assert [type(j) for j in client.list("GryviaAIJob", namespace, dicts=False)] == [gryvia.GryviaAIJob]


def test_an_empty_list_and_a_label_selector(client, namespace):
    assert client.list("GryviaAIJob", namespace) == []
    assert client.list("Job", namespace, api_version="batch/v1") == []
    client.create(_aijob("one", namespace, 1))
    client.create(_aijob("two", namespace, 2))
    assert [j.name for j in client.list("GryviaAIJob", namespace, label_selector="i=2")] == ["two"]


def test_strings_with_escapes_controls_and_any_characters_read_as_json_reads_them(client, kubeconfig, namespace):
    # The key cache hashes keys eight bytes at a time; the list splitter and the parser skip
    # through strings to their next quote or backslash: put each special character (and
    # multi-byte ones) at every offset of a word, in keys and in values.
    specials = ['"', "\\", "\n", "\t", "\x01", "\x1f", "/", "é", "€", "😀", "\u2028", "ÿ"]
    data = {}
    for pad in range(17):
        for k, c in enumerate(specials):
            data[f"k{pad:02d}-{k:02d}"] = "x" * pad + c + "y" * (16 - pad) + c + "z"
    labels = {f"{'k' * pad}.example.com/v": str(pad) for pad in range(1, 40)}
    data["empty"] = ""
    data["long"] = "a" * 1000 + '"' + "b" * 7 + "\\" + "c" * 9
    data["ascii"] = "".join(chr(c) for c in range(0x20, 0x7F))
    client.create({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "strings", "namespace": namespace, "labels": labels},
                   "data": data})
    from kubernetes import client as k8s, config as k8s_config

    core = k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=kubeconfig))
    raw = json.loads(core.list_namespaced_config_map(namespace, _preload_content=False).data)["items"]
    listed = _by_name(client.list("ConfigMap", namespace, api_version="v1"))
    assert listed["strings"]["data"] == data
    assert listed["strings"]["metadata"]["labels"] == labels
    assert listed["strings"] == {"apiVersion": "v1", "kind": "ConfigMap", **_by_name(raw)["strings"]}


def test_to_dict_of_a_lists_items_in_order_out_of_order_and_twice(client, kubeconfig, namespace):
    # More items than to_dict() builds ahead at once (256), so a loop crosses batches.
    n = 300
    for i in range(n):
        client.create(_aijob(f"b-{i:03d}", namespace, i))
    custom, _ = _official(kubeconfig)
    official = _by_name(custom.list_namespaced_custom_object("gryvia.io", "v1alpha1", namespace, "gryviaaijobs")["items"])
    listed = client.list("GryviaAIJob", namespace)
    # In order, as a loop does it: every dict is the object the official client reads.
    in_order = [j.to_dict() for j in listed]
    assert _by_name(in_order) == official
    # A short value that repeats from object to object is one string, shared by the dicts. It
    # keeps its cache slot until another value of the same slot (of 4,096) comes: 300 items
    # bring about 2,000 other short values (names, uids, times), so the image's string may be
    # made anew a few times in a list, never once per item.
    assert len({id(d["spec"]["image"]) for d in in_order}) < 10
    # Each call gives a dict of its own: changing one changes no other, nor the object.
    again = listed[5].to_dict()
    assert again == in_order[5] and again is not in_order[5]
    in_order[6]["spec"]["image"] = "changed"
    assert listed[6].to_dict()["spec"]["image"] == "registry.local/train:1"
    assert listed[6].spec.image == "registry.local/train:1"
    # Out of order, and items read through attributes first, in a second list.
    second = client.list("GryviaAIJob", namespace)
    assert [j.spec.replicas for j in second[::7]] == [official[j.name]["spec"]["replicas"] for j in second[::7]]
    order = list(range(n - 1, -1, -3)) + list(range(0, n, 2)) + [299, 0, 1, 2]
    assert all(second[i].to_dict() == official[second[i].name] for i in order)


def test_fields_of_objects_never_parsed_read_what_the_official_client_reads(client, kubeconfig, namespace):
    # Fields of a listed, got or watched object are read from the server's JSON, going through
    # the keys of each object on the way only: keys and values with escapes (the API server
    # writes <, > and & as \u003c ...), numbers of each kind, lists of objects and of strings,
    # a missing field, and plain data of a nested object, all as the official client reads them.
    keys = ['a"b', "back\\slash", "<tag>&", "é€😀", "tab\tnl\n", "plain"]
    for i in range(4):
        obj = _aijob(f"f-{i}", namespace, i)
        obj["metadata"]["annotations"] = {"note": f"line\nbreak \u2028 <b>&amp; {i}"}
        obj["spec"].update({"nodeSelector": {k: f"{k}={i}" for k in keys}, "gpuFraction": 0.25,
                            "cpu": "2", "memory": 2**40, "args": ["--x", "<&>", '"q"', f"{i}"]})
        client.create(obj)
    custom, _ = _official(kubeconfig)
    official = _by_name(custom.list_namespaced_custom_object("gryvia.io", "v1alpha1", namespace, "gryviaaijobs")["items"])
    watched = []
    for e in client.watch("GryviaAIJob", namespace, timeout=30):
        watched.append(e.object)
        if len(watched) == 4:
            break
    sources = {
        "list": client.list("GryviaAIJob", namespace),
        "get": [client.get("GryviaAIJob", f"f-{i}", namespace) for i in range(4)],
        "watch": watched,
    }
    for source, objs in sources.items():
        for j in objs:
            want = official[j.name]
            assert (j.kind, j.api_version, j.apiVersion, j.namespace) == (
                "GryviaAIJob", "gryvia.io/v1alpha1", "gryvia.io/v1alpha1", namespace), source
            spec = j.spec
            assert (spec.gpus, spec.gpu_fraction, spec.cpu, spec.memory) == (1, 0.25, "2", 2**40), source
            assert spec.args == want["spec"]["args"] and spec.env[0].value == want["spec"]["env"][0]["value"]
            assert spec.env[0] == want["spec"]["env"][0] and spec.env[0].to_dict() == want["spec"]["env"][0]
            assert {k: spec.node_selector[k] for k in keys} == want["spec"]["nodeSelector"], source
            assert "plain" in spec.node_selector and "nope" not in spec.node_selector
            assert j.metadata.annotations["note"] == want["metadata"]["annotations"]["note"]
            assert j.metadata.labels.i == want["metadata"]["labels"]["i"]
            assert spec.to_dict() == want["spec"] and j.metadata.to_dict() == want["metadata"]
            with pytest.raises(AttributeError, match=r"spec\.env\[0\]\.valueFrom is not set"):
                _ = spec.env[0].value_from
            with pytest.raises(KeyError):
                _ = spec.node_selector["nope"]
        # Reading fields parsed nothing: each object is still whole, as the server sent it.
        assert [j.to_dict() for j in objs] == [official[j.name] for j in objs], source
        assert objs == [client.get("GryviaAIJob", j.name, namespace) for j in objs], source


def test_a_lists_dicts_are_collected_young_and_the_collector_is_left_as_it_was(client, namespace):
    """Dicts built for a list go through the young generation a few items at a time, while
    still in the CPU's cache, instead of all waiting for one collection after the list; the
    collector is running again after it, and a caller who switched it off finds it off, with
    nothing collected behind their back."""
    import gc

    for i in range(60):
        client.create(_job(f"g-{i:02d}", namespace, i))
    gc.collect()
    listed = client.list("Job", namespace, api_version="batch/v1")
    young_after_list = gc.get_count()[0]
    assert len(listed) == 60 and gc.isenabled()
    # 60 Jobs are some 3,000 containers (dicts and lists); a list collected only after it would
    # leave every one in the young generation. A few items' worth at most are left.
    assert young_after_list < 1500, young_after_list
    # Collected, not lost: every dict still reads as the server's.
    assert sorted(j["metadata"]["name"] for j in listed) == [f"g-{i:02d}" for i in range(60)]

    del listed
    gc.disable()
    try:
        gc.collect()
        before = gc.get_stats()
        listed = client.list("Job", namespace, api_version="batch/v1")
        assert len(listed) == 60 and not gc.isenabled()
        assert [g["collections"] for g in gc.get_stats()] == [g["collections"] for g in before]
        assert gc.get_count()[0] > 1500
    finally:
        gc.enable()
