"""Type stubs of the native module ``gryvia._gryvia``."""

from typing import Any, Dict, List, Mapping, Optional

class GryviaError(Exception):
    """Base class of every Gryvia error."""

class ValidationError(GryviaError):
    """An object or value is invalid; the message names the field."""

class ApiError(GryviaError):
    """The Kubernetes API refused a request."""

class NotFoundError(ApiError):
    """The object does not exist."""

class ConflictError(ApiError):
    """The object exists already or was changed meanwhile."""

class Object:
    """A read-only view of a nested object of a resource, with attribute access
    (``snake_case`` names find ``camelCase`` fields)."""

    def __getattr__(self, name: str) -> Any: ...
    def __getitem__(self, key: str) -> Any: ...
    def __contains__(self, key: str) -> bool: ...
    def to_dict(self) -> Dict[str, Any]:
        """The nested object as plain Python data."""

class Resource:
    """A Gryvia object of any kind, validated like the API server validates it (schema and
    CEL rules), with the defaults of its typed form filled in.

    Raises ``ValidationError`` naming the field when the data is invalid."""

    def __init__(self, data: Mapping[str, Any]) -> None: ...
    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "Resource":
        """Builds and validates a resource from a dict."""
    @staticmethod
    def from_yaml(text: str) -> "Resource":
        """Builds and validates a resource from one YAML document."""
    def to_dict(self) -> Dict[str, Any]:
        """The object as plain Python data."""
    def to_yaml(self) -> str:
        """The object as YAML."""
    def to_json(self) -> str:
        """The object as JSON."""
    @property
    def kind(self) -> str:
        """``kind``."""
    @property
    def name(self) -> Optional[str]:
        """``metadata.name``."""
    @property
    def namespace(self) -> Optional[str]:
        """``metadata.namespace``."""
    def __getattr__(self, name: str) -> Any: ...

def validate(data: Mapping[str, Any]) -> None:
    """Validates a Gryvia object; raises ``ValidationError`` naming the field."""

def load_all(text: str) -> List[Resource]:
    """Every Gryvia object of a YAML stream, validated."""

def kinds() -> List[str]:
    """Every Gryvia kind, sorted."""

def render_template(
    template: Any, name: str, namespace: str, params: Optional[Mapping[str, str]] = None
) -> Resource:
    """Renders a GryviaTemplate into a GryviaAIJob (what ``gryvia submit --template`` does).
    Raises ``ValidationError`` naming the parameter or field."""

def check_template(template: Any) -> None:
    """Checks a GryviaTemplate as the ai-operator does for its ``Valid`` condition."""

def admit_job(job: Any, world: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The validating admission webhook's decision: ``{"allowed", "message", "warnings"}``.
    ``world`` keys: ``tenant``, ``skus``, ``gpuQuota``, ``template``, ``reservation``."""

def mutate_job(job: Any) -> List[Dict[str, Any]]:
    """The mutating admission webhook's JSON Patch for a new job."""

def reconcile_job(
    job: Any, world: Optional[Mapping[str, Any]] = None, now: Optional[str] = None
) -> Dict[str, Any]:
    """The AI job controller's Plan (children to apply, status, events, requeue).
    ``world`` keys: ``job``, ``pods``, ``nodes``, ``priorityClassExists``."""

def render_job(
    job: Any, backoff_limit: Optional[int] = None, priority_class: Optional[str] = None
) -> Dict[str, Any]:
    """The batch Job the controller makes of an AI job."""

def reservation_window(reservation: Any, now: Optional[str] = None) -> Dict[str, Any]:
    """Where a reservation's schedule stands: ``{"state": "open"|"next"|"over", "start", "end"}``."""

def next_cron(schedule: str, after: str) -> str:
    """The next time a cron schedule (UTC; five fields, or six with seconds) fires after
    ``after`` (RFC 3339)."""
