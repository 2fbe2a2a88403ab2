"""Type stubs of the native module ``gryvia._gryvia``."""

from typing import Any, AsyncIterator, Awaitable, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union, overload

from . import objects as _k

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
    (``snake_case`` names find ``camelCase`` fields). It shares the resource's data: reading
    ``job.spec.gpus`` copies nothing; ``to_dict()`` makes plain data of it. For type checkers each nested object of
    a kind is a class of ``gryvia.objects`` naming its fields; a field the schema does not
    declare is read as ``obj["field"]``."""

    def __getitem__(self, key: str) -> Any: ...
    def __contains__(self, key: str) -> bool: ...
    def to_dict(self) -> Dict[str, Any]:
        """The nested object as plain Python data."""

class Resource:
    """A Gryvia object of any kind, validated like the API server validates it (schema and
    CEL rules), with the defaults of its typed form filled in; or an object of any other kind
    that ``Client`` returned when asked for objects (``dicts=False``).

    Raises ``ValidationError`` naming the field when the data is invalid."""

    def __init__(self, data: Mapping[str, Any]) -> None: ...
    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> "Resource":
        """Builds and validates a resource from a dict, as its kind's class
        (``gryvia.GryviaAIJob`` ...)."""
    @staticmethod
    def from_yaml(text: str) -> "Resource":
        """Builds and validates a resource from one YAML document, as its kind's class."""
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
    @property
    def metadata(self) -> Any:
        """``metadata`` (an ``Object``)."""
    @property
    def spec(self) -> Any:
        """``spec`` (an ``Object``); raises ``AttributeError`` when the kind has none."""
    @property
    def status(self) -> Any:
        """``status`` (an ``Object``); raises ``AttributeError`` while it is unset."""
    def __getattr__(self, name: str) -> Any: ...
    def __getitem__(self, key: str) -> Any:
        """Member ``key`` as the server names it (``job["spec"]``); ``KeyError`` when unset."""
    def __contains__(self, key: str) -> bool: ...

def validate(data: Mapping[str, Any]) -> None:
    """Validates a Gryvia object; raises ``ValidationError`` naming the field."""

def load_all(text: str) -> List[Resource]:
    """Every Gryvia object of a YAML stream, validated."""

def kinds() -> List[str]:
    """Every Gryvia kind, sorted."""

def render_template(
    template: Any, name: str, namespace: str, params: Optional[Mapping[str, str]] = None
) -> _k.GryviaAIJob:
    """Renders a GryviaTemplate into a GryviaAIJob (what ``gryvia submit --template`` does).
    Raises ``ValidationError`` naming the parameter or field."""

def check_template(template: Any) -> None:
    """Checks a GryviaTemplate as the ai-operator does for its ``Valid`` condition."""

def suggest(
    study: Any, history: Optional[List[Mapping[str, Any]]] = None
) -> Optional[Dict[str, str]]:
    """The next trial's parameter values of a GryviaAutoTuner given the trials so far (dicts
    with ``parameters`` and, once finished, ``objectiveValue``), as the ai-operator would
    start it; ``None`` when the study has nothing more to try. Deterministic from the seed."""

def admit_job(job: Any, world: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The validating admission webhook's decision: ``{"allowed", "message", "warnings"}``.
    ``world`` keys: ``tenant``, ``skus``, ``gpuQuota``, ``template``, ``reservation``."""

def mutate_job(job: Any, world: Optional[Mapping[str, Any]] = None) -> List[Dict[str, Any]]:
    """The mutating admission webhook's JSON Patch for a new job. ``world`` keys (as for
    ``admit_job``): ``tenant`` (its ``defaultTier`` and ``classification`` are stamped on the
    job), ``tiers`` (GryviaPriority values by name) and ``preemptible`` (preemptible
    reservations and their baselines, tolerated by jobs of a higher tier)."""

def schedule(world: Mapping[str, Any], now: Optional[str] = None) -> Dict[str, Any]:
    """One admission cycle of the native queue scheduler: ``world`` has ``queues`` (``name``,
    ``namespaces``, ``cohort``, ``resources`` in thousandths of a GPU, ``strategy``,
    ``preemptLowerPriority``, ``reclaimWithinCohort``, ``gangAdmission``), ``jobs`` (``key``,
    ``created``, ``classValue``, ``priority``, ``gpuType``, ``workers``, ``share``, ``state``,
    ``live``, ...) and ``nodes`` (``name``, ``product``, ``allocatable``, ``used``, ...).
    Returns ``admitted``, ``preempted``, ``released``, ``pending`` (queue, position, reason,
    expectedStart per job), ``queues`` and ``problems``."""

def queue_world(
    queues: Sequence[Any],
    jobs: Sequence[Any],
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    priorities: Optional[Sequence[Any]] = None,
) -> Dict[str, Any]:
    """The world of one queue cycle from cluster objects (GryviaQueues, GryviaAIJobs, Nodes,
    Pods, GryviaPriority classes), as the ai-operator reads it: pass it to ``schedule``. An
    admitted job's workers are counted from its admission, other pods from their GPU requests;
    finished jobs, namespaces no queue covers and nodes without GPUs are left out."""

def expected_start(
    world: Mapping[str, Any], namespace: str, name: str, now: Optional[str] = None
) -> Optional[str]:
    """When the pending job would start (RFC 3339), or ``None`` when that cannot be known."""

def reconcile(
    object: Any,
    world: Optional[Mapping[str, Any]] = None,
    now: Optional[str] = None,
    remediation: bool = False,
    tenant_rbac: bool = False,
) -> Dict[str, Any]:
    """The Plan of the controller that owns the object's kind (GryviaAIJob, GryviaBudget,
    GryviaHealthCheck, GryviaJobHook, GryviaQuota, GryviaTenant, GryviaWorkflow) for the object
    in ``world`` (the keys of that controller's World, listed with its named alias below) at
    ``now`` (RFC 3339; the current time when omitted). ``remediation`` and ``tenant_rbac`` are
    the health and tenant controllers' operator switches. Raises ``ValidationError`` for another
    kind. ``reconcile_job``, ``reconcile_budget``, ... are aliases for one kind each."""

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

def decode_list(data: Union[bytes, str]) -> List[Resource]:
    """Decodes the JSON body of a list response (``{"kind": "GryviaAIJobList", "items": [...]}``)
    into objects of their kind's class, each through its typed Rust struct (strict: raises
    ``ValidationError`` naming the item and field that do not fit). ``Client.list`` does not
    decode: it keeps each item as the server sent it (checked by the API server against the
    same schemas) and reads each field from that text when it is asked for."""

def reconcile_health_check(
    check: Any,
    world: Optional[Mapping[str, Any]] = None,
    now: Optional[str] = None,
    remediation: bool = False,
) -> Dict[str, Any]:
    """The GPU health controller's Plan for a GryviaHealthCheck (cordon, quarantine taint,
    evictions, remediation steps, status, events). ``world`` keys: ``nodes`` (``name``,
    ``labels``, ``gpuCapacity``, ``unschedulable``, ``quarantinedBy``, ``maintenance``),
    ``gpuNodes`` (GryviaGpuNodes by node name), ``pods`` (by node name), ``pdbs``,
    ``remediatingElsewhere``. ``remediation`` is the operator's ``--gpu-remediation``."""

def evaluate_node(check: Any, gpu_node: Any = None, now: Optional[str] = None) -> Dict[str, Any]:
    """A health check's verdict on one node from its GryviaGpuNode (``None``: it reports
    nothing): ``{"verdict", "reasons", "gpus", "observedAt"}``."""

def drain_plan(pods: Sequence[Mapping[str, Any]], pdbs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """Which pods a drain evicts now (``evict``), which a PodDisruptionBudget holds back
    (``blocked``), which are ``terminating`` and which it ``skipped`` (DaemonSet and mirror
    pods). Pods: ``namespace``, ``name``, ``labels``, ``ownerKind``, ``mirror``, ``phase``,
    ``terminating``; PDBs: ``namespace``, ``name``, ``selector``, ``disruptionsAllowed``."""

def allocate_tenants(tenants: Sequence[Any]) -> Dict[str, Dict[str, Any]]:
    """The GPU limits down a tree of GryviaTenants: tenant name -> ``{"asked", "granted",
    "own", "capped", "problem"}``."""

def reconcile_tenant(
    tenant: Any,
    world: Optional[Mapping[str, Any]] = None,
    now: Optional[str] = None,
    tenant_rbac: bool = False,
) -> Dict[str, Any]:
    """The tenant controller's Plan: the namespace, ResourceQuota, LimitRange, NetworkPolicy
    and RoleBindings it wants, and the status. ``world`` keys: ``tenants`` (``name``,
    ``parent``, ``gpus``, ``created``), ``namespace`` (``tenantLabel``, ``terminating``),
    ``gpusInUse``, ``gpusByType``, ``pods``, ``workloads``."""

def reconcile_quota(
    quota: Any, world: Optional[Mapping[str, Any]] = None, now: Optional[str] = None
) -> Dict[str, Any]:
    """The quota controller's Plan: a ResourceQuota per namespace of a GryviaQuota.
    ``world`` keys: ``existingNamespaces``, ``managedIn``, ``gpusUsed``."""

def reconcile_job_hook(
    hook: Any, world: Optional[Mapping[str, Any]] = None, now: Optional[str] = None
) -> Dict[str, Any]:
    """The job hooks controller's Plan for a GryviaJobHook: deliveries recorded in its status
    and the signed notifications to send. ``world`` keys: ``subjects`` (the jobs and workflows
    of its namespace: ``kind``, ``name``, ``uid``, ``labels``, ``created``, ``phase``,
    ``retries``, ``startTime``, ``completionTime``) and ``secret`` (``Present``, ``Missing`` or
    ``NoKey``)."""

def reconcile_workflow(
    workflow: Any, world: Optional[Mapping[str, Any]] = None, now: Optional[str] = None
) -> Dict[str, Any]:
    """The workflow controller's Plan for a GryviaWorkflow: the steps' jobs to create and the
    status. ``world`` keys: ``jobs`` (its steps' jobs: ``step``, ``name``, ``phase``,
    ``startTime``, ``completionTime``) and ``templates`` (GryviaTemplates by name)."""

def usage_record(job: Any, world: Optional[Mapping[str, Any]] = None) -> Optional[Dict[str, Any]]:
    """The GryviaUsageRecord metering writes for a GryviaAIJob (``None`` before it starts or
    without GPUs). ``world`` keys: ``skus`` (``name``, ``gpuProduct``, ``priceMicros``,
    ``currency``), ``tenant``, ``nodeProduct``."""

def reconcile_budget(
    budget: Any, world: Optional[Mapping[str, Any]] = None, now: Optional[str] = None
) -> Dict[str, Any]:
    """The budget controller's Plan for a GryviaBudget: spend, GPU-hours, forecast and state
    in its current period, and threshold Events. ``world`` keys: ``records``
    (GryviaUsageRecords) and ``skus`` (as for :func:`usage_record`)."""

class WatchEvent:
    """One change seen by a watch."""

    @property
    def type(self) -> str:
        """``ADDED``, ``MODIFIED`` or ``DELETED``."""
    @property
    def object(self) -> Any:
        """The object: a ``Resource`` for Gryvia kinds, a dict otherwise."""

class Watch:
    """A watch of one kind. Iterate it with ``for`` (from ``Client.watch``) or ``async for``
    (from ``AsyncClient.watch``). It starts on the first event asked for, yields the current
    objects as ``ADDED``, then every change (objects that vanished while it reconnected come
    as ``DELETED``), and reconnects by itself; with a ``timeout`` it ends that many seconds
    after it was made. Raises ``ApiError`` when the watch fails; iterating on retries."""

    def __iter__(self) -> Iterator[WatchEvent]: ...
    def __next__(self) -> WatchEvent: ...
    def __aiter__(self) -> AsyncIterator[WatchEvent]: ...
    def __anext__(self) -> Awaitable[WatchEvent]: ...

class Client:
    """A Kubernetes client with blocking methods (the GIL is released while it waits; Ctrl-C
    cancels a request).

    ``Client()`` finds its configuration as kubectl does: in-cluster, ``KUBECONFIG``,
    ``~/.kube/config``; ``kubeconfig`` (a path) and ``context`` choose explicitly. Kinds are
    Gryvia kinds unless ``api_version`` names another group (``"v1"`` for Namespace,
    ``"batch/v1"`` for Job). Gryvia objects come back as their kind's class (``GryviaAIJob``
    ..., each a ``Resource``; a kind's name as ``kind`` types the result for the editor),
    others as dicts; ``dicts=True`` or ``False`` on ``get``, ``list`` and ``watch`` asks for
    dicts or objects of every kind.
    Errors: ``NotFoundError`` (404), ``ConflictError`` (409), ``ApiError`` (other refusals),
    ``ValidationError`` (a Gryvia object that the API server would refuse, checked before
    sending; an unknown kind), ``GryviaError`` (configuration, timeouts)."""

    def __init__(
        self,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
        field_manager: Optional[str] = None,
    ) -> None: ...
    @property
    def namespace(self) -> str:
        """The namespace of the configuration's context (``default`` when it names none)."""
    # --- generated by gen_kinds.py: Client.get overloads ---
    @overload
    def get(
        self,
        kind: Literal["GryviaAIJob"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaAIJob: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaAutoPolicy"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaAutoPolicy: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaAutoTuner"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaAutoTuner: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaBudget"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaBudget: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaCollectorConfig"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaCollectorConfig: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFabricSignal"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaFabricSignal: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFlowAggregate"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaFlowAggregate: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFlowPolicy"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaFlowPolicy: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaGpuNode"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaGpuNode: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaGpuSku"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaGpuSku: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaHealthCheck"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaHealthCheck: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaInferenceService"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaInferenceService: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaInvoice"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaInvoice: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaJobHook"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaJobHook: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaModelRegistry"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaModelRegistry: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetwork"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaNetwork: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkAnomaly"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaNetworkAnomaly: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkBaseline"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaNetworkBaseline: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkCost"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaNetworkCost: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaPriority"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaPriority: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaQueue"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaQueue: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaQuota"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaQuota: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaReservation"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaReservation: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaServiceGraph"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaServiceGraph: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaStorage"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaStorage: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTemplate"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaTemplate: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTenant"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaTenant: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTrainingInsight"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaTrainingInsight: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaUsageRecord"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaUsageRecord: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaWorkflow"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaWorkflow: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaWorkspace"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> _k.GryviaWorkspace: ...
    # --- end of generated Client.get overloads ---
    @overload
    def get(
        self,
        kind: str,
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[bool] = None,
    ) -> Any:
        """Reads one object; raises ``NotFoundError`` when it does not exist. ``dicts`` as for
        ``list``."""
    # --- generated by gen_kinds.py: Client.list overloads ---
    @overload
    def list(
        self,
        kind: Literal["GryviaAIJob"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaAIJob]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaAutoPolicy"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaAutoPolicy]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaAutoTuner"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaAutoTuner]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaBudget"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaBudget]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaCollectorConfig"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaCollectorConfig]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFabricSignal"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaFabricSignal]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFlowAggregate"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaFlowAggregate]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFlowPolicy"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaFlowPolicy]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaGpuNode"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaGpuNode]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaGpuSku"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaGpuSku]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaHealthCheck"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaHealthCheck]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaInferenceService"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaInferenceService]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaInvoice"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaInvoice]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaJobHook"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaJobHook]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaModelRegistry"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaModelRegistry]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetwork"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaNetwork]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkAnomaly"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaNetworkAnomaly]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkBaseline"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaNetworkBaseline]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkCost"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaNetworkCost]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaPriority"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaPriority]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaQueue"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaQueue]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaQuota"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaQuota]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaReservation"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaReservation]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaServiceGraph"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaServiceGraph]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaStorage"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaStorage]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTemplate"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaTemplate]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTenant"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaTenant]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTrainingInsight"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaTrainingInsight]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaUsageRecord"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaUsageRecord]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaWorkflow"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaWorkflow]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaWorkspace"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> List[_k.GryviaWorkspace]: ...
    # --- end of generated Client.list overloads ---
    @overload
    def list(
        self,
        kind: str,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[bool] = None,
    ) -> List[Any]:
        """Lists objects in ``namespace``, or in every namespace without one. Objects of a
        Gryvia kind come as objects of its class, objects of other kinds as dicts. With
        ``dicts=True`` every kind comes as dicts (decoded while the body streams in, the fastest
        way to the whole of every object); with ``dicts=False`` every kind comes as objects,
        each kept as the server's JSON until a field is read (``Resource`` for kinds not
        Gryvia's: ``job.spec.parallelism``, ``job["spec"]``, ``job.to_dict()``), the fastest
        way to a few fields of every object."""
    def create(self, obj: Any) -> Any:
        """Creates an object (a ``Resource`` or a dict; the context's namespace when it names
        none); raises ``ConflictError`` when it exists."""
    def apply(self, obj: Any, force: bool = True, field_manager: Optional[str] = None) -> Any:
        """Server-side applies an object; ``force`` takes fields over from other managers."""
    def delete(self, kind: str, name: str, namespace: Optional[str] = None, api_version: Optional[str] = None) -> bool:
        """Deletes an object (background propagation); ``False`` when it did not exist."""
    def watch(
        self,
        kind: str,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        timeout: Optional[float] = None,
        dicts: Optional[bool] = None,
    ) -> Watch:
        """Watches a kind: iterate the result for ``WatchEvent``s (their objects as ``list``'s,
        by ``dicts``)."""
    def submit(self, job: Any, wait: bool = False, timeout: float = 600.0) -> _k.GryviaAIJob:
        """Submits a GryviaAIJob; with ``wait``, returns it once it Succeeded or Failed (check
        ``status.phase``); raises ``GryviaError`` after ``timeout`` seconds."""
    def wait_job(self, name: str, namespace: Optional[str] = None, timeout: float = 600.0) -> _k.GryviaAIJob:
        """Waits until the GryviaAIJob ``name`` Succeeded or Failed and returns it."""
    def install_crds(self, timeout: float = 60.0) -> List[str]:
        """Installs or updates every Gryvia CRD and waits until they are Established."""

class AsyncClient:
    """The asyncio twin of ``Client``: the same methods, each returning an awaitable
    (``watch`` returns an async iterator). Configuration and errors as ``Client``."""

    def __init__(
        self,
        kubeconfig: Optional[str] = None,
        context: Optional[str] = None,
        field_manager: Optional[str] = None,
    ) -> None: ...
    @property
    def namespace(self) -> str:
        """The namespace of the configuration's context."""
    # --- generated by gen_kinds.py: AsyncClient.get overloads ---
    @overload
    def get(
        self,
        kind: Literal["GryviaAIJob"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaAIJob]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaAutoPolicy"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaAutoPolicy]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaAutoTuner"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaAutoTuner]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaBudget"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaBudget]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaCollectorConfig"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaCollectorConfig]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFabricSignal"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaFabricSignal]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFlowAggregate"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaFlowAggregate]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaFlowPolicy"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaFlowPolicy]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaGpuNode"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaGpuNode]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaGpuSku"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaGpuSku]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaHealthCheck"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaHealthCheck]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaInferenceService"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaInferenceService]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaInvoice"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaInvoice]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaJobHook"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaJobHook]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaModelRegistry"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaModelRegistry]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetwork"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaNetwork]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkAnomaly"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaNetworkAnomaly]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkBaseline"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaNetworkBaseline]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaNetworkCost"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaNetworkCost]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaPriority"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaPriority]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaQueue"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaQueue]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaQuota"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaQuota]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaReservation"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaReservation]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaServiceGraph"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaServiceGraph]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaStorage"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaStorage]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTemplate"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaTemplate]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTenant"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaTenant]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaTrainingInsight"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaTrainingInsight]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaUsageRecord"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaUsageRecord]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaWorkflow"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaWorkflow]: ...
    @overload
    def get(
        self,
        kind: Literal["GryviaWorkspace"],
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[_k.GryviaWorkspace]: ...
    # --- end of generated AsyncClient.get overloads ---
    @overload
    def get(
        self,
        kind: str,
        name: str,
        namespace: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[bool] = None,
    ) -> Awaitable[Any]:
        """Reads one object; raises ``NotFoundError`` when it does not exist (``dicts`` as for
        ``Client.list``)."""
    # --- generated by gen_kinds.py: AsyncClient.list overloads ---
    @overload
    def list(
        self,
        kind: Literal["GryviaAIJob"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaAIJob]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaAutoPolicy"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaAutoPolicy]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaAutoTuner"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaAutoTuner]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaBudget"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaBudget]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaCollectorConfig"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaCollectorConfig]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFabricSignal"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaFabricSignal]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFlowAggregate"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaFlowAggregate]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaFlowPolicy"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaFlowPolicy]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaGpuNode"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaGpuNode]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaGpuSku"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaGpuSku]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaHealthCheck"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaHealthCheck]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaInferenceService"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaInferenceService]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaInvoice"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaInvoice]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaJobHook"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaJobHook]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaModelRegistry"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaModelRegistry]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetwork"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaNetwork]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkAnomaly"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaNetworkAnomaly]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkBaseline"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaNetworkBaseline]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaNetworkCost"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaNetworkCost]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaPriority"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaPriority]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaQueue"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaQueue]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaQuota"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaQuota]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaReservation"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaReservation]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaServiceGraph"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaServiceGraph]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaStorage"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaStorage]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTemplate"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaTemplate]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTenant"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaTenant]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaTrainingInsight"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaTrainingInsight]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaUsageRecord"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaUsageRecord]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaWorkflow"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaWorkflow]]: ...
    @overload
    def list(
        self,
        kind: Literal["GryviaWorkspace"],
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[Literal[False]] = None,
    ) -> Awaitable[List[_k.GryviaWorkspace]]: ...
    # --- end of generated AsyncClient.list overloads ---
    @overload
    def list(
        self,
        kind: str,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        dicts: Optional[bool] = None,
    ) -> Awaitable[List[Any]]:
        """Lists objects in ``namespace``, or in every namespace without one (``dicts`` as for
        ``Client.list``)."""
    def create(self, obj: Any) -> Awaitable[Any]:
        """Creates an object; raises ``ConflictError`` when it exists."""
    def apply(self, obj: Any, force: bool = True, field_manager: Optional[str] = None) -> Awaitable[Any]:
        """Server-side applies an object."""
    def delete(
        self, kind: str, name: str, namespace: Optional[str] = None, api_version: Optional[str] = None
    ) -> Awaitable[bool]:
        """Deletes an object; ``False`` when it did not exist."""
    def watch(
        self,
        kind: str,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        api_version: Optional[str] = None,
        timeout: Optional[float] = None,
        dicts: Optional[bool] = None,
    ) -> Watch:
        """Watches a kind: ``async for`` over the result for ``WatchEvent``s (``dicts`` as for
        ``Client.list``)."""
    def submit(self, job: Any, wait: bool = False, timeout: float = 600.0) -> Awaitable[_k.GryviaAIJob]:
        """Submits a GryviaAIJob; with ``wait``, the result is the finished job."""
    def wait_job(self, name: str, namespace: Optional[str] = None, timeout: float = 600.0) -> Awaitable[_k.GryviaAIJob]:
        """Waits until the GryviaAIJob ``name`` Succeeded or Failed."""
    def install_crds(self, timeout: float = 60.0) -> Awaitable[List[str]]:
        """Installs or updates every Gryvia CRD and waits until they are Established."""
