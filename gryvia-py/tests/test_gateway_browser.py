"""The dashboard in a real browser (Debian's Chromium driven by Playwright): log in through Dex
(authorization code with PKCE), see a job's why-pending, and see none of another tenant's
jobs. Screenshots are saved as test artifacts in target/e2e-artifacts/."""

import os
import secrets
import shutil
import time

import pytest

import gryvia

from conftest import ROOT, running_ai_operator

ARTIFACTS = ROOT / "target" / "e2e-artifacts"


def _chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("GRYVIA_E2E") in ("1", "true"):
            pytest.fail("GRYVIA_E2E=1 but chromium is not installed: run scripts/setup")
        pytest.skip("no chromium (scripts/setup installs it)")
    return path


@pytest.fixture
def queue_operator(client, kubeconfig, namespace):
    """The ai-operator with the native queue scheduler, running as the admin."""
    with running_ai_operator(kubeconfig, namespace, "pytest-browser-ai-operator",
                             "--native-queue-scheduler") as proc:
        yield proc


def _login(page, gateway, user):
    page.goto(gateway.url + "/")
    page.click("#sso")
    # Dex's own login form for its password database.
    page.wait_for_selector("#login")
    page.fill("#login", user)
    page.fill("#password", "password")
    page.click("#submit-login")
    page.wait_for_selector("#app:not([hidden])", timeout=20000)


def test_log_in_through_dex_see_why_pending_and_no_other_tenants_jobs(gateway, client, queue_operator):
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = _chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Tenant a's jobs enter a native queue with 1 GPU of quota; alice's job asks for 2.
    h100 = "NVIDIA-H100-80GB-HBM3"
    queue = f"browser-{secrets.token_hex(3)}"
    client.create({"apiVersion": "gryvia.io/v1alpha1", "kind": "GryviaQueue", "metadata": {"name": queue},
                   "spec": {"namespaces": [f"tenant-{gateway.a}"],
                            "resources": [{"gpuType": h100, "nominal": 1}]}})
    # A job for each tenant, submitted through the gateway as its members.
    alice = gryvia.GatewayClient(gateway.url, gateway.dex.token("alice@example.com"))
    bob = gryvia.GatewayClient(gateway.url, gateway.dex.token("bob@example.com"))
    alice.submit(f"tenant-{gateway.a}", {"metadata": {"name": "browser-train"},
                                          "spec": {"image": "registry.example/t:1", "gpus": 2,
                                                   "gpuType": h100}})
    why = ""
    for _ in range(300):
        waiting = [w for w in alice.queue(f"tenant-{gateway.a}") if w["job"] == "browser-train"]
        if waiting and waiting[0].get("queue") == queue:
            why = waiting[0]["why"]
            break
        time.sleep(0.1)
    assert why, "the native queue never explained why the job waits"
    bob.submit(f"tenant-{gateway.b}", {"metadata": {"name": "bobs-secret-job"},
                                        "spec": {"image": "registry.example/t:1", "gpus": 1}})
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            # Dex's certificate comes from the testenv CA, which this browser does not know.
            context = browser.new_context(ignore_https_errors=True)
            page = context.new_page()
            _login(page, gateway, "alice@example.com")
            assert "alice@example.com" in page.inner_text("#who")
            page.wait_for_selector("text=browser-train")
            view = page.inner_text("#view")
            assert "browser-train" in view
            row = page.locator("tr:has-text('browser-train')").inner_text()
            assert queue in row, row
            shown = page.locator("tr:has-text('browser-train') .why").inner_text()
            assert shown.strip() == why.strip(), (shown, why)
            page.screenshot(path=str(ARTIFACTS / "dashboard-queue-alice.png"), full_page=True)
            page.click("nav button[data-view=jobs]")
            page.wait_for_selector("text=browser-train")
            jobs = page.inner_text("#view")
            assert "bobs-secret-job" not in jobs and f"tenant-{gateway.b}" not in jobs
            page.screenshot(path=str(ARTIFACTS / "dashboard-jobs-alice.png"), full_page=True)
            page.click("nav button[data-view=fleet]")
            page.wait_for_selector("text=may not read the fleet")
            page.click("nav button[data-view=tenants]")
            page.wait_for_selector(f"text={gateway.a}")
            assert gateway.b not in page.inner_text("#view")
            page.screenshot(path=str(ARTIFACTS / "dashboard-tenants-alice.png"), full_page=True)

            # The admin sees the fleet's GPU health.
            admin = browser.new_context(ignore_https_errors=True).new_page()
            _login(admin, gateway, "admin@example.com")
            admin.click("nav button[data-view=fleet]")
            admin.wait_for_selector("#view h2:has-text('GPU fleet')")
            assert "may not read" not in admin.inner_text("#view")
            admin.screenshot(path=str(ARTIFACTS / "dashboard-fleet-admin.png"), full_page=True)
            browser.close()
    finally:
        alice.delete("jobs", f"tenant-{gateway.a}", "browser-train")
        bob.delete("jobs", f"tenant-{gateway.b}", "bobs-secret-job")
        client.delete("GryviaQueue", queue)
