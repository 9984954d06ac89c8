"""Error types whose messages are shown to users as-is (the CLI prints them without a traceback).

Every message names where the problem is (file and line, or config key path), the value
found and what was expected.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to ``word``, or ``""``."""
    if not isinstance(word, str):
        return ""
    choices = [str(c) for c in choices]
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not close and word.lower() != word:
        close = [c for c in choices if c.lower() == word.lower()][:1]
    return f" (did you mean {close[0]!r}?)" if close else ""


class ServesimError(Exception):
    """Base of all errors that are the user's input, not a servesim bug."""


class ConfigError(ServesimError):
    """A config key is unknown, has the wrong type or an impossible value."""


class WorkloadError(ServesimError):
    """A trace or workload description cannot be read."""


class ModelError(ServesimError):
    """A model architecture, GPU spec or deployment cannot be resolved or does not fit."""
