"""Admission: the per-model queue in front of the backend pool."""

from gateway.admission.queue import AdmissionQueue, Dispatcher, Lease, QueueCounters, Ticket
from gateway.admission.rejection import SDK_MAX_RETRY_AFTER, Rejected, RejectReason

__all__ = [
    "SDK_MAX_RETRY_AFTER",
    "AdmissionQueue",
    "Dispatcher",
    "Lease",
    "QueueCounters",
    "RejectReason",
    "Rejected",
    "Ticket",
]
