#!/usr/bin/env python3
"""Simulated container logs per pod, for testenv's KWOK nodes.

KWOK runs no container; by default every container shows testenv/kwok/worker.log (a
ClusterLogs rule). A pod annotated `gryvia.io/testenv-log` shows the annotation's lines
instead: this process watches pods, writes each annotated pod's lines to a file in the CRI log
format and creates a KWOK `Logs` object (named after the pod) pointing at it, which KWOK's
kubelet API serves for `kubectl logs` and the API server's `pods/log`.

A line may start with `@SECONDS ` (for example `@4 gryvia-metric loss=0.5 step=2`): it is
written that many seconds after the pod was first seen Running, so a test can script a
learning curve; other lines are written when the pod is first seen Running. The file and the
Logs object go when the pod is deleted (and with its namespace).

Usage: podlogs.py --server URL --ca FILE --cert FILE --key FILE --dir DIR
"""

import argparse
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

ANNOTATION = "gryvia.io/testenv-log"


def log(msg):
    print(f"{datetime.now(timezone.utc).isoformat()} podlogs: {msg}", file=sys.stderr, flush=True)


def parse_lines(text):
    """(delay seconds, line) for every line of the annotation."""
    out = []
    for line in text.splitlines():
        delay = 0.0
        if line.startswith("@"):
            head, _, rest = line.partition(" ")
            try:
                delay = float(head[1:])
                line = rest
            except ValueError:
                pass
        out.append((delay, line))
    return out


class Api:
    def __init__(self, server, ca, cert, key):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)

    def request(self, method, path, body=None, timeout=30):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(req, context=self.ctx, timeout=timeout)


class Pods:
    """The annotated pods and their files."""

    def __init__(self, api, directory):
        self.api = api
        self.dir = directory
        self.lock = threading.Lock()
        self.pods = {}  # uid -> dict(ns, name, lines, started, written, path)

    def path(self, ns, name, uid):
        return os.path.join(self.dir, f"{ns}_{name}_{uid}.log")

    def seen(self, pod):
        meta = pod.get("metadata", {})
        text = (meta.get("annotations") or {}).get(ANNOTATION)
        uid = meta.get("uid")
        if text is None or not uid:
            return
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        running = (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
        with self.lock:
            p = self.pods.get(uid)
            if p is None:
                path = self.path(ns, name, uid)
                open(path, "w").close()
                p = dict(ns=ns, name=name, lines=parse_lines(text), started=None, written=0, path=path)
                self.pods[uid] = p
                self.create_logs(ns, name, path)
            if running and p["started"] is None:
                p["started"] = time.monotonic()
        self.flush()

    def create_logs(self, ns, name, path):
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"logs": [{"logsFile": path, "follow": False}]},
        }
        try:
            self.api.request("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{ns}/logs", body).close()
        except urllib.error.HTTPError as e:
            if e.code == 409:  # a namesake's left-over (a pod re-created with the same name)
                try:
                    self.api.request("DELETE", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{ns}/logs/{name}").close()
                    self.api.request("POST", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{ns}/logs", body).close()
                except urllib.error.HTTPError as e2:
                    log(f"logs object {ns}/{name}: {e2}")
            elif e.code != 404:  # 404: the namespace is going
                log(f"logs object {ns}/{name}: {e}")

    def gone(self, pod):
        meta = pod.get("metadata", {})
        with self.lock:
            p = self.pods.pop(meta.get("uid"), None)
        if p is None:
            return
        try:
            os.remove(p["path"])
        except OSError:
            pass
        try:
            self.api.request("DELETE", f"/apis/kwok.x-k8s.io/v1alpha1/namespaces/{p['ns']}/logs/{p['name']}").close()
        except urllib.error.HTTPError:
            pass

    def flush(self):
        """Writes the lines that are due, in the CRI log format."""
        now = time.monotonic()
        with self.lock:
            for p in self.pods.values():
                if p["started"] is None:
                    continue
                # Lines are written in order: a later line waits for an earlier delayed one.
                n = 0
                for d, _ in p["lines"][p["written"]:]:
                    if p["started"] + d > now:
                        break
                    n += 1
                if n == 0:
                    continue
                stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
                with open(p["path"], "a") as f:
                    for _, line in p["lines"][p["written"]:p["written"] + n]:
                        f.write(f"{stamp} stdout F {line}\n")
                p["written"] += n


def watch(api, pods):
    """Lists, then watches pods, for ever (re-listing when the watch expires)."""
    while True:
        try:
            with api.request("GET", "/api/v1/pods", timeout=60) as r:
                listing = json.load(r)
            for pod in listing.get("items", []):
                pods.seen(pod)
            rv = listing["metadata"]["resourceVersion"]
            path = f"/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=240"
            with api.request("GET", path, timeout=300) as r:
                for raw in r:
                    ev = json.loads(raw)
                    kind, obj = ev.get("type"), ev.get("object", {})
                    if kind in ("ADDED", "MODIFIED"):
                        pods.seen(obj)
                    elif kind == "DELETED":
                        pods.gone(obj)
                    elif kind == "ERROR":
                        break
        except Exception as e:  # the API server restarting, a timeout: start over
            log(f"watch: {e}; re-listing")
            time.sleep(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--dir", required=True)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    pods = Pods(Api(a.server, a.ca, a.cert, a.key), a.dir)
    threading.Thread(target=watch, args=(Api(a.server, a.ca, a.cert, a.key), pods), daemon=True).start()
    log(f"serving annotated pods' logs from {a.dir}")
    while True:
        time.sleep(0.25)
        pods.flush()


if __name__ == "__main__":
    main()
