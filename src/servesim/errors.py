"""Error types whose messages are shown to users as-is (the CLI prints them without a traceback).

Every message names where the problem is (file and line, or config key path), the value
found and what was expected.
"""

from __future__ import annotations


class ServesimError(Exception):
    """Base of all errors that are the user's input, not a servesim bug."""


class ConfigError(ServesimError):
    """A config key is unknown, has the wrong type or an impossible value."""


class WorkloadError(ServesimError):
    """A trace or workload description cannot be read."""


class ModelError(ServesimError):
    """A model architecture, GPU spec or deployment cannot be resolved or does not fit."""
