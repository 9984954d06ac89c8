"""Measured benchmark points (the ``calibration.csv`` schema) and the servesim config of each.

One CSV row is one serving benchmark on real GPUs (see ``shared/data/measured/README.md``).
:func:`point_config` turns a row into a servesim config dict, or says why servesim cannot
simulate it (``unsupported: <reason>``).  This module reads, samples and splits the rows and
builds the config's deployment and workload; each engine's flags and KV precision, as the row's
campaign set them, come from :mod:`servesim.validate.recipes` (one module per engine).  The mapping:

- ``model``: the Hugging Face id as written (servesim bundles every id in calibration.csv);
- ``system`` → ``deployment.gpu`` (bundled GPU names are the same strings);
- ``backend`` → ``deployment.engine.name`` (vllm, sglang, trtllm); ``atom`` (AMD's ROCm engine,
  built like nano-vLLM: prefill-first passes that do not mix with decode, preemption on
  memory) is modelled by the closest scheduler, SGLang's, with ATOM's defaults
  (``recipes.rows.BACKEND_AS_ENGINE``); its calibration group is ``<gpu>/atom`` (:attr:`Point.group`);
- ``precision`` → ``weight_dtype`` (empty: bf16); ``kv_dtype`` is fp8 where the point's server
  flags set fp8 KV: vLLM runs used ``--kv-cache-dtype fp8`` (README) and TRT-LLM quantized
  checkpoints carry an fp8 KV cache; SGLang: fp8 for fp8/fp4 checkpoints on Blackwell (the
  InferenceX launch scripts pass ``--kv-cache-dtype fp8_e4m3`` there), else ``auto`` (bf16,
  but fp8 for sparse-attention models on compute capability ≥ 10, as SGLang itself decides);
- layout: ``tp`` = the worker's GPUs (attention_tp × attention_dp), ``ep`` = moe_ep (1 for
  dense models); with attention data parallelism (attention_dp > 1), ``tp`` = attention_tp
  and ``deployment.attention_dp`` = attention_dp (the worker still has ``gpus`` GPUs);
- workload: ``closed_loop`` with recipe ``inferencex_random`` (num_prompts, concurrency,
  isl, osl, range_ratio, warm-up 2 × concurrency) or ``fixed`` for
  ``fixed_lengths_unverified`` (for the campaigns ``recipes.prompt_pool.reuses_prompt_pool`` names, an AIPerf
  client: 100 prompts reused (shuffled), 20 × / 2 × concurrency measured / warm-up requests,
  the engine's prefix cache on);
- engine flags as the README documents them (vLLM max_num_seqs = concurrency,
  max_num_batched_tokens 8192, no prefix caching, gpu_memory_utilization 0.9, or for rows the
  InferenceX launch scripts ran, each family's flags from its script at the row's date
  (``recipes/vllm.py``); SGLang radix cache off, chunked prefill and max prefill
  tokens 32768, mem_fraction_static 0.82, max_running_requests for DeepSeek, and the InferenceX
  DeepSeek scripts' flags on Blackwell and H200 (``recipes/sglang.py``); TRT-LLM:
  for rows the InferenceX launch scripts ran,
  each model family's flags from its script (max_num_tokens, max_batch_size,
  free_gpu_memory_fraction, batch waiting, block reuse off; ``recipes/trtllm.py``),
  otherwise max_batch_size = concurrency and max_num_tokens = isl + osl + 200; with attention
  DP the scripts' ADP balance, ``attention_dp_config`` — see ``recipes.engine_options``);
- speculative decoding: DeepSeek TensorRT-LLM rows InferenceX's MTP configs ran (the days it swept
  only them, or outside the plain config's search space on days it swept both) run MTP
  (``deployment.speculative``) with the MTP scripts' flags (``recipes.trtllm.inferencex_mtp_sweep``).
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError
from servesim.validate.recipes import engine_options, kv_dtype
from servesim.validate.recipes.prompt_pool import (AIPERF_DATASET_ENTRIES, AIPERF_POOL_SAMPLING, reuses_prompt_pool,
                                                   turn_prefix_cache_on)
from servesim.validate.recipes.rows import BACKEND_AS_ENGINE, SYSTEM_TO_GPU, row_int, worker_gpus
from servesim.validate.recipes.trtllm import INFERENCEX_MTP_ACCEPTANCE, inferencex_mtp_sweep, mtp_draft_tokens

if TYPE_CHECKING:
    from servesim.perf.calibration import Calibration

#: The columns a points file must have.
REQUIRED_COLUMNS = ("id", "model", "system", "backend", "precision", "gpus", "attention_tp", "attention_dp",
                    "moe_tp", "moe_ep", "concurrency", "isl", "osl", "workload", "measured_mean_ttft_ms",
                    "measured_mean_tpot_ms")

ENGINES = ("sglang", "vllm", "trtllm")
UNSUPPORTED_BACKENDS: dict[str, str] = {}
#: Output-length spread (``workload.output_spread``) of the ``fixed_lengths_unverified`` vLLM rows.
#: Lockstep (exact lengths) over-predicts their TTFT for every model (median +36% on the fit rows), and
#: one row is measured below any lockstep schedule (Qwen3-32B H100 tp 8 c16 1024/1024: 101 ms measured,
#: >= 102 ms for two 8,192-token prefill passes at 100% of peak): their requests were desynchronised by
#: something the rows do not record.  A 2% spread of output lengths desynchronises the simulated loop
#: alike.  Chosen on the fit split (TTFT MAPE of those rows 61% -> 36%; 1% gave 37%, 4% 36% with a
#: larger negative bias; spreading inputs alone changed nothing).  SGLang's fixed rows keep exact
#: lengths: their measured TTFTs need the lockstep waves (Qwen3-32B H100: 12% MAPE in lockstep, 61% with
#: the spread); TensorRT-LLM's, which the spread leaves about where they were (fit split TTFT MAPE 95% ->
#: 96%), too (docs/validation.md).  The rows of :func:`reuses_prompt_pool` (among them the H200 vLLM
#: 0.12.0 rows counted in those figures) run an AIPerf prompt pool instead, without the spread.
FIXED_VLLM_OUTPUT_SPREAD = 0.02


@dataclass
class Point:
    """One measured point: the CSV row, and its servesim config or why there is none."""

    row: dict[str, str]
    config: dict[str, Any] | None
    status: str  # "ok" (simulable) or "unsupported: <reason>"
    notes: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.row["id"]

    @property
    def backend(self) -> str:
        """The measured server (``atom`` stays ``atom``)."""
        return (self.row.get("backend") or "").strip().lower()

    @property
    def engine(self) -> str:
        """The servesim engine model that simulates it (``atom`` → ``sglang``)."""
        return BACKEND_AS_ENGINE.get(self.backend, self.backend)

    @property
    def gpu(self) -> str:
        return self.row["system"]

    @property
    def group(self) -> str:
        """Calibration group key ``<gpu>/<backend>``: the measured server, not the model that
        simulates it.  ATOM rows fit a group of their own: ATOM prefills several times faster
        than SGLang on the same MI355X, and one shared group pulled SGLang's TTFT down by ~75%."""
        return f"{self.gpu}/{self.backend}"

    @property
    def client(self) -> str:
        """The client profile the row was measured with (from its ``source``:
        :func:`servesim.perf.clients.client_for_source`)."""
        from servesim.perf.clients import client_for_source

        return client_for_source(self.row.get("source") or "")

    def calibration_values(self, cal: Calibration) -> tuple[dict[str, Any], dict[str, Any]]:
        """(analytic, frontend) overrides ``cal`` gives this point: its groups are keyed by
        the measured server, as :attr:`group` is (one place for validate, sensitivity and CV);
        the client-side frontend fields are the row's client profile's (:attr:`client`)."""
        from servesim.perf.clients import resolve_client

        analytic, frontend = cal.resolve(self.gpu, self.backend, self.model, self.precision)
        return analytic, frontend | resolve_client(self.client, cal.clients).frontend()

    @property
    def model(self) -> str:
        return self.row["model"]

    @property
    def precision(self) -> str:
        """Weight precision as the row writes it (empty → bf16)."""
        return (self.row.get("precision") or "").strip().lower() or "bf16"

    @property
    def measured_ttft_ms(self) -> float:
        return float(self.row["measured_mean_ttft_ms"])

    @property
    def measured_tpot_ms(self) -> float:
        return float(self.row["measured_mean_tpot_ms"])

    @property
    def concurrency(self) -> int:
        return int(self.row["concurrency"])

    @property
    def layout(self) -> tuple[int, int]:
        if self.config is None:
            return int(self.row.get("gpus") or 0), int(self.row.get("moe_ep") or 1)
        d = self.config["deployment"]
        return d["tp"], d["ep"]


def read_points(path: str | Path) -> list[dict[str, str]]:
    """The rows of a measured-points CSV; a missing file or column is a ConfigError."""
    p = Path(path)
    try:
        with p.open(newline="") as f:
            reader = csv.DictReader(f)
            cols = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in cols]
            if missing:
                raise ConfigError(f"{p}: missing column(s) {', '.join(missing)}; expected the calibration.csv schema")
            rows = list(reader)
    except OSError as e:
        raise ConfigError(f"--points: cannot read {str(p)!r} ({e.strerror or e})") from None
    for i, r in enumerate(rows, start=2):
        for c in ("measured_mean_ttft_ms", "measured_mean_tpot_ms", "concurrency", "isl", "osl"):
            try:
                value = float(r[c])
            except (TypeError, ValueError):
                value = math.nan
            if not (math.isfinite(value) and value > 0):  # errors are relative to the measured values
                raise ConfigError(f"{p}, line {i}: column {c} must be a number > 0 (found {r[c]!r})")
    return rows


def sample_rows(rows: list, n: int | None, seed: int = 0) -> list:
    """``n`` rows picked deterministically (seeded), kept in file order; all rows if n is None."""
    if n is None or n >= len(rows):
        return list(rows)
    if n <= 0:
        raise ConfigError(f"--sample: expected a positive number of points (found {n})")
    keep = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def _is_moe(model: str) -> bool | None:
    try:
        from servesim.models.arch import load_model

        return bool(load_model(model).is_moe)
    except Exception:  # unknown model: found when the config is built
        return None


def point_config(row: dict[str, str], mode: str = "fast") -> Point:
    """The servesim config of one measured point (output off), or why it is unsupported."""
    notes: list[str] = []
    backend = (row.get("backend") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    if backend in UNSUPPORTED_BACKENDS:
        return Point(row, None, f"unsupported: {UNSUPPORTED_BACKENDS[backend]}")
    if backend not in ENGINES and backend not in BACKEND_AS_ENGINE:
        return Point(row, None, f"unsupported: backend {backend or '(empty)'}")
    if system not in SYSTEM_TO_GPU:
        return Point(row, None, f"unsupported: system {system or '(empty)'}")
    if (row.get("mode") or "agg") != "agg" or row_int(row, "pp") != 1:
        return Point(row, None, "unsupported: only aggregated pp=1 points")
    precision = (row.get("precision") or "").strip().lower() or "bf16"
    if precision not in ("bf16", "fp8", "fp4", "int4"):
        return Point(row, None, f"unsupported: precision {precision}")
    atp, adp = row_int(row, "attention_tp"), row_int(row, "attention_dp")
    gpus = worker_gpus(row)
    ep = row_int(row, "moe_ep")
    moe = _is_moe(row["model"])
    if moe is False and ep > 1:
        notes.append(f"dense model: moe_ep={ep} ignored (ep=1)")
        ep = 1
    deployment: dict[str, Any] = {
        "model": row["model"],
        "gpu": SYSTEM_TO_GPU[system],
        "engine": engine_options(backend, row),
        "tp": gpus,
        "ep": ep,
        "weight_dtype": precision,
        "kv_dtype": kv_dtype(backend, row, SYSTEM_TO_GPU[system]),
    }
    if adp > 1:
        from servesim.config.schema import DeploymentConfig

        if "attention_dp" not in DeploymentConfig.model_fields:
            return Point(row, None, "unsupported: attention dp (attention_dp > 1 needs deployment.attention_dp)")
        deployment["tp"] = atp
        deployment["attention_dp"] = adp
    if inferencex_mtp_sweep(row) is not None:
        k = mtp_draft_tokens(row)
        deployment["speculative"] = {"method": "mtp", "draft_tokens": k, "acceptance_rate": INFERENCEX_MTP_ACCEPTANCE}
        notes.append(f"InferenceX MTP sweep: {k} draft token(s), acceptance {INFERENCEX_MTP_ACCEPTANCE:g} per position")
    conc = row_int(row, "concurrency")
    workload: dict[str, Any] = {"kind": "closed_loop", "concurrency": conc, "isl": row_int(row, "isl"),
                                "osl": row_int(row, "osl")}
    if row.get("workload") == "inferencex_random":
        workload.update(recipe="inferencex_random", range_ratio=float(row.get("range_ratio") or 0.8),
                        num_prompts=row_int(row, "num_prompts", 10 * conc), warmup=2 * conc)
    elif reuses_prompt_pool(row):
        workload.update(recipe="fixed", num_prompts=row_int(row, "num_prompts", 20 * conc), warmup=2 * conc,
                        prompt_pool=AIPERF_DATASET_ENTRIES, pool_sampling=AIPERF_POOL_SAMPLING)
        turn_prefix_cache_on(deployment["engine"])
        notes.append(f"fixed lengths; AIPerf client assumed: {AIPERF_DATASET_ENTRIES} prompts reused "
                     f"({AIPERF_POOL_SAMPLING}), {workload['num_prompts']} requests after {2 * conc} warm-up, "
                     "prefix cache on")
    elif row.get("workload") == "fixed_lengths_unverified":
        workload.update(recipe="fixed", num_prompts=row_int(row, "num_prompts", 10 * conc), warmup=conc)
        notes.append("fixed lengths; client settings undocumented (warm-up assumed = concurrency)")
        if backend == "vllm":
            workload["output_spread"] = FIXED_VLLM_OUTPUT_SPREAD
            notes.append(f"vLLM: output lengths uniform on [floor({1 - FIXED_VLLM_OUTPUT_SPREAD:g} x osl), osl]")
    else:
        return Point(row, None, f"unsupported: workload {row.get('workload')!r}")
    config = {
        "seed": 0,
        "workload": workload,
        "deployment": deployment,
        "output": {"dir": None, "requests": False, "timeseries": False},
        "simulation": {"mode": mode},
    }
    return Point(row, config, "ok", notes)


#: Share of rows in the ``fit`` part of :func:`split_rows` (the rest is ``holdout``).
FIT_FRACTION = 0.6


def in_fit_part(point_id: str, fit_fraction: float = FIT_FRACTION) -> bool:
    """Deterministic fit/held-out assignment of a point from its id (SHA-256, stable across runs)."""
    import hashlib

    h = int(hashlib.sha256(point_id.encode()).hexdigest(), 16)
    return (h % 10) < round(fit_fraction * 10)


def split_rows(rows: list[dict[str, str]], part: str | None) -> list[dict[str, str]]:
    """``part`` ``fit`` (~60% of rows, by id hash), ``holdout`` (the other ~40%) or None (all)."""
    if part is None:
        return list(rows)
    if part not in ("fit", "holdout"):
        raise ConfigError(f"--split: expected 'fit' or 'holdout' (found {part!r})")
    want = part == "fit"
    return [r for r in rows if in_fit_part(r["id"]) == want]


def load_points(path: str | Path, sample: int | None = None, seed: int = 0, split: str | None = None) -> list[Point]:
    return [point_config(r) for r in sample_rows(split_rows(read_points(path), split), sample, seed)]
