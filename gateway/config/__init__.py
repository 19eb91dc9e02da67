"""Typed configuration, parsed once from a mapping (a YAML file or CLI flags) and validated.

Every problem is collected, not just the first, so `llm-gateway check-config` can print one line each.
Secrets never need to live in the file: any `api_key` may be given as `api_key_env: NAME` instead.
Every number must be finite and in its range (see gateway.config.reader). Each section has its
module here, holding its dataclass (whose field defaults are the only place each default is written)
and its parser; `root` puts them together.
"""

from gateway.config.backends import MAX_CONCURRENCY, BackendConfig
from gateway.config.control import DEFAULT_SLA, ControllerConfig, QueueConfig
from gateway.config.errors import ConfigError
from gateway.config.root import GatewayConfig, parse_config
from gateway.config.routing import RoutingConfig
from gateway.config.state import StateConfig
from gateway.config.tenants import MAX_PRIORITY, MIN_PRIORITY, TenantConfig
from gateway.config.upstream import CREDENTIAL_HEADERS, HeaderConfig, HealthConfig, TimeoutConfig
from gateway.config.yaml_file import load_config, read_mapping

__all__ = [
    "CREDENTIAL_HEADERS",
    "DEFAULT_SLA",
    "MAX_CONCURRENCY",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "BackendConfig",
    "ConfigError",
    "ControllerConfig",
    "GatewayConfig",
    "HeaderConfig",
    "HealthConfig",
    "QueueConfig",
    "RoutingConfig",
    "StateConfig",
    "TenantConfig",
    "TimeoutConfig",
    "load_config",
    "parse_config",
    "read_mapping",
]
