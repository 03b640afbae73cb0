"""A typed client for revenant's HTTP API (`revenant serve`).

    from revenant_client import Client, Worker, Permanent

    client = Client("http://127.0.0.1:8080", token=None)   # or $REVENANT_URL, $REVENANT_TOKEN
    client.enqueue("emails", "send_receipt", {"order": 42})

    def send_receipt(job):
        if "email" not in job.payload:
            raise Permanent("no email address")            # dead at once
        ...                                                 # any exception: retried

    Worker(client, "emails", {"send_receipt": send_receipt}).run()   # until SIGTERM

Standard library only. See README.md for the whole API.
"""

from .client import DEFAULT_TIMEOUT, DEFAULT_URL, Client
from .errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    ProtocolError,
    RevenantError,
    StoreError,
    StoreUnavailable,
    Unauthorized,
    Unreachable,
)
from .models import (
    Alerts,
    ClaimedJob,
    Dependency,
    Enqueued,
    ErrorEntry,
    FailResult,
    Fingerprint,
    Job,
    JobPage,
    Lease,
    LeaseRef,
    NewJob,
    PolicyList,
    PurgeResult,
    Queue,
    QueueHistoryPoint,
    QueueStats,
    RedriveRecord,
    RedriveResult,
    RetryPolicy,
    StoredPolicy,
    WorkerInfo,
)
from .worker import Handler, JobContext, Permanent, Retry, Snooze, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "Alerts",
    "ClaimedJob",
    "Client",
    "Conflict",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "Dependency",
    "Enqueued",
    "ErrorEntry",
    "FailResult",
    "Fingerprint",
    "Forbidden",
    "Handler",
    "InvalidRequest",
    "Job",
    "JobContext",
    "JobPage",
    "Lease",
    "LeaseLost",
    "LeaseRef",
    "NewJob",
    "NotFound",
    "PayloadTooLarge",
    "Permanent",
    "PolicyList",
    "ProtocolError",
    "PurgeResult",
    "Queue",
    "QueueHistoryPoint",
    "QueueStats",
    "RedriveRecord",
    "RedriveResult",
    "Retry",
    "RetryPolicy",
    "RevenantError",
    "Snooze",
    "StoreError",
    "StoreUnavailable",
    "StoredPolicy",
    "Unauthorized",
    "Unreachable",
    "Worker",
    "WorkerInfo",
    "WorkerStats",
    "__version__",
]
