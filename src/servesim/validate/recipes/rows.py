"""Reading a ``calibration.csv`` row, shared by every engine's recipe module.

The row's servesim names (:data:`SYSTEM_TO_GPU`, :data:`BACKEND_AS_ENGINE`), its integer
columns with their defaults (:func:`row_int`), the worker's GPU count the launch scripts call
TP (:func:`worker_gpus`), and whether InferenceX's launch scripts ran it
(:func:`from_inferencex`, which decides whether their flags apply).  Kept apart so that the
engine modules (``vllm.py``, ``sglang.py``, ``trtllm.py``) and ``validate/points.py`` read a row
the same way without importing one another.
"""

from __future__ import annotations

SYSTEM_TO_GPU = {
    "h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm", "b300_sxm": "b300_sxm",
    "gb200": "gb200", "gb300": "gb300", "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x",
}

#: Backends simulated by another engine's scheduler model (see ``validate/points.py``'s docstring).
BACKEND_AS_ENGINE = {"atom": "sglang"}

#: Sources whose rows the InferenceX launch scripts ran (calibration.csv ``source``).
INFERENCEX_SOURCES = ("aic_silicon_sample/inferencex", "inferencex_fixture")


def row_int(row: dict, key: str, default: int = 1) -> int:
    """An integer column (written ``8`` or ``8.0``); ``default`` where the cell is empty or absent."""
    v = row.get(key, "")
    return int(float(v)) if v not in ("", None) else default


def worker_gpus(row: dict[str, str]) -> int:
    """The worker's GPUs (the launch scripts' TP): ``gpus``, else attention tp x dp."""
    return row_int(row, "gpus", row_int(row, "attention_tp") * row_int(row, "attention_dp"))


def from_inferencex(row: dict[str, str]) -> bool:
    """The row was run by InferenceX's launch scripts (so their flags apply)."""
    return (row.get("source") or "").strip() in INFERENCEX_SOURCES
