"""Admission: the per-model queue in front of the backend pool."""

from gateway.admission.queue import AdmissionQueue, QueueCounters
from gateway.admission.rejection import SDK_MAX_RETRY_AFTER, Rejected, RejectReason
from gateway.admission.ticket import Releasable, SlotSource, Ticket

__all__ = [
    "SDK_MAX_RETRY_AFTER",
    "AdmissionQueue",
    "QueueCounters",
    "RejectReason",
    "Rejected",
    "Releasable",
    "SlotSource",
    "Ticket",
]
