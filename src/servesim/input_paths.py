"""Where a file named in a config is looked for (docs/config.md "Paths").

A config's trace is always relative to the config file's folder (``workload/source.py``).  The
other files it may name by a path (a model's config.json, a GPU spec, a calibration) are looked
for beside the config file first, then as given: relative to the working directory, or a
bundled name.  So a config and the files it reads travel together, and a name typed on the
command line still works.  (A module of its own, below every package that resolves such a path.)
"""

from __future__ import annotations

from pathlib import Path


def input_path(value: str, base_dir: Path | None) -> str:
    """``value`` beside the config file (``base_dir``) when it is a relative path that exists
    there, else ``value`` unchanged."""
    path = Path(value).expanduser()
    if base_dir is not None and not path.is_absolute() and (Path(base_dir) / path).exists():
        return str(Path(base_dir) / path)
    return value
