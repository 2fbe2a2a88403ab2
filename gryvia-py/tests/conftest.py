"""Fixtures of the e2e tests: the testenv control plane (testenv/up) and the operator binary.

Without a control plane the e2e tests are skipped, unless GRYVIA_E2E=1 demands them (as
scripts/test does), in which case they fail.
"""

import contextlib
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


@contextlib.contextmanager
def running_ai_operator(kubeconfig, namespace, log_name, *extra):
    """The ai-operator binary (built by cargo test, or built here) with `extra` flags, running as
    the admin with its Lease in `namespace`, stopped at the end."""
    binary = ROOT / "target" / "debug" / "gryvia-ai-operator"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-p", "gryvia-ai-operator"], cwd=ROOT, check=True)
    log = open(ROOT / "target" / f"{log_name}.log", "w")
    env = dict(os.environ, KUBECONFIG=kubeconfig, RUST_LOG="info")
    proc = subprocess.Popen(
        [str(binary), "--metrics-addr", f"127.0.0.1:{_free_port()}", "--lease-namespace", namespace,
         "--lease-duration", "4", "--lease-grace", "1", *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    time.sleep(0.5)
    assert proc.poll() is None, f"the ai-operator exited at once; see {log.name}"
    try:
        yield proc
    finally:
        _stop(proc, log)


def _stop(proc, log):
    """Stops a process this conftest started (SIGTERM, SIGKILL after 10 s) and closes its log."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def ai_operator(client, kubeconfig, namespace):
    """The ai-operator binary, running as the admin."""
    with running_ai_operator(kubeconfig, namespace, f"pytest-ai-operator-{namespace}") as proc:
        yield proc


# -- the gateway (bins/gryvia-gateway) with Dex (testenv/up --with-dex) -----------------------

def _state_dir():
    kc = os.environ.get("GRYVIA_TESTENV_KUBECONFIG")
    if kc:
        return pathlib.Path(kc).parent
    return pathlib.Path(os.environ.get("GRYVIA_TESTENV_DIR", "/tmp/gryvia-testenv"))


class Dex:
    """The testenv Dex: its issuer and CA, and ID tokens by the password grant."""

    def __init__(self, issuer, ca):
        self.issuer = issuer
        self.ca = str(ca)

    def token(self, user, client="gryvia", secret="gryvia-testenv-secret"):
        import base64
        import json
        import ssl
        import urllib.parse
        import urllib.request
        body = urllib.parse.urlencode({
            "grant_type": "password", "username": user, "password": "password",
            "scope": "openid email groups profile"}).encode()
        auth = base64.b64encode(f"{client}:{secret}".encode()).decode()
        req = urllib.request.Request(self.issuer + "/token", data=body,
                                     headers={"Authorization": f"Basic {auth}"})
        ctx = ssl.create_default_context(cafile=self.ca)
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            token = json.loads(resp.read())["id_token"]
        record_secret(f"Dex client secret of {client}", secret)
        record_secret(f"the signature of {user}'s token", token.rsplit(".", 1)[-1])
        return token


def record_secret(what, value):
    """Records a secret handed to the system under test, for scripts/check-logs-for-secrets to
    look for in every E2E log (as testsupport's record_secret does for the Rust tests)."""
    path = ROOT / "target" / "e2e-secrets.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"{what.replace(chr(9), ' ')}\t{value}\n")


@pytest.fixture(scope="session")
def dex(kubeconfig):
    state = _state_dir()
    issuer = None
    try:
        for line in (state / "dex" / "config.yaml").read_text().splitlines():
            if line.startswith("issuer: "):
                issuer = line.split(": ", 1)[1].strip()
    except OSError:
        pass
    if issuer is None:
        if os.environ.get("GRYVIA_E2E") in ("1", "true"):
            pytest.fail("GRYVIA_E2E=1 but Dex is not running: testenv/up --with-dex")
        pytest.skip("no Dex (testenv/up --with-dex)")
    return Dex(issuer, state / "pki" / "ca.crt")


def _kubectl(kubeconfig, *args, stdin=None):
    bindir = subprocess.run([str(ROOT / "testenv" / "build"), "--print-bin-dir"], check=True,
                            capture_output=True, text=True).stdout.strip()
    return subprocess.run([os.path.join(bindir, "kubectl"), "--kubeconfig", kubeconfig, *args],
                          input=stdin, check=True, capture_output=True, text=True)


class GatewayEnv:
    """Two tenants (a: the group team-a; b: bob by name) with namespaces and member
    RoleBindings as the quota-operator's --tenant-rbac makes them, and the gateway binary."""

    def __init__(self, url, dex, tenant_a, tenant_b):
        self.url = url
        self.dex = dex
        self.a = tenant_a
        self.b = tenant_b


@pytest.fixture(scope="session")
def gateway(client, kubeconfig, dex):
    import json
    _kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f",
             str(ROOT / "deploy" / "user-roles.yaml"))
    # The chart's binding of the admin group (deploy/gateway/rbac.yaml, gryvia-platform-admins).
    _kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "gryvia-platform-admins"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "gryvia-platform-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "gryvia-admins"}]}))
    suffix = secrets.token_hex(3)
    tenants = {"a": f"pygwa-{suffix}", "b": f"pygwb-{suffix}"}
    members = {
        "a": [{"kind": "Group", "username": "team-a", "role": "member"}],
        "b": [{"username": "bob@example.com", "role": "member"}],
    }
    subjects = {
        "a": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "team-a"}],
        "b": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob@example.com"}],
    }
    for key, name in tenants.items():
        client.create({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaTenant",
                       "metadata": {"name": name},
                       "spec": {"displayName": f"Tenant {name}", "members": members[key]}})
        ns = f"tenant-{name}"
        client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "gryvia-tenant-edit", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": subjects[key]}))
    keys_ns = f"e2e-pygw-{suffix}"
    client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": keys_ns}})
    binary = ROOT / "target" / "debug" / "gryvia-gateway"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-p", "gryvia-gateway"], cwd=ROOT, check=True)
    port = _free_port()
    log = open(ROOT / "target" / "pytest-gateway.log", "w")
    env = dict(os.environ, KUBECONFIG=kubeconfig, RUST_LOG="info")
    proc = subprocess.Popen(
        [str(binary), "--listen", f"127.0.0.1:{port}", "--oidc-enabled",
         "--oidc-issuer-url", dex.issuer, "--oidc-client-id", "gryvia-dashboard",
         "--oidc-audience", "gryvia-dashboard,gryvia", "--oidc-ca-file", dex.ca,
         "--oidc-admin-groups", "gryvia-admins", "--keys-namespace", keys_ns,
         "--rate-limit", "2000", "--rate-burst", "4000"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import urllib.request
    for _ in range(200):
        assert proc.poll() is None, f"the gateway exited; see {log.name}"
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)
    else:
        pytest.fail(f"the gateway did not become ready; see {log.name}")
    yield GatewayEnv(url, dex, tenants["a"], tenants["b"])
    _stop(proc, log)
    for name in tenants.values():
        client.delete("GryviaTenant", name)
        client.delete("Namespace", f"tenant-{name}", api_version="v1")
    client.delete("Namespace", keys_ns, api_version="v1")
