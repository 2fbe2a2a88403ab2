"""A client of the Gryvia gateway's REST API, for users without access to the cluster.

``GatewayClient`` blocks; ``AsyncGatewayClient`` has the same methods as coroutines (each
request runs on the event loop's default executor, so the loop never blocks). Both
authenticate with an OIDC ID token of the gateway's issuer or an API key (``gryvia_...``),
sent as ``Authorization: Bearer``. Objects come back as plain ``dict``s, exactly as the
gateway's OpenAPI document (``/openapi.json``) describes them; a refusal raises
``GatewayError`` with the gateway's stable ``code`` and the ``field`` at fault.

Standard library only: ``urllib`` and ``ssl``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, List, Optional

__all__ = ["AsyncGatewayClient", "GatewayClient", "GatewayError"]

#: The namespaced kinds the gateway serves, by path segment.
RESOURCES = ("jobs", "workflows", "tuners", "inferenceservices", "workspaces", "models")


class GatewayError(Exception):
    """The gateway refused a request: HTTP ``status``, stable ``code``, the ``field`` at fault."""

    def __init__(self, status: int, code: str, message: str, field: Optional[str] = None,
                 retry_after: Optional[float] = None):
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class GatewayClient:
    """A blocking client of the gateway at ``url`` (e.g. ``https://gryvia.example``)."""

    def __init__(self, url: str, token: str, *, ca_file: Optional[str] = None,
                 timeout: float = 30.0, verify: bool = True):
        if not token:
            raise ValueError("token: an OIDC ID token or an API key is required")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if self.url.startswith("https://"):
            ctx = ssl.create_default_context(cafile=ca_file)
            if not verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
        else:
            self._opener = urllib.request.build_opener()

    # -- transport ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                query: Optional[Dict[str, Any]] = None) -> Any:
        """One request; the decoded JSON answer (``None`` for 204)."""
        url = self.url + path
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        data = None
        headers = dict(self._headers)
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
            except ValueError:
                err = {"code": "http", "message": raw.decode(errors="replace") or e.reason}
            retry = e.headers.get("Retry-After")
            raise GatewayError(e.code, err.get("code", "http"), err.get("message", ""),
                               err.get("field"), float(retry) if retry else None) from None

    def _pages(self, path: str, query: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        token = None
        while True:
            page = self.request("GET", path, query=dict(query, **{"continue": token}))
            yield from page["items"]
            token = page.get("continue")
            if not token:
                return

    # -- who -----------------------------------------------------------------------------------

    def whoami(self) -> Dict[str, Any]:
        """The caller: user, groups, admin, the tenants it may see, how it authenticated."""
        return self.request("GET", "/api/v1/whoami")

    # -- jobs and the ML kinds -------------------------------------------------------------

    def list(self, resource: str = "jobs", namespace: Optional[str] = None,
             page_size: int = 100) -> List[Dict[str, Any]]:
        """Every object of ``resource`` the caller may see (all pages), or of one namespace."""
        return list(self.iter(resource, namespace, page_size))

    def iter(self, resource: str = "jobs", namespace: Optional[str] = None,
             page_size: int = 100) -> Iterator[Dict[str, Any]]:
        """Like ``list``, one page at a time."""
        _check_resource(resource)
        return self._pages(f"/api/v1/{resource}", {"namespace": namespace, "limit": page_size})

    def get(self, resource: str, namespace: str, name: str) -> Dict[str, Any]:
        _check_resource(resource)
        return self.request("GET", f"/api/v1/namespaces/{_quote(namespace)}/{resource}/{_quote(name)}")

    def create(self, resource: str, namespace: str, obj: Dict[str, Any]) -> Dict[str, Any]:
        """Creates an object (checked against its kind's schema by the gateway first)."""
        _check_resource(resource)
        return self.request("POST", f"/api/v1/namespaces/{_quote(namespace)}/{resource}", obj)

    def delete(self, resource: str, namespace: str, name: str) -> None:
        """Deletes (for a job: cancels) an object."""
        _check_resource(resource)
        self.request("DELETE", f"/api/v1/namespaces/{_quote(namespace)}/{resource}/{_quote(name)}")

    def submit(self, namespace: str, job: Dict[str, Any]) -> Dict[str, Any]:
        """Submits a GryviaAIJob."""
        return self.create("jobs", namespace, job)

    def submit_template(self, namespace: str, template: str, name: Optional[str] = None,
                        params: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """Submits a job rendered from a GryviaTemplate."""
        body: Dict[str, Any] = {"params": dict(params or {})}
        if name:
            body["name"] = name
        return self.request(
            "POST", f"/api/v1/namespaces/{_quote(namespace)}/templates/{_quote(template)}/jobs", body)

    def logs(self, namespace: str, name: str, tail: Optional[int] = None) -> Dict[str, str]:
        """Each worker's log (its newest attempt), by pod."""
        return self.request("GET", f"/api/v1/namespaces/{_quote(namespace)}/jobs/{_quote(name)}/logs",
                            query={"tail": tail})["workers"]

    def queue(self, namespace: Optional[str] = None) -> List[Dict[str, Any]]:
        """Waiting jobs: queue, position, expected start and why."""
        return self.request("GET", "/api/v1/queue", query={"namespace": namespace})["items"]

    def templates(self) -> List[Dict[str, Any]]:
        return self.request("GET", "/api/v1/templates")["items"]

    # -- fleet -----------------------------------------------------------------------------

    def nodes(self) -> List[Dict[str, Any]]:
        """GPU nodes and their health (RBAC: admins)."""
        return self.request("GET", "/api/v1/nodes")["items"]

    def node(self, name: str) -> Dict[str, Any]:
        return self.request("GET", f"/api/v1/nodes/{_quote(name)}")

    def start_maintenance(self, node: str, reason: str) -> Dict[str, Any]:
        return self.request("POST", f"/api/v1/nodes/{_quote(node)}/maintenance", {"reason": reason})

    def end_maintenance(self, node: str) -> Dict[str, Any]:
        return self.request("DELETE", f"/api/v1/nodes/{_quote(node)}/maintenance")

    # -- tenants, usage, money -------------------------------------------------------------

    def tenants(self) -> List[Dict[str, Any]]:
        """The tenants the caller may see, with quota use."""
        return self.request("GET", "/api/v1/tenants")["items"]

    def tenant(self, name: str) -> Dict[str, Any]:
        """A tenant, its budgets and its spend this month (``cost``)."""
        return self.request("GET", f"/api/v1/tenants/{_quote(name)}")

    def invoices(self, tenant: str) -> List[Dict[str, Any]]:
        return self.request("GET", f"/api/v1/tenants/{_quote(tenant)}/invoices")["items"]

    # -- API keys --------------------------------------------------------------------------

    def api_keys(self) -> List[Dict[str, Any]]:
        return self.request("GET", "/api/v1/apikeys")["items"]

    def create_api_key(self, name: str, tenant: Optional[str] = None, scope: str = "write",
                       expires_in_days: Optional[int] = None) -> Dict[str, Any]:
        """A key acting as the caller (from an OIDC login); ``["key"]`` is shown only now."""
        body: Dict[str, Any] = {"name": name, "scope": scope}
        if tenant:
            body["tenant"] = tenant
        if expires_in_days is not None:
            body["expiresInDays"] = expires_in_days
        return self.request("POST", "/api/v1/apikeys", body)

    def revoke_api_key(self, key_id: str) -> None:
        self.request("DELETE", f"/api/v1/apikeys/{_quote(key_id)}")


def _check_resource(resource: str) -> None:
    if resource not in RESOURCES:
        raise ValueError(f"resource must be one of {', '.join(RESOURCES)}, not {resource!r}")


class AsyncGatewayClient:
    """The asyncio twin of ``GatewayClient``: every method is a coroutine."""

    def __init__(self, url: str, token: str, **kwargs: Any):
        self._sync = GatewayClient(url, token, **kwargs)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._sync, name)
        if not callable(method) or name.startswith("_") or name == "iter":
            return method

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(method, *args, **kwargs))

        return call
