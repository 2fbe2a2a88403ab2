"""GatewayClient and AsyncGatewayClient against the real gateway binary, a real control plane
and Dex: the same answers as the REST API, errors with their stable code and field."""

import asyncio

import pytest

import gryvia


def _job(name, gpus=1):
    return {"metadata": {"name": name},
            "spec": {"image": "registry.example/train:1", "gpus": gpus, "replicas": 1}}


def test_sync_client_submits_lists_and_is_refused_where_rbac_says_no(gateway):
    alice = gryvia.GatewayClient(gateway.url, gateway.dex.token("alice@example.com"))
    bob = gryvia.GatewayClient(gateway.url, gateway.dex.token("bob@example.com"))
    me = alice.whoami()
    assert me["user"] == "alice@example.com" and gateway.a in me["tenants"]
    ns = f"tenant-{gateway.a}"
    created = alice.submit(ns, _job("py-train"))
    assert created["metadata"]["namespace"] == ns
    assert alice.get("jobs", ns, "py-train")["spec"]["gpus"] == 1
    names = [j["metadata"]["name"] for j in alice.list("jobs", page_size=1)]
    assert "py-train" in names
    assert any(w["job"] == "py-train" and w["why"] for w in alice.queue(ns))
    assert alice.tenant(gateway.a)["cost"]["tenant"] == gateway.a
    with pytest.raises(gryvia.GatewayError) as refused:
        alice.submit(ns, _job("bad", gpus=-1))
    assert (refused.value.status, refused.value.code, refused.value.field) == (422, "invalid", "spec.gpus")
    with pytest.raises(gryvia.GatewayError) as other:
        bob.get("jobs", ns, "py-train")
    assert (other.value.status, other.value.code) == (403, "forbidden")
    assert all(j["metadata"]["namespace"] != ns for j in bob.list("jobs"))
    with pytest.raises(ValueError):
        alice.list("secrets")

    key = alice.create_api_key("py", tenant=gateway.a, scope="read", expires_in_days=1)
    by_key = gryvia.GatewayClient(gateway.url, key["key"])
    assert by_key.whoami()["method"] == "apiKey"
    with pytest.raises(gryvia.GatewayError) as scoped:
        by_key.submit(ns, _job("by-key"))
    assert scoped.value.code == "key_scope"
    alice.revoke_api_key(key["record"]["id"])
    alice.delete("jobs", ns, "py-train")


def test_async_client_answers_like_the_sync_one(gateway):
    token = gateway.dex.token("carol@example.com")

    async def run():
        c = gryvia.AsyncGatewayClient(gateway.url, token)
        me = await c.whoami()
        jobs = await c.list("jobs")
        with pytest.raises(gryvia.GatewayError) as e:
            await c.nodes()
        return me, jobs, e.value.status

    me, jobs, status = asyncio.run(run())
    assert me["user"] == "carol@example.com" and gateway.a in me["tenants"]
    assert isinstance(jobs, list)
    assert status == 403, "fleet health is for admins"


def test_a_bad_token_is_unauthenticated(gateway):
    with pytest.raises(gryvia.GatewayError) as e:
        gryvia.GatewayClient(gateway.url, "not-a-token").whoami()
    assert (e.value.status, e.value.code) == (401, "unauthenticated")
