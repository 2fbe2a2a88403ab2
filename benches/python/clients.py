"""Python Kubernetes clients end to end against a real API server: gryvia against the official
``kubernetes`` client (typed models and plain dicts), lightkube (typed and generic) and kr8s,
all in one run, with a raw HTTPS GET of the same list as the floor.

Per size (5,000 and 50,000 objects of each kind in one namespace, unless told otherwise):
- list: one list of every GryviaAIJob (a CRD) and of every batch Job (a built-in kind), each
  client's own list call as a user writes it, the list kept and the collections of the young
  generations that its containers cause taken in its time (``gc.collect(1)``: gryvia builds
  with the collector paused and collects the young generation every few items, the others
  pay the collector's own collections while they build, and anything left young is charged
  here), then, untimed, a full collection, so that none due after one client's run falls on
  the next one's time; median of ``--rounds`` rounds (each round runs
  the floor and then every client once, so the API server's changes of pace fall on all
  alike), with the median CPU seconds the benchmark's process spent in it (every thread; the
  API server's CPU is not counted: this is what the client itself costs, whatever the
  server's pace);
- list + to_dict, list + a field: the list and then ``to_dict()`` or one field of every item,
  as one run, for gryvia and lightkube (what going from the server to what the user uses costs,
  whichever client builds what when);
- to_dict and read: ``to_dict()`` of every item of a list the client made (the list untimed,
  with a full collection after it),
  for each client whose list items have one, then one field of every item of the same list
  read as the client's user writes it (``job.spec.gpus``, ``o["spec"]["gpus"]``; a Job's first
  container's image), median of ``--rounds`` rounds;
- get: the mean of 200 reads of one object by name (the same names for every client, in a new
  order each round), median of ``--rounds`` rounds, each round every client in turn;
- watch: events per second of a watch that starts with every object as ``ADDED``, until the
  last one arrived (median of ``--rounds`` watches, each round every client in turn).
gryvia's rows with ``dicts=False`` are a built-in kind's objects kept as the server's JSON
(``Resource``), like its Gryvia kinds' by default.
The floor is the raw GET of the same list URL with ``http.client`` and the kubeconfig's client
certificate (the bytes only, nothing decoded); ``json.loads`` of that body is shown too.

Objects are made once per size (those already there are kept, for the next run) with gryvia's
AsyncClient, 64 requests in flight. Jobs are ``suspend: true`` and the ai-operator does not
run, so nothing reacts to them.

Run: ``scripts/bench-python-clients`` (starts testenv when it is not up, installs the release
wheel and the pinned clients), or ``python3 benches/python/clients.py --sizes 5000``;
``--only watch`` (of ``list,after,get,watch``) runs some parts only.
"""

import argparse
import asyncio
import base64
import gc
import http.client
import json
import os
import random
import resource
import ssl
import statistics
import tempfile
import time

import yaml

import gryvia

GROUP, VERSION = "gryvia.io", "v1alpha1"


def kubeconfig():
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    with open(path) as f:
        cfg = yaml.safe_load(f)
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    return cluster, user


class Raw:
    """HTTPS GETs with the kubeconfig's client certificate: the floor."""

    def __init__(self):
        cluster, user = kubeconfig()
        host = cluster["server"].removeprefix("https://")
        self.host, _, port = host.partition(":")
        self.port = int(port or 443)
        self.dir = tempfile.TemporaryDirectory()
        files = {}
        for key in ("client-certificate-data", "client-key-data"):
            files[key] = os.path.join(self.dir.name, key)
            with open(files[key], "wb") as f:
                f.write(base64.b64decode(user[key]))
        self.ctx = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        self.ctx.load_cert_chain(files["client-certificate-data"], files["client-key-data"])

    def get(self, path):
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx)
        conn.request("GET", path, headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        assert resp.status == 200, (resp.status, body[:200])
        return body


def aijob(name, i):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GryviaAIJob",
        "metadata": {
            "name": name,
            "labels": {"app": "train", "run": f"r{i % 7}", "gryvia.io/tenant": "bench"},
            "annotations": {"bench.gryvia.io/note": "end-to-end client benchmark object"},
        },
        "spec": {
            "image": "registry.local/train:1.0",
            "command": ["python", "train.py"],
            "args": ["--epochs", "10", "--lr", "0.001", f"--seed={i}"],
            "gpus": 8,
            "replicas": 2,
            "gpuType": "H100",
            "env": [{"name": "DATA", "value": f"/data/shard-{i % 64}"}, {"name": "NCCL_DEBUG", "value": "WARN"}],
        },
    }


def batch_job(name, i):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": "train", "run": f"r{i % 7}"}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "train",
                        "image": "registry.local/train:1.0",
                        "command": ["python", "train.py", f"--seed={i}"],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        "env": [{"name": "DATA", "value": f"/data/shard-{i % 64}"}],
                    }],
                },
            },
        },
    }


async def populate(ns, n):
    """Makes ``n`` GryviaAIJobs and ``n`` Jobs in ``ns`` (those that exist are kept)."""
    c = gryvia.AsyncClient()
    have = {
        kind: len(await c.list(kind, ns, api_version=av))
        for kind, av in (("GryviaAIJob", None), ("Job", "batch/v1"))
    }
    sem = asyncio.Semaphore(64)

    async def make(obj):
        async with sem:
            try:
                await c.create(obj)
            except gryvia.ConflictError:
                pass

    for kind, build in (("GryviaAIJob", aijob), ("Job", batch_job)):
        if have[kind] >= n:
            continue
        objs = []
        for i in range(n):
            obj = build(f"bench-{i:06d}", i)
            obj["metadata"]["namespace"] = ns
            objs.append(obj)
        started = time.perf_counter()
        await asyncio.gather(*(make(o) for o in objs))
        print(f"  made {n} {kind} in {time.perf_counter() - started:.1f} s", flush=True)


def cpu_seconds():
    """User and system CPU of this process, every thread (the Rust client's runtime too)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def interleaved(runs, rounds, measure):
    """What ``measure(name, fn, i)`` took for each run, round by round: every run once in each
    round ``i``, in order, so that the API server's slower and faster spells fall on all of them
    alike. ``runs`` are ``(name, fn, its rounds)``; a run with fewer rounds sits out the last."""
    got = {name: [] for name, _, _ in runs}
    for i in range(rounds):
        for name, fn, r in runs:
            if i < r:
                got[name].append(measure(name, fn, i))
    return got


def rounds_of(name, rounds, slow_rounds):
    """kr8s takes minutes a round at 50,000: it runs ``slow_rounds``."""
    return slow_rounds if name.startswith("kr8s") else rounds


class Clients:
    """One of each client under test, made once, with what each needs to name the kinds."""

    def __init__(self):
        from kubernetes import client as k8s, config as k8s_config, watch as k8s_watch
        import lightkube
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.batch_v1 import Job as LkJob
        import kr8s
        from kr8s.objects import Job as KrJob, new_class

        k8s_config.load_kube_config()
        self.custom, self.batch = k8s.CustomObjectsApi(), k8s.BatchV1Api()
        self.k8s_watch = k8s_watch
        self.lk = lightkube.Client()
        self.LkAIJob = create_namespaced_resource(GROUP, VERSION, "GryviaAIJob", "gryviaaijobs")
        self.LkJob = LkJob
        self.g = gryvia.Client()
        self.kr8s = kr8s
        self.kr = kr8s.api()
        self.KrAIJob = new_class(kind="GryviaAIJob", version=f"{GROUP}/{VERSION}", namespaced=True)
        self.KrJob = KrJob


def list_clients(c, ns):
    """Each client's list of each kind, as a user writes it; each returns what it listed (kept by
    the caller until its time and the young generations' collection are taken)."""
    custom, batch, lk, LkAIJob, LkJob, g, kr8s, kr = (
        c.custom, c.batch, c.lk, c.LkAIJob, c.LkJob, c.g, c.kr8s, c.kr)
    return {
        "GryviaAIJob": [
            ("gryvia Client.list (typed GryviaAIJob)", lambda: g.list("GryviaAIJob", ns)),
            ("gryvia Client.list + to_dict() of every item", lambda: [j.to_dict() for j in g.list("GryviaAIJob", ns)]),
            ("gryvia Client.list + spec.gpus of every item", lambda: [j.spec.gpus for j in g.list("GryviaAIJob", ns)]),
            ("gryvia Client.list(dicts=True)", lambda: g.list("GryviaAIJob", ns, dicts=True)),
            ("kubernetes CustomObjectsApi (dicts)", lambda: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "gryviaaijobs")["items"]),
            ("lightkube generic resource", lambda: list(lk.list(LkAIJob, namespace=ns))),
            # A list and then every item's to_dict() or a field, as one run: the cost of going
            # from the server to what the user uses, whichever client builds what when.
            ("lightkube generic resource + to_dict() of every item", lambda: [j.to_dict() for j in lk.list(LkAIJob, namespace=ns)]),
            ("lightkube generic resource + spec.gpus of every item", lambda: [j.spec["gpus"] for j in lk.list(LkAIJob, namespace=ns)]),
            ("kr8s", lambda: list(kr8s.get("gryviaaijobs.gryvia.io", namespace=ns, api=kr))),
        ],
        "Job": [
            ("gryvia Client.list (dicts)", lambda: g.list("Job", ns, api_version="batch/v1")),
            ("gryvia Client.list(dicts=False) (objects)", lambda: g.list("Job", ns, api_version="batch/v1", dicts=False)),
            ("gryvia Client.list(dicts=False) + first image of every item", lambda: [
                j.spec.template.spec.containers[0].image for j in g.list("Job", ns, api_version="batch/v1", dicts=False)]),
            ("gryvia Client.list(dicts=False) + to_dict() of every item", lambda: [
                j.to_dict() for j in g.list("Job", ns, api_version="batch/v1", dicts=False)]),
            ("kubernetes BatchV1Api (typed V1Job)", lambda: batch.list_namespaced_job(ns).items),
            ("kubernetes BatchV1Api (dicts, _preload_content=False + json.loads)", lambda: json.loads(batch.list_namespaced_job(ns, _preload_content=False).data)["items"]),
            ("lightkube typed Job", lambda: list(lk.list(LkJob, namespace=ns))),
            ("lightkube typed Job + first image of every item", lambda: [
                j.spec.template.spec.containers[0].image for j in lk.list(LkJob, namespace=ns)]),
            ("lightkube typed Job + to_dict() of every item", lambda: [j.to_dict() for j in lk.list(LkJob, namespace=ns)]),
            ("kr8s", lambda: list(kr8s.get("jobs", namespace=ns, api=kr))),
        ],
    }


def after_list_clients(c, ns):
    """What each client does with the items of a list it made (the list itself untimed):
    (name, list, to_dict, read). ``to_dict`` converts every item (None for a client whose items
    are plain data already); ``read`` reads one field of every item as that client's user
    writes it (``spec.gpus``, and a Job's first container's image). Each returns the number of
    items it went through."""
    custom, batch, lk, LkAIJob, LkJob, g, kr8s, kr = (
        c.custom, c.batch, c.lk, c.LkAIJob, c.LkJob, c.g, c.kr8s, c.kr)

    def each(items):
        return len([o.to_dict() for o in items])

    def count(values):
        # Every value is read; the count checks that none was skipped.
        return sum(1 for v in values if v is not None)

    return {
        "GryviaAIJob": [
            ("gryvia GryviaAIJob (typed)", lambda: g.list("GryviaAIJob", ns), each,
             lambda items: count(o.spec.gpus for o in items)),
            ("kubernetes CustomObjectsApi (dicts)", lambda: custom.list_namespaced_custom_object(GROUP, VERSION, ns, "gryviaaijobs")["items"], None,
             lambda items: count(o["spec"]["gpus"] for o in items)),
            ("lightkube generic resource", lambda: list(lk.list(LkAIJob, namespace=ns)), each,
             lambda items: count(o.spec["gpus"] for o in items)),
            ("kr8s", lambda: list(kr8s.get("gryviaaijobs.gryvia.io", namespace=ns, api=kr)), each,
             lambda items: count(o.spec["gpus"] for o in items)),
        ],
        "Job": [
            ("gryvia (dicts)", lambda: g.list("Job", ns, api_version="batch/v1"), None,
             lambda items: count(o["spec"]["template"]["spec"]["containers"][0]["image"] for o in items)),
            ("gryvia (dicts=False)", lambda: g.list("Job", ns, api_version="batch/v1", dicts=False), each,
             lambda items: count(o.spec.template.spec.containers[0].image for o in items)),
            ("kubernetes V1Job (typed)", lambda: batch.list_namespaced_job(ns).items, each,
             lambda items: count(o.spec.template.spec.containers[0].image for o in items)),
            ("lightkube typed Job", lambda: list(lk.list(LkJob, namespace=ns)), each,
             lambda items: count(o.spec.template.spec.containers[0].image for o in items)),
            ("kr8s", lambda: list(kr8s.get("jobs", namespace=ns, api=kr)), each,
             lambda items: count(o.spec["template"]["spec"]["containers"][0]["image"] for o in items)),
        ],
    }


def get_clients(c, ns):
    custom, batch, lk, LkAIJob, LkJob, g, kr = c.custom, c.batch, c.lk, c.LkAIJob, c.LkJob, c.g, c.kr
    KrAIJob, KrJob = c.KrAIJob, c.KrJob
    return {
        "GryviaAIJob": [
            ("gryvia Client.get (typed)", lambda n: g.get("GryviaAIJob", n, ns)),
            ("kubernetes CustomObjectsApi (dict)", lambda n: custom.get_namespaced_custom_object(GROUP, VERSION, ns, "gryviaaijobs", n)),
            ("lightkube generic resource", lambda n: lk.get(LkAIJob, n, namespace=ns)),
            ("kr8s", lambda n: KrAIJob.get(n, namespace=ns, api=kr)),
        ],
        "Job": [
            ("gryvia Client.get (dict)", lambda n: g.get("Job", n, ns, api_version="batch/v1")),
            ("gryvia Client.get(dicts=False)", lambda n: g.get("Job", n, ns, api_version="batch/v1", dicts=False)),
            ("kubernetes BatchV1Api (typed V1Job)", lambda n: batch.read_namespaced_job(n, ns)),
            ("lightkube typed Job", lambda n: lk.get(LkJob, n, namespace=ns)),
            ("kr8s", lambda n: KrJob.get(n, namespace=ns, api=kr)),
        ],
    }


def watch_clients(c, ns, n):
    """Each client's watch of a kind from the start: seconds until ``n`` ADDED events came."""
    custom, batch, lk, LkAIJob, LkJob, g, kr8s, kr = (
        c.custom, c.batch, c.lk, c.LkAIJob, c.LkJob, c.g, c.kr8s, c.kr)
    k8s_watch = c.k8s_watch

    def count(events, kind_of=lambda e: e):
        seen = 0
        for e in events:
            if kind_of(e) == "ADDED":
                seen += 1
                if seen == n:
                    return seen
        return seen

    def official(func, *args):
        w = k8s_watch.Watch()
        try:
            return count(w.stream(func, *args, timeout_seconds=600), lambda e: e["type"])
        finally:
            w.stop()

    return {
        "GryviaAIJob": [
            ("gryvia Client.watch (typed)", lambda: count(g.watch("GryviaAIJob", ns, timeout=600), lambda e: e.type)),
            ("kubernetes Watch + CustomObjectsApi (dicts)", lambda: official(custom.list_namespaced_custom_object, GROUP, VERSION, ns, "gryviaaijobs")),
            ("lightkube generic resource", lambda: count(lk.watch(LkAIJob, namespace=ns), lambda e: e[0])),
            ("kr8s", lambda: count(kr8s.watch("gryviaaijobs.gryvia.io", namespace=ns, api=kr), lambda e: e[0])),
        ],
        "Job": [
            ("gryvia Client.watch (dicts)", lambda: count(g.watch("Job", ns, api_version="batch/v1", timeout=600), lambda e: e.type)),
            ("gryvia Client.watch(dicts=False)", lambda: count(g.watch("Job", ns, api_version="batch/v1", timeout=600, dicts=False), lambda e: e.type)),
            ("kubernetes Watch + BatchV1Api (typed V1Job)", lambda: official(batch.list_namespaced_job, ns)),
            ("lightkube typed Job", lambda: count(lk.watch(LkJob, namespace=ns), lambda e: e[0])),
            ("kr8s", lambda: count(kr8s.watch("jobs", namespace=ns, api=kr), lambda e: e[0])),
        ],
    }


PARTS = ("list", "after", "get", "watch")


def bench(n, rounds, slow_rounds, parts=PARTS):
    ns = f"bench-clients-{n}"
    g = gryvia.Client()
    try:
        g.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    except gryvia.ConflictError:
        pass
    asyncio.run(populate(ns, n))
    raw = Raw()
    paths = {
        "GryviaAIJob": f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/gryviaaijobs",
        "Job": f"/apis/batch/v1/namespaces/{ns}/jobs",
    }
    rows = []
    c = Clients()
    for kind, clients in (list_clients(c, ns) if "list" in parts else {}).items():
        # The floor first in each round, then every client once (`interleaved`); each row
        # is the median over its rounds.
        floor_name, loads_name = "raw HTTPS GET (the floor)", "raw GET + json.loads"
        runs = [
            (floor_name, lambda: raw.get(paths[kind]), rounds),
            (loads_name, lambda: json.loads(raw.get(paths[kind]))["items"], rounds),
        ] + [(name, fn, rounds_of(name, rounds, slow_rounds)) for name, fn in clients]

        def listed(name, fn, _):
            used = cpu_seconds()
            started = time.perf_counter()
            result = fn()
            # A user keeps what was listed: the collections its containers cause are the
            # list's cost, wherever they fall. A client that builds with the collector
            # paused (gryvia) leaves them to the next allocation after it; the others pay
            # them while they build. Collecting the young generations here charges each
            # client its own (for those that paid already, a few thousand young objects).
            gc.collect(1)
            wall, cpu = time.perf_counter() - started, cpu_seconds() - used
            # The count only: no list is kept alive for the rows after it (50,000 objects'
            # dicts would be walked by each of their full collections), and freeing it is
            # left out of every client's time alike.
            count = len(result)
            del result
            # Untimed: a full collection, so that none that a client's objects left due (the
            # collector's full collections come once the objects moved to its oldest
            # generation grow by a quarter) falls on the next client's time.
            gc.collect()
            assert name == floor_name or count == n, (name, count)
            return wall, cpu, count

        got = interleaved(runs, rounds, listed)
        walls = {name: [w for w, _, _ in m] for name, m in got.items()}
        cpus = {name: [c for _, c, _ in m] for name, m in got.items()}
        size = got[floor_name][-1][2]
        floor = statistics.median(walls[floor_name])
        for name, _, r in runs:
            t, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
            if name == floor_name:
                note = f"{size / 1e6:.1f} MB, CPU {cpu:.3f} s"
            elif name == loads_name:
                note = f"CPU {cpu:.3f} s"
            else:
                note = f"{t / floor:.2f}x floor, CPU {cpu:.3f} s" + ("" if r == rounds else f", {r} round(s)")
            rows.append((f"list {kind}", name, t, note))
    for kind, clients in (after_list_clients(c, ns) if "after" in parts else {}).items():
        after = {"to_dict": [], "read": []}
        for name, make, convert, read in clients:
            r = rounds_of(name, rounds, slow_rounds)
            took = {"to_dict": [], "read": []}
            for _ in range(r):
                items = make()
                # The list's own collections, before the clock starts: a full one, so that none
                # due after it (see the list's rows) falls in the time of what follows.
                gc.collect()
                # to_dict() first: it leaves a gryvia item unread, so the read after it is an
                # item's first read, as after a list.
                for op, fn in (("to_dict", convert), ("read", read)):
                    if fn is None:
                        continue
                    started = time.perf_counter()
                    done = fn(items)
                    gc.collect(1)  # the collections what it built causes, as for a list
                    took[op].append(time.perf_counter() - started)
                    assert done == n, (name, op, done)
                del items
                gc.collect()  # untimed, as after a list
            rounds_note = "" if r == rounds else f", {r} round(s)"
            for op, times in took.items():
                if times:
                    t = statistics.median(times)
                    after[op].append((f"{op} {kind}", name, t, f"{t / n * 1e6:.2f} us per item{rounds_note}"))
        rows += after["to_dict"] + after["read"]
    names = [f"bench-{i:06d}" for i in random.Random(7).sample(range(n), 200)]
    for kind, clients in (get_clients(c, ns) if "get" in parts else {}).items():
        plural = paths[kind]
        for _, fn in clients:
            for x in names[:5]:
                fn(x)  # connections up, discovery done
        # Round by round, like the lists: the floor, then each client's 200 gets, each round
        # in a new order of the names; each row the median of its rounds' means.
        floor_name = "raw HTTPS GET, a new connection each (the floor)"
        runs = [(floor_name, lambda x: raw.get(f"{plural}/{x}"), rounds)]
        runs += [(name, fn, rounds) for name, fn in clients]

        def got(_, fn, i):
            order = random.Random(i).sample(names, len(names))
            started = time.perf_counter()
            for x in order:
                fn(x)
            return (time.perf_counter() - started) / len(order)

        for name, took in interleaved(runs, rounds, got).items():
            note = "" if name == floor_name else f"median of {rounds} rounds' means of 200"
            rows.append((f"get {kind}", name, statistics.median(took), note))
    for kind, clients in (watch_clients(c, ns, n) if "watch" in parts else {}).items():
        # Round by round too: a watch's start is a list, and the API server's pace drifts.
        runs = [(name, fn, rounds_of(name, rounds, slow_rounds))
                for name, fn in clients if not (name.startswith("kr8s") and n > 5000)]

        def watched(name, fn, _):
            started = time.perf_counter()
            seen = fn()
            took = time.perf_counter() - started
            assert seen == n, (name, seen)
            gc.collect()  # untimed, as after a list
            return took

        for name, took in interleaved(runs, rounds, watched).items():
            t = statistics.median(took)
            r = rounds_of(name, rounds, slow_rounds)
            rounds_note = "" if r == rounds else f", {r} round(s)"
            rows.append((f"watch {kind}", name, t, f"{n / t:,.0f} events/s{rounds_note}"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,50000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--slow-rounds", type=int, default=1, help="rounds for kr8s (minutes per round at 50,000)")
    ap.add_argument("--only", default=",".join(PARTS),
                    help="the parts to run, of " + ",".join(PARTS) + " (after: to_dict and read after a list)")
    args = ap.parse_args()
    parts = args.only.split(",")
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        ap.error(f"--only: {','.join(unknown)} is not one of {','.join(PARTS)}")
    for n in (int(s) for s in args.sizes.split(",")):
        print(f"\n## {n:,} objects per kind (median of {args.rounds} rounds)\n", flush=True)
        print("| what | client | seconds | |")
        print("| --- | --- | ---: | --- |")
        for what, name, t, note in bench(n, args.rounds, args.slow_rounds, parts):
            print(f"| {what} | {name} | {t:.4f} | {note} |", flush=True)


if __name__ == "__main__":
    main()
