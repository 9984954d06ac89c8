"""Helpers for the validate tests' sensitivity tables."""

from __future__ import annotations

from pathlib import Path


def drop_columns(path: Path, names: tuple[str, ...]) -> list[str]:
    """Rewrite the CSV at ``path`` without the columns ``names`` (a table written before a knob
    existed); returns the file's lines as they were."""
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    drop = {header.index(n) for n in names}
    path.write_text("\n".join(",".join(v for i, v in enumerate(line.split(",")) if i not in drop)
                              for line in lines) + "\n")
    return lines
