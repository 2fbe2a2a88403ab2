"""Fixtures of the e2e tests: the testenv control plane (testenv/up) and the operator binary.

Without a control plane the e2e tests are skipped, unless GRYVIA_E2E=1 demands them (as
scripts/test does), in which case they fail.
"""

import os
import pathlib
import secrets
import socket
import subprocess
import time

import pytest

import gryvia

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _kubeconfig():
    path = os.environ.get("GRYVIA_TESTENV_KUBECONFIG")
    if not path:
        path = os.path.join(os.environ.get("GRYVIA_TESTENV_DIR", "/tmp/gryvia-testenv"), "kubeconfig")
    return path if os.path.exists(path) else None


@pytest.fixture(scope="session")
def kubeconfig():
    path = _kubeconfig()
    if path is None:
        if os.environ.get("GRYVIA_E2E") in ("1", "true"):
            pytest.fail("GRYVIA_E2E=1 but no control plane: run testenv/up")
        pytest.skip("no control plane (testenv/up); set GRYVIA_E2E=1 to require one")
    return path


@pytest.fixture(scope="session")
def client(kubeconfig):
    c = gryvia.Client(kubeconfig=kubeconfig)
    c.install_crds(timeout=60)
    return c


@pytest.fixture
def namespace(client):
    name = f"e2e-py-{secrets.token_hex(4)}"
    client.create({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": {"gryvia.io/e2e": "true"}}})
    yield name
    client.delete("Namespace", name, api_version="v1")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ai_operator(client, kubeconfig, namespace):
    """The ai-operator binary (built by cargo test, or built here), running as the admin."""
    binary = ROOT / "target" / "debug" / "gryvia-ai-operator"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-p", "gryvia-ai-operator"], cwd=ROOT, check=True)
    log = open(ROOT / "target" / f"pytest-ai-operator-{namespace}.log", "w")
    env = dict(os.environ, KUBECONFIG=kubeconfig, RUST_LOG="info")
    proc = subprocess.Popen(
        [str(binary), "--metrics-addr", f"127.0.0.1:{_free_port()}", "--lease-namespace", namespace,
         "--lease-duration", "4", "--lease-grace", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    time.sleep(0.5)
    assert proc.poll() is None, f"the ai-operator exited at once; see {log.name}"
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
