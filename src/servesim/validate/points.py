"""Measured benchmark points (the ``calibration.csv`` schema) and the servesim config of each.

One CSV row is one serving benchmark on real GPUs (see ``shared/data/measured/README.md``).
:func:`point_config` turns a row into a servesim config dict, or says why servesim cannot
simulate it (``unsupported: <reason>``).  The mapping:

- ``model``: the Hugging Face id as written (servesim bundles every id in calibration.csv);
- ``system`` → ``deployment.gpu`` (bundled GPU names are the same strings);
- ``backend`` → ``deployment.engine.name`` (vllm, sglang, trtllm); ``atom`` (AMD's ROCm engine,
  built like nano-vLLM: prefill-first passes that do not mix with decode, preemption on
  memory) is modelled by the closest scheduler, SGLang's, with ATOM's defaults
  (:data:`BACKEND_AS_ENGINE`); its calibration group is ``<gpu>/atom`` (:attr:`Point.group`);
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
  ``fixed_lengths_unverified`` (for the campaigns :func:`reuses_prompt_pool` names, an AIPerf
  client: 100 prompts reused (shuffled), 20 × / 2 × concurrency measured / warm-up requests,
  the engine's prefix cache on);
- engine flags as the README documents them (vLLM max_num_seqs = concurrency,
  max_num_batched_tokens 8192, no prefix caching, gpu_memory_utilization 0.9, or for rows the
  InferenceX launch scripts ran, each family's flags from its script at the row's date
  (:func:`vllm_inferencex_options`); SGLang radix cache off, chunked prefill and max prefill
  tokens 32768, mem_fraction_static 0.82, max_running_requests for DeepSeek, and the InferenceX
  DeepSeek scripts' flags on Blackwell and H200 (:func:`_sglang_deepseek_script_flags`); TRT-LLM:
  for rows the InferenceX launch scripts ran,
  each model family's flags from its script (max_num_tokens, max_batch_size,
  free_gpu_memory_fraction, batch waiting, block reuse off; :func:`trtllm_inferencex_options`),
  otherwise max_batch_size = concurrency and max_num_tokens = isl + osl + 200; with attention
  DP the scripts' ADP balance, ``attention_dp_config`` — see :func:`engine_options`);
- speculative decoding: DeepSeek TensorRT-LLM rows InferenceX's MTP configs ran (the days it swept
  only them, or outside the plain config's search space on days it swept both) run MTP
  (``deployment.speculative``) with the MTP scripts' flags (:func:`inferencex_mtp_sweep`).
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servesim.errors import ConfigError
from servesim.hardware import load_gpu

if TYPE_CHECKING:
    from servesim.perf.calibration import Calibration

#: The columns a points file must have.
REQUIRED_COLUMNS = ("id", "model", "system", "backend", "precision", "gpus", "attention_tp", "attention_dp",
                    "moe_tp", "moe_ep", "concurrency", "isl", "osl", "workload", "measured_mean_ttft_ms",
                    "measured_mean_tpot_ms")

SYSTEM_TO_GPU = {
    "h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm", "b300_sxm": "b300_sxm",
    "gb200": "gb200", "gb300": "gb300", "mi300x": "mi300x", "mi325x": "mi325x", "mi355x": "mi355x",
}
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

#: Backends simulated by another engine's scheduler model (see module docstring).
BACKEND_AS_ENGINE = {"atom": "sglang"}

#: Distinct prompts an AIPerf client sends unless told otherwise: its synthetic dataset has
#: ``--num-dataset-entries`` = 100 entries by default (``ConversationDefaults.NUM`` in
#: ai-dynamo/aiperf), and the requests repeat them until the run ends.
AIPERF_DATASET_ENTRIES = 100
#: How AIPerf picks those entries (``--dataset-sampling-strategy``): ``shuffle``, its default for
#: synthetic data (the option's help text).  The option is not in AIPerf's tree of 2025-10-10, whose
#: releases drew uniformly with replacement; which AIPerf the runs used is not recorded, and the two fit
#: alike (docs/validation.md).
AIPERF_POOL_SAMPLING = "shuffle"
#: Each engine's prefix-cache flag and the value that keeps the cache on: a prompt-pool point drops
#: the flag (:func:`_prefix_cache_on`), :func:`prefix_caching` reads it.
PREFIX_CACHE_FLAGS = {"vllm": ("enable_prefix_caching", True), "sglang": ("disable_radix_cache", False),
                      "trtllm": ("enable_block_reuse", True)}
#: ``(system, backend, backend_version)`` of the ``fixed_lengths_unverified`` campaigns whose
#: measured TTFTs need prompt reuse (:func:`reuses_prompt_pool`).
PROMPT_POOL_CAMPAIGNS = frozenset({("h200_sxm", "vllm", "0.12.0"), ("h200_sxm", "sglang", "0.5.6.post2")})

#: InferenceX sweeps that ran only the DeepSeek-R1 TensorRT-LLM MTP configs, keyed by
#: ``(system, precision, measured_date)``; the value names the launch-script version
#: (:func:`trtllm_mtp_options`).  InferenceX's ``perf-changelog.yaml`` lists the config keys
#: each change sweeps: PR 392 (merged 2026-01-14) added ``dsr1-fp4-b200-trt-mtp``,
#: ``dsr1-fp8-b200-trt-mtp`` and ``dsr1-fp8-h200-trt-mtp`` and swept only them; PR 632
#: (2026-02-05) only ``dsr1-fp8-b200-trt-mtp`` and PR 642 (2026-02-06) only
#: ``dsr1-fp4-b200-trt-mtp``, both moving them to TensorRT-LLM 1.2.0rc6.post3 while the plain
#: configs stayed on 1.2.0rc6.post2.  The rows of those dates are speculative runs the source did
#: not flag (the measured README allows that "a few" are): at c4 their TPOT is half that of the
#: plain runs of the same layout.  Sweeps that ran both kinds are :data:`INFERENCEX_MIXED_MTP_SWEEPS`.
INFERENCEX_TRTLLM_MTP_SWEEPS: dict[tuple[str, str, str], str] = {
    ("b200_sxm", "fp4", "2026-01-14"): "pr392",
    ("b200_sxm", "fp8", "2026-01-14"): "pr392",
    ("h200_sxm", "fp8", "2026-01-14"): "pr392",
    ("b200_sxm", "fp8", "2026-02-05"): "pr632",
    ("b200_sxm", "fp4", "2026-02-06"): "pr642",
}
#: InferenceX sweeps that ran a plain DeepSeek TensorRT-LLM config and its MTP twin on the same day,
#: keyed by ``(system, precision, measured_date)``: the plain config's search space as
#: ``(isl, osl, tp, ep, attention_dp on, lowest, highest concurrency)`` entries
#: (``.github/configs/nvidia-master.yaml`` of that date), and the MTP script version.  A row the
#: plain config could not have produced is an MTP run; the rest stay plain (ambiguous).  The full
#: sweep of 2026-01-28 (PR 587) ran ``dsr1-fp8-h200-trt`` and ``-trt-mtp``.  The image updates of
#: 2026-05-18 (PRs 1487-1489) ran each DeepSeek TRT-LLM config with its MTP twin too, but their rows
#: lie inside the plain search spaces (and are ``confirmed: no speculative decoding``), so they are
#: not listed.  Only TensorRT-LLM's MTP is mapped (:func:`mtp_draft_tokens`).  (SGLang's image update
#: of 2026-03-25, PR 943, likewise ran ``dsr1-fp8-b200-sglang`` and ``-sglang-mtp``, and five B200
#: SGLang rows lie outside the plain config's space; they stay plain: servesim's speculative model
#: matches their TPOT only at an acceptance below 0.3, docs/validation.md.)
INFERENCEX_MIXED_MTP_SWEEPS: dict[tuple[str, str, str], tuple[tuple[tuple[int, ...], ...], str]] = {
    ("h200_sxm", "fp8", "2026-01-28"): (
        ((1024, 1024, 8, 8, 0, 4, 64), (1024, 8192, 8, 8, 0, 4, 64), (8192, 1024, 8, 8, 0, 4, 32),
         (8192, 1024, 8, 8, 1, 64, 64)), "pr392"),
}
#: Conditional acceptance of each MTP draft position for those runs (``acceptance_rate``: the same
#: at every position).  Fitted on the fit split's MTP rows (docs/validation.md); DeepSeek-V3's
#: report gives 85-90% for its one MTP module's token.
INFERENCEX_MTP_ACCEPTANCE = 0.7


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


def _int(row: dict, key: str, default: int = 1) -> int:
    v = row.get(key, "")
    return int(float(v)) if v not in ("", None) else default


def _is_moe(model: str) -> bool | None:
    try:
        from servesim.models.arch import load_model

        return bool(load_model(model).is_moe)
    except Exception:  # unknown model: found when the config is built
        return None


def _engine_fields(name: str) -> set[str] | None:
    """The option names an engine's options class accepts (None: engine not in this build)."""
    import importlib

    mod, cls = {"sglang": ("servesim.engines.sglang.options", "SGLangOptions"),
                "vllm": ("servesim.engines.vllm.options", "VLLMOptions"),
                "trtllm": ("servesim.engines.trtllm.options", "TRTLLMOptions")}[name]
    try:
        klass = getattr(importlib.import_module(mod), cls)
    except (ImportError, AttributeError):
        return None
    return set(klass.model_fields)


#: Sources whose rows the InferenceX launch scripts ran (calibration.csv ``source``).
INFERENCEX_SOURCES = ("aic_silicon_sample/inferencex", "inferencex_fixture")


def _from_inferencex(row: dict[str, str]) -> bool:
    """The row was run by InferenceX's launch scripts (so their flags apply)."""
    return (row.get("source") or "").strip() in INFERENCEX_SOURCES


def reuses_prompt_pool(row: dict[str, str]) -> bool:
    """Whether a ``fixed_lengths_unverified`` row is simulated with an AIPerf client reusing
    :data:`AIPERF_DATASET_ENTRIES` prompts against a prefix cache left at its default (on).

    AIConfigurator's benchmark template (``bench_run.sh.j2`` in the aisimulate wheel) drives its
    runs with AIPerf (``--num-requests 20c``, ``--warmup-request-count 2c``, no
    ``--num-dataset-entries``), so 100 distinct prompts serve every request, and the engines'
    defaults keep a prefix cache (vLLM V1, SGLang's radix cache, TensorRT-LLM block reuse).
    Two kinds of rows show it, each in a way no schedule without cache hits allows:

    * runs from NVIDIA's Dynamo images (``image`` names ``ai-dynamo``): Qwen3-32B-NVFP4 on two
      GB200s at c448, 15,000-token prompts, measures 0.97 s TTFT and 13 ms TPOT, i.e. ~60
      requests/s, ~58 PFLOP/s of prefill without reuse, several times the two GPUs' peak;
    * the H200 campaign of SGLang 0.5.6.post2 and vLLM 0.12.0: Llama-3.1-8B-FP8 at c112
      1000/100 measures 72 ms TTFT with 11 ms TPOT, ~90% of the H200's fp8 peak spent on prefill
      alone without reuse; the Llama-3.1-8B SGLang rows sit 2-4x under any lockstep schedule
      (the campaign's Qwen3-235B rows fit either way).

    Chosen on the fit rows (docs/validation.md); the other campaigns (H100, Kimi-K2.5) fit their
    recipes without reuse and keep them.
    """
    if row.get("workload") != "fixed_lengths_unverified":
        return False
    if "ai-dynamo" in (row.get("image") or ""):
        return True
    key = ((row.get("system") or "").strip().lower(), (row.get("backend") or "").strip().lower(),
           (row.get("backend_version") or "").strip())
    return key in PROMPT_POOL_CAMPAIGNS


def _prefix_cache_on(engine: dict[str, Any]) -> None:
    """Drop the flags that turn the prefix cache off (the README's typical flags set them), so
    each engine keeps its default: vLLM V1 prefix caching, SGLang's radix cache and TensorRT-LLM
    block reuse are all on unless told otherwise."""
    for flag, _ in PREFIX_CACHE_FLAGS.values():
        engine.pop(flag, None)


def prefix_caching(engine: dict[str, Any]) -> bool:
    """Whether a point's engine section leaves a prefix cache on; an unset flag takes the default
    of servesim's engine options (the engines' own defaults)."""
    from servesim.engines.sglang.options import SGLangOptions
    from servesim.engines.trtllm.options import TRTLLMOptions
    from servesim.engines.vllm.options import VLLMOptions

    name = engine["name"]
    if name not in PREFIX_CACHE_FLAGS:
        raise ValueError(f"no prefix-cache rule for engine {name!r}")
    options = {"vllm": VLLMOptions, "sglang": SGLangOptions, "trtllm": TRTLLMOptions}[name]
    flag, on = PREFIX_CACHE_FLAGS[name]
    return bool(engine.get(flag, options.model_fields[flag].default)) == on


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _worker_gpus(row: dict[str, str]) -> int:
    """The worker's GPUs (the launch scripts' TP): ``gpus``, else attention tp x dp."""
    return _int(row, "gpus", _int(row, "attention_tp") * _int(row, "attention_dp"))


def inferencex_mtp_sweep(row: dict[str, str]) -> str | None:
    """The MTP launch-script version that ran this row, or None: a DeepSeek TensorRT-LLM row of an
    MTP-only sweep (:data:`INFERENCEX_TRTLLM_MTP_SWEEPS`) or one outside the plain config's search
    space in a sweep that ran both (:data:`INFERENCEX_MIXED_MTP_SWEEPS`); never a row the source
    confirms was not speculative."""
    if "deepseek" not in row["model"].lower() or not _from_inferencex(row):
        return None
    if (row.get("backend") or "").strip().lower() != "trtllm":
        return None
    if (row.get("quality") or "").strip() == "confirmed: no speculative decoding":
        return None
    key = ((row.get("system") or "").strip().lower(), (row.get("precision") or "").strip().lower(),
           (row.get("measured_date") or "").strip())
    if key in INFERENCEX_TRTLLM_MTP_SWEEPS:
        return INFERENCEX_TRTLLM_MTP_SWEEPS[key]
    mixed = INFERENCEX_MIXED_MTP_SWEEPS.get(key)
    if mixed is None:
        return None
    plain_space, version = mixed
    layout = (_int(row, "isl"), _int(row, "osl"), _worker_gpus(row), _int(row, "moe_ep"),
              int(_int(row, "attention_dp") > 1))
    conc = _int(row, "concurrency")
    if any(entry[:5] == layout and entry[5] <= conc <= entry[6] for entry in plain_space):
        return None
    return version


def mtp_draft_tokens(row: dict[str, str]) -> int:
    """``num_nextn_predict_layers`` of the TensorRT-LLM MTP scripts: 3, or 1 with attention DP."""
    return 1 if _int(row, "attention_dp") > 1 else 3


def trtllm_mtp_options(row: dict[str, str], version: str) -> dict[str, Any]:
    """TRT-LLM flags of InferenceX's DeepSeek-R1 MTP launch scripts (``dsr1_*_trt_mtp*.sh``).

    Every version: ``--max_batch_size`` = CONC without attention DP (with it, each rank's limit as
    below), ``--max_num_tokens`` = ((MTP + 1) × max_batch_size + ISL + 64) rounded up to 64, block
    reuse off, no batch waiting.
    With attention DP: PR 392's scripts (2026-01-14) give each rank CONC / TP requests; PR 632's
    fp8 B200 script CONC / 8 (CONC below 8: CONC) and a 0.7 memory fraction; PR 642's fp4 B200
    script CONC / 4 (CONC below 4: CONC).  Memory fraction 0.8, 0.75 on H200.
    """
    conc, isl = _int(row, "concurrency"), _int(row, "isl")
    tp = _worker_gpus(row)
    dp = _int(row, "attention_dp") > 1
    fraction = 0.75 if (row.get("system") or "").strip().lower() == "h200_sxm" else 0.8
    batch = conc
    if dp and version == "pr392":
        batch = max(1, conc // tp)
    elif dp and version == "pr632":
        batch, fraction = (conc if conc < 8 else conc // 8), 0.7
    elif dp and version == "pr642":
        batch = conc if conc < 4 else conc // 4
    k = mtp_draft_tokens(row)
    return {"enable_block_reuse": False, "max_batch_size": batch, "free_gpu_memory_fraction": fraction,
            "max_num_tokens": _round_up((k + 1) * batch + isl + 64, 64)}


def trtllm_inferencex_options(row: dict[str, str]) -> dict[str, Any] | None:
    """TRT-LLM flags of the InferenceX launch script that ran this row; None if no script covers it.

    Read from the stored versions of the scripts in SemiAnalysisAI/InferenceX.  The rows carry
    no script version; the scripts' git history was checked against the rows'
    ``measured_date`` where versions differ (Llama fp4: 16384 tokens from 2025-09-18; DeepSeek
    fp8 B200: the case-dependent memory fraction and batch waiting from 2026-01-29; DeepSeek's
    8,192-token floor from 2026-01-21; DeepSeek rows the MTP configs ran, :func:`inferencex_mtp_sweep`,
    take the MTP scripts' flags, :func:`trtllm_mtp_options`).  Every script sets
    ``enable_block_reuse: false`` and leaves chunked context off; a flag a script does not
    pass keeps TensorRT-LLM's default (the option's).
    """
    if not _from_inferencex(row):
        return None
    mtp = inferencex_mtp_sweep(row)
    if mtp is not None:
        return trtllm_mtp_options(row, mtp)
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    conc, isl, osl = _int(row, "concurrency"), _int(row, "isl"), _int(row, "osl")
    tp = _worker_gpus(row)  # the scripts' TP
    opts: dict[str, Any] = {"enable_block_reuse": False}
    if "deepseek" in model and (precision, system) in (("fp4", "b200_sxm"), ("fp8", "b200_sxm"),
                                                       ("fp8", "h200_sxm")):
        # benchmarks/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, dsr1_fp8_h200_trt.sh:
        # --max_num_tokens = max(8192, (CONC + ISL + 64) rounded up to 64) from 2026-01-21
        # (commit 64af5a771, PR 258); before, the *_trt_slurm.sh versions passed the round-up
        # alone (1,152 for 1k/1k at CONC 64); no --max_batch_size
        # (TensorRT-LLM's 2048); kv_cache_config.free_gpu_memory_fraction 0.8 (fp4 B200),
        # 0.75 (fp8 H200), fp8 B200: 0.8, and from 2026-01-29 (ec7bafaae, PR 594) 0.7 for 1k/8k
        # at CONC >= 256 and 0.75 for 8k/1k at TP 4, and for 1k/1k at CONC >= 64 DELAY_BATCHING:
        # batch_wait_timeout_iters 40, batch_wait_max_tokens_ratio 0.8 (the executor skips
        # batch waiting with attention DP).  DeepSeek-V3 rows are taken as run by the same scripts.
        date = (row.get("measured_date") or "").strip()
        tokens = _round_up(conc + isl + 64, 64)
        opts["max_num_tokens"] = tokens if date < "2026-01-21" else max(8192, tokens)
        fraction = 0.8
        if precision == "fp8" and system == "h200_sxm":
            fraction = 0.75
        elif precision == "fp8" and date >= "2026-01-29":
            if isl == 1024 and osl == 8192 and conc >= 256:
                fraction = 0.7
            elif isl == 8192 and osl == 1024 and tp == 4:
                fraction = 0.75
            if isl == 1024 and osl == 1024 and conc >= 64:
                opts.update(batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
        opts["free_gpu_memory_fraction"] = fraction
        return opts
    if "gpt-oss" in model and system in ("b200_sxm", "h200_sxm"):
        # benchmarks/gptoss_fp4_b200_trt.sh: --max_batch_size 512 --max_num_tokens 20000;
        # benchmarks/gptoss_fp4_h200_trt.sh: --max_batch_size $CONC --max_num_tokens 20000;
        # both free_gpu_memory_fraction 0.85
        opts.update(max_num_tokens=20000, max_batch_size=512 if system == "b200_sxm" else conc,
                    free_gpu_memory_fraction=0.85)
        return opts
    if "llama-3.1-70b" in model and system in ("b200_sxm", "h200_sxm"):
        # benchmarks/70b_fp8_b200_trt_slurm.sh, 70b_fp8_h200_trt_slurm.sh,
        # 70b_fp4_b200_trt_slurm.sh: --max_num_tokens 16384 (the fp4 script's first version,
        # 2025-09-17, passed $MAX_MODEL_LEN; from 2025-09-18 until the scripts were removed on
        # 2025-10-29, around these rows' 2025-10 runs, all three pass 16384); no
        # --max_batch_size (2048), the default memory fraction; 1k/1k at TP < 8 adds
        # batch_wait_max_tokens_ratio 0.9, batch_wait_timeout_iters 20
        opts["max_num_tokens"] = 16384
        if isl == 1024 and osl == 1024 and tp < 8:
            opts.update(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
        return opts
    return None


def _vllm_max_model_len(isl: int, osl: int) -> int:
    """--max-model-len as the 2025 gpt-oss / Llama launch scripts compute it (CALCULATED_MAX_MODEL_LEN)."""
    if isl == 1024 and osl == 1024:
        return isl + osl + 20
    if 8192 in (isl, osl):
        return isl + osl + 200
    return 10240


def vllm_inferencex_options(row: dict[str, str]) -> dict[str, Any] | None:
    """vLLM flags of the InferenceX launch script that ran this row; None if no script covers it.

    Read from SemiAnalysisAI/InferenceX (``benchmarks/``, later ``benchmarks/single_node/``) at
    the version in effect on the row's ``measured_date``.  Only flags servesim's vLLM model
    honours are mapped; a flag a script does not pass keeps vLLM's default (the option's:
    ``max_num_seqs``/``max_num_batched_tokens`` unset → 1024 / 8192 on these GPUs, block size
    16).  Prefix caching stays off: the scripts dated before 2026-03-27 left vLLM's default
    (on), which changes nothing for InferenceX's random prompts (no shared blocks).
    """
    if not _from_inferencex(row):
        return None
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    date = (row.get("measured_date") or "").strip()
    conc, isl, osl = _int(row, "concurrency"), _int(row, "isl"), _int(row, "osl")
    opts: dict[str, Any] = {"enable_prefix_caching": False}
    if "minimax-m2" in model:
        if system == "h100_sxm":
            # single_node/minimaxm2.5_fp8_h100.sh (2026-03): --gpu-memory-utilization 0.90
            # --max-num-seqs 256, no --max-num-batched-tokens
            opts.update(gpu_memory_utilization=0.9, max_num_seqs=256)
        elif system == "h200_sxm":
            # single_node/minimaxm2.5_fp8_h200.sh (2026-03): --gpu-memory-utilization 0.95, no
            # --max-num-seqs / --max-num-batched-tokens
            opts["gpu_memory_utilization"] = 0.95
        elif system in ("b200_sxm", "b300_sxm"):
            if precision == "fp8":
                opts["block_size"] = 32  # minimaxm2.5_fp8_b200.sh, minimaxm2.5_fp8_b300.sh: --block-size=32
            if precision == "fp8" and system == "b200_sxm" and date < "2026-04-03":
                # single_node/minimaxm2.5_fp8_b200.sh before 2026-04-03 (the v0.17.0 rows):
                # --gpu-memory-utilization 0.95, vLLM's default token budget and seats
                opts["gpu_memory_utilization"] = 0.95
            elif precision == "fp4" and system == "b200_sxm" and date < "2026-04-07":
                # minimaxm2.5_fp4_b200.sh as PR 996's branch had it (08bcde8f1, 2026-04-02; the
                # rows of 2026-04-03 ran its nightly image): --gpu-memory-utilization 0.95
                # --block-size=32, no --max-num-batched-tokens; 0.90 and 2 x ISL from a9c199207
                opts.update(gpu_memory_utilization=0.95, block_size=32)
            else:
                # single_node/minimaxm2.5_fp8_b200.sh (from 2026-04-03), minimaxm2.5_fp8_b300.sh,
                # minimaxm2.5_fp4_b200.sh, minimaxm2.5_fp4_b300.sh: --gpu-memory-utilization 0.90
                # --max-num-batched-tokens $((ISL * 2)), no --max-num-seqs
                opts.update(gpu_memory_utilization=0.9, max_num_batched_tokens=2 * isl)
        else:
            return None
        return opts
    if "gpt-oss" in model and system in ("b200_sxm", "h100_sxm", "h200_sxm"):
        # gptoss_fp4_b200_docker.sh (2025-11), single_node/gptoss_fp4_b200.sh (2026-02):
        # --max-num-seqs 512; gptoss_fp4_h100_{slurm,docker}.sh (2025-12),
        # gptoss_fp4_h200_slurm.sh (2025-11), single_node/gptoss_fp4_h{100,200}.sh (2026-03):
        # --max-num-seqs $CONC; all max-num-batched-tokens 8192, --gpu-memory-utilization 0.9,
        # max-model-len 10240 (H100) or CALCULATED_MAX_MODEL_LEN
        opts.update(max_num_seqs=512 if system == "b200_sxm" else conc, max_num_batched_tokens=8192,
                    gpu_memory_utilization=0.9,
                    max_model_len=10240 if system == "h100_sxm" else _vllm_max_model_len(isl, osl))
        return opts
    if "llama-3.1-70b" in model and system in ("b200_sxm", "h100_sxm", "h200_sxm"):
        # 70b_fp8_b200_docker.sh, 70b_fp4_b200_docker.sh: --max-num-seqs 512; 70b_fp8_h100_slurm.sh,
        # 70b_fp8_h200_slurm.sh: --max-num-seqs $CONC; all max-num-batched-tokens 8192,
        # --gpu-memory-utilization 0.9; max-model-len 10240 (H100), CALCULATED_MAX_MODEL_LEN
        # (fp4 B200, H200), the workflow's $MAX_MODEL_LEN (fp8 B200: not set here)
        opts.update(max_num_seqs=512 if system == "b200_sxm" else conc, max_num_batched_tokens=8192,
                    gpu_memory_utilization=0.9)
        if system == "h100_sxm":
            opts["max_model_len"] = 10240
        elif system == "h200_sxm" or precision == "fp4":
            opts["max_model_len"] = _vllm_max_model_len(isl, osl)
        return opts
    if "kimi-k2" in model and system in ("b200_sxm", "b300_sxm", "h200_sxm"):
        # single_node/kimik2.5_int4_b200.sh, kimik2.5_int4_h200.sh: --gpu-memory-utilization 0.95;
        # kimik2.5_fp4_b200.sh, kimik2.5_fp4_b300.sh: 0.90; all --max-num-seqs $CONC;
        # kimik2.5_fp4_b200.sh from 2026-04-20 adds --max-num-batched-tokens $((ISL * 2))
        opts.update(max_num_seqs=conc, gpu_memory_utilization=0.95 if precision == "int4" else 0.9,
                    max_num_batched_tokens=8192)
        if precision == "fp4" and system == "b200_sxm" and date >= "2026-04-20":
            opts["max_num_batched_tokens"] = 2 * isl
        return opts
    return None


def _sglang_deepseek_script_flags(row: dict[str, str]) -> dict[str, Any]:
    """SGLang flags of InferenceX's DeepSeek launch scripts that differ from the README's typical ones.

    Blackwell (``dsr1_fp4_b200.sh``, ``dsr1_fp8_b200.sh``, ``dsr1_fp8_b300.sh``; attention dp off):
    ``--scheduler-recv-interval`` 30 at concurrency >= 16, else 10 (always 10 for fp8 at tp 4).
    fp4, every version 2025-11 .. 2026-05: ``--mem-fraction-static 0.85 --chunked-prefill-size
    16384 --max-running-requests 256`` and no ``--max-prefill-tokens`` (SGLang's 16384).  fp8 at tp 4
    (the scripts' only tp 4 case; B200 ran tp 4 from 2026-01-13, B300's script dates from 2026-04-17,
    so no earlier tp 4 row exists): 32 running requests, 0.95, chunk and prefill budget 8192.  fp8 at
    tp 8 the scripts say 128 running requests (0.82 and 32768 as the README), but the rows at
    concurrency 256 contradict it (B200 DeepSeek-R1 1k/1k c256: 2.1 s mean TTFT measured, where
    128 seats would queue half the requests for a ~30 s lifetime; those rows are not in the plain
    config's sweep of that date, which stops at 64: they are MTP runs of ``dsr1-fp8-b200-sglang-mtp``,
    512 running requests, simulated plain, see :data:`INFERENCEX_MIXED_MTP_SWEEPS`), so tp 8 keeps the
    README's rule.  H200 fp8
    (``dsr1_fp8_h200.sh``, 2025-10 .. 2026-06): 512 running requests for 1k/1k, else 256.
    """
    conc = _int(row, "concurrency")
    precision = (row.get("precision") or "").lower()
    system = row["system"]
    opts: dict[str, Any] = {}
    if system in ("b200_sxm", "b300_sxm") and _int(row, "attention_dp") <= 1:
        tp4 = _int(row, "gpus") == 4
        opts["scheduler_recv_interval"] = 30 if conc >= 16 and not (tp4 and precision == "fp8") else 10
        if not _from_inferencex(row):
            return opts
        if precision == "fp4":
            opts.update(mem_fraction_static=0.85, chunked_prefill_size=16384, max_prefill_tokens=16384,
                        max_running_requests=256)
        elif precision == "fp8" and tp4:
            opts.update(mem_fraction_static=0.95, chunked_prefill_size=8192, max_prefill_tokens=8192,
                        max_running_requests=32)
    elif system == "h200_sxm" and precision == "fp8" and _from_inferencex(row):
        one_k = _int(row, "isl") == 1024 and _int(row, "osl") == 1024
        opts["max_running_requests"] = 512 if one_k else 256
    return opts


def engine_options(backend: str, row: dict[str, str]) -> dict[str, Any]:
    """The engine section for a point, from the README's documented server flags."""
    conc = _int(row, "concurrency")
    model = row["model"].lower()
    if backend == "vllm":
        opts = vllm_inferencex_options(row)
        if opts is None:
            # rows no InferenceX script covers: the README's flags (max_num_seqs = concurrency,
            # max_num_batched_tokens 8192, no prefix caching, gpu_memory_utilization 0.9)
            opts = {"max_num_seqs": conc, "max_num_batched_tokens": 8192, "enable_prefix_caching": False,
                    "gpu_memory_utilization": 0.9}
    elif backend == "sglang":
        opts = {"disable_radix_cache": True, "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
                "mem_fraction_static": 0.82}
        if "deepseek" in model:
            opts["max_running_requests"] = min(512, max(256, conc))
            opts.update(_sglang_deepseek_script_flags(row))
    elif backend == "trtllm":
        opts = trtllm_inferencex_options(row)
        if opts is None:
            # rows no InferenceX script covers (e.g. NVIDIA's fixed_lengths_unverified):
            # max_batch_size = concurrency, max_num_tokens = the run's max model length
            # (isl + osl + a margin, e.g. 2248 for 1k/1k), chunked context and block reuse off
            isl, osl = _int(row, "isl"), _int(row, "osl")
            opts = {"max_batch_size": conc, "enable_block_reuse": False,
                    "max_num_tokens": max(2048, isl + osl + 200)}
        if _int(row, "attention_dp") > 1:
            # InferenceX launch scripts add attention_dp_config whenever DP_ATTENTION is true:
            # DeepSeek-R1 (benchmarks/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh,
            # dsr1_fp8_h200_trt.sh): enable_balance true, timeout_iters 60, batching_wait_iters 0;
            # gpt-oss (benchmarks/gptoss_fp4_b200_trt.sh): enable_balance true with
            # TensorRT-LLM's defaults (timeout_iters 50, batching_wait_iters 10)
            opts["attention_dp_enable_balance"] = True
            if "deepseek" in model:
                opts.update(attention_dp_timeout_iters=60, attention_dp_batching_wait_iters=0)
    elif backend == "atom":
        # ATOM's defaults (nano-vLLM lineage): 16384 batched tokens, 512 sequences,
        # gpu_memory_utilization 0.9; benchmarks ran without prefix caching
        opts = {"disable_radix_cache": True, "chunked_prefill_size": 16384, "max_prefill_tokens": 16384,
                "mem_fraction_static": 0.9, "max_running_requests": max(512, conc)}
    else:
        opts = {}
    engine = BACKEND_AS_ENGINE.get(backend, backend)
    known = _engine_fields(engine)
    if known is not None:  # keep only the options this build's engine model knows
        opts = {k: v for k, v in opts.items() if k in known}
    return {"name": engine, **opts}


def vllm_inferencex_kv_dtype(row: dict[str, str]) -> str | None:
    """KV precision of an InferenceX vLLM run: ``fp8`` where its launch script passes
    ``--kv-cache-dtype fp8``, else vLLM's ``auto`` (the model's activation dtype, bf16); None
    for rows no script covers (:func:`vllm_inferencex_options`).

    Scripts without the flag (versions in effect on the row's date, as for
    :func:`vllm_inferencex_options`): MiniMax-M2.5 on H100 / H200 and fp8 on B200 before
    2026-04-03; Kimi-K2.5 int4 (B200, H200), fp4 on B300 and on B200 before 2026-04-20; gpt-oss
    on H100 / H200, and on B200 before 2026-02 (``single_node/gptoss_fp4_b200.sh`` adds it).
    The Llama-3.1-70B scripts and the later MiniMax / Kimi ones pass it.
    """
    if vllm_inferencex_options(row) is None:
        return None
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    date = (row.get("measured_date") or "").strip()
    auto = False
    if "minimax-m2" in model:
        auto = system in ("h100_sxm", "h200_sxm") or (system == "b200_sxm" and precision == "fp8"
                                                       and date < "2026-04-03")
    elif "kimi-k2" in model:
        auto = precision == "int4" or system == "b300_sxm" or (system == "b200_sxm" and date < "2026-04-20")
    elif "gpt-oss" in model:
        auto = system in ("h100_sxm", "h200_sxm") or date < "2026-02"
    return "bf16" if auto else "fp8"


def trtllm_kv_dtype(row: dict[str, str]) -> str | None:
    """KV precision of a TensorRT-LLM row: :func:`kv_dtype_for`, except where the InferenceX script
    says otherwise.  ``gptoss_fp4_h200_trt_slurm.sh`` (2025-11, 2025-12 versions) sets
    ``kv_cache_config.dtype: auto`` and the mxfp4 checkpoint carries no KV quantisation, so the
    cache is bf16 (the B200 script sets ``dtype: fp8``)."""
    system = (row.get("system") or "").strip().lower()
    precision = (row.get("precision") or "").strip().lower() or "bf16"
    if "gpt-oss" in row["model"].lower() and system == "h200_sxm" and _from_inferencex(row):
        return "bf16"
    return kv_dtype_for("trtllm", precision, SYSTEM_TO_GPU.get(system))


def _version(text: str) -> tuple[int, ...]:
    """``"0.15.1"`` → ``(0, 15, 1)``; ``()`` when the text does not start with a number."""
    parts: list[int] = []
    for piece in (text or "").strip().lstrip("v").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def vllm_kv_dtype(row: dict[str, str]) -> str | None:
    """KV precision of a vLLM point; None leaves vLLM's ``auto`` (bf16 in the engine model).

    * A row an InferenceX launch script covers: what the script passes
      (:func:`vllm_inferencex_kv_dtype`).
    * Other ``inferencex_random`` rows: the README's typical ``--kv-cache-dtype fp8``.
    * Rows whose server flags are undocumented (``fixed_lengths_unverified``): vLLM's ``auto``.
      That is the activation dtype, bf16, except that since vLLM's December 2025 change (PR
      30785, re-landing the reverted 29980: after 0.12, before the 0.17 of the Kimi fp4 rows)
      ``auto`` takes fp8 from a ModelOpt checkpoint's ``kv_cache_quant_algo``, which NVIDIA's
      NVFP4 checkpoints set: fp4 rows on vLLM after 0.12 run fp8 KV.  The int4
      (compressed-tensors, no KV scheme), Qwen's fp8 and bf16 checkpoints stay bf16, and so
      does NVIDIA's Llama-3.1-8B-FP8 on vLLM 0.12.
      The KV-bound rows agree both ways: Qwen3-32B bf16 H100 tp2 c128 4096/512 waits 33 s for
      its first token (bf16 KV: about half of the requests fit at once; fp8 would fit them
      all), and Kimi-K2.5 fp4 B200 tp4 c64 8192/1024 only 1.3 s (bf16 KV would leave it
      queueing for ~20 s).
    """
    script = vllm_inferencex_kv_dtype(row)
    if script is not None:
        return script
    if row.get("workload") == "inferencex_random":
        return "fp8"
    precision = (row.get("precision") or "").strip().lower()
    if precision == "fp4" and _version(row.get("backend_version", "")) >= (0, 13):
        return "fp8"
    return None


def kv_dtype_for(backend: str, precision: str, gpu: str | None = None) -> str | None:
    """The KV precision of a point on an engine other than vLLM (see :func:`vllm_kv_dtype`);
    None leaves the engine's "auto" default.

    ATOM: fp8 (its documented usage).  TensorRT-LLM: fp8 KV with fp8 / fp4 weights.

    SGLang: the InferenceX launch scripts for quantized DeepSeek-family models on Blackwell
    pass ``--kv-cache-dtype fp8_e4m3`` (``benchmarks/single_node/dsr1_fp8_b200.sh``,
    ``dsr1_fp4_b200.sh``), those for Hopper do not (``dsr1_fp8_h200.sh``); elsewhere SGLang
    stays on ``auto`` (see ``cluster.deployment.default_kv_dtype``).
    """
    if backend == "atom":
        return "fp8"
    if backend == "trtllm" and precision in ("fp8", "fp4"):
        return "fp8"
    if backend == "sglang":
        if gpu and precision in ("fp8", "fp4") and (load_gpu(gpu).cuda_major or 0) >= 10:
            return "fp8"
        return None
    return "bf16"


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
    if (row.get("mode") or "agg") != "agg" or _int(row, "pp") != 1:
        return Point(row, None, "unsupported: only aggregated pp=1 points")
    precision = (row.get("precision") or "").strip().lower() or "bf16"
    if precision not in ("bf16", "fp8", "fp4", "int4"):
        return Point(row, None, f"unsupported: precision {precision}")
    atp, adp = _int(row, "attention_tp"), _int(row, "attention_dp")
    gpus = _worker_gpus(row)
    ep = _int(row, "moe_ep")
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
        "kv_dtype": (vllm_kv_dtype(row) if backend == "vllm" else trtllm_kv_dtype(row) if backend == "trtllm"
                     else kv_dtype_for(backend, precision, SYSTEM_TO_GPU[system])),
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
    conc = _int(row, "concurrency")
    workload: dict[str, Any] = {"kind": "closed_loop", "concurrency": conc, "isl": _int(row, "isl"),
                                "osl": _int(row, "osl")}
    if row.get("workload") == "inferencex_random":
        workload.update(recipe="inferencex_random", range_ratio=float(row.get("range_ratio") or 0.8),
                        num_prompts=_int(row, "num_prompts", 10 * conc), warmup=2 * conc)
    elif reuses_prompt_pool(row):
        workload.update(recipe="fixed", num_prompts=_int(row, "num_prompts", 20 * conc), warmup=2 * conc,
                        prompt_pool=AIPERF_DATASET_ENTRIES, pool_sampling=AIPERF_POOL_SAMPLING)
        _prefix_cache_on(deployment["engine"])
        notes.append(f"fixed lengths; AIPerf client assumed: {AIPERF_DATASET_ENTRIES} prompts reused "
                     f"({AIPERF_POOL_SAMPLING}), {workload['num_prompts']} requests after {2 * conc} warm-up, "
                     "prefix cache on")
    elif row.get("workload") == "fixed_lengths_unverified":
        workload.update(recipe="fixed", num_prompts=_int(row, "num_prompts", 10 * conc), warmup=conc)
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
