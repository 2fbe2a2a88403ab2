"""Gryvia's Python SDK.

Typed, validated Gryvia objects (every kind of ``gryvia.io/v1alpha1``, checked against the
same CRD schemas and CEL rules the API server enforces), the pure policy functions the
operators run (GPU health and drains, tenants and quotas, template rendering, admission
decisions, the AI job controller's plan, reservation windows, cron schedules, the tuner's
next trial), and a
Kubernetes client, blocking (``Client``) and asyncio (``AsyncClient``). Everything calls into
Gryvia's Rust libraries, except ``GatewayClient`` and ``AsyncGatewayClient``: REST clients of
the Gryvia gateway (``gryvia.gateway``) for users without access to the cluster.
"""

from .gateway import AsyncGatewayClient, GatewayClient, GatewayError
from .objects import *  # noqa: F403  (GryviaAIJob ...: one class per kind)
from .objects import KINDS as _KINDS
from ._gryvia import (
    ApiError,
    AsyncClient,
    Client,
    ConflictError,
    GryviaError,
    NotFoundError,
    Object,
    Resource,
    ValidationError,
    Watch,
    WatchEvent,
    admit_job,
    allocate_tenants,
    check_template,
    decode_list,
    drain_plan,
    evaluate_node,
    kinds,
    load_all,
    mutate_job,
    next_cron,
    reconcile,
    schedule,
    queue_world,
    expected_start,
    reconcile_health_check,
    reconcile_job,
    reconcile_quota,
    reconcile_job_hook,
    reconcile_workflow,
    usage_record,
    reconcile_budget,
    reconcile_tenant,
    render_job,
    render_template,
    suggest,
    reservation_window,
    validate,
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncGatewayClient",
    "GatewayClient",
    "GatewayError",
    "Client",
    "ConflictError",
    "GryviaError",
    "NotFoundError",
    "Object",
    "Resource",
    "ValidationError",
    "Watch",
    "WatchEvent",
    "admit_job",
    "allocate_tenants",
    "check_template",
    "decode_list",
    "drain_plan",
    "evaluate_node",
    "kinds",
    "load_all",
    "mutate_job",
    "next_cron",
    "reconcile",
    "schedule",
    "queue_world",
    "expected_start",
    "reconcile_health_check",
    "reconcile_job",
    "reconcile_quota",
    "reconcile_job_hook",
    "reconcile_workflow",
    "usage_record",
    "reconcile_budget",
    "reconcile_tenant",
    "render_job",
    "render_template",
    "suggest",
    "reservation_window",
    "validate",
    *_KINDS,
]
