"""Gryvia's Python SDK.

Typed, validated Gryvia objects (every kind of ``gryvia.io/v1alpha1``, checked against the
same CRD schemas and CEL rules the API server enforces) and the pure policy functions the
operators run (template rendering, admission decisions, the AI job controller's plan,
reservation windows, cron schedules). Everything calls into Gryvia's Rust libraries.
"""

from ._gryvia import (
    ApiError,
    ConflictError,
    GryviaError,
    NotFoundError,
    Object,
    Resource,
    ValidationError,
    admit_job,
    check_template,
    kinds,
    load_all,
    mutate_job,
    next_cron,
    reconcile_job,
    render_job,
    render_template,
    reservation_window,
    validate,
)

__all__ = [
    "ApiError",
    "ConflictError",
    "GryviaError",
    "NotFoundError",
    "Object",
    "Resource",
    "ValidationError",
    "admit_job",
    "check_template",
    "kinds",
    "load_all",
    "mutate_job",
    "next_cron",
    "reconcile_job",
    "render_job",
    "render_template",
    "reservation_window",
    "validate",
]
