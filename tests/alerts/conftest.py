"""Fixtures for the alerting tests: real Prometheus and Alertmanager servers (see prom.py)."""

from prom import alertmanager_server, prometheus_server

__all__ = ["alertmanager_server", "prometheus_server"]
