"""Step time from NVIDIA's measured per-operator tables (optional ``servesim[aic]`` extra).

``perf: {model: aic}`` prices every pass with the measured kernel latencies shipped in the
``aiconfigurator-core`` package (written against version 0.12.0): GEMM, context and
generation attention (GQA and MLA), MoE, all-reduce / NCCL and MoE dispatch tables per
GPU system, serving framework and framework version.  The package's own model layer builds
the model's operator list for the worker's layout (tp, ep, precisions), and its compiled
engine evaluates operators at a shape (``EngineHandle.evaluate_ops_json``) by
interpolating those tables; servesim only decides which shapes a pass runs.

A pass is composed from its real per-request composition (:class:`~servesim.perf.plan.PassPlan`):

- token-major operators (embedding, qkv / o projections, MLP or MoE with its dispatch,
  norms, all-reduce for ``tp > 1``) once at the pass's total token count — the
  package's prefill operator list when the pass has prefill chunks, its decode list
  (decode kernels) for decode-only passes;
- LM head at one token per prefill chunk plus every decode token;
- context attention (for MLA models: the whole attention block, the package keeps it as
  one module) once per prefill chunk, at that chunk's new tokens and cached prefix;
- generation attention from the decoding requests' own contexts.  The measured tables are
  indexed by (batch, context), one context for the whole batch, so a batch of ``B``
  requests whose contexts differ is priced as ``Σ_i T(B, s_i) / B``: each request pays its
  share of a batch-``B`` kernel at its own context ``s_i``.  This keeps the batch-level
  efficiency the tables measure (launch and per-kernel overheads amortised over ``B``)
  while the KV each request reads follows its own context; pricing one average request
  ``T(B, mean s)`` would lose the table's non-linearity in ``s``, and pricing each request
  alone ``Σ_i T(1, s_i)`` would pay ``B`` kernel launches.  With speculative decoding
  (``decode_tokens = k``) the decode batch counts ``B × k`` queries (an upper bound: the
  k queries of one request share one KV read).

Lookups are memoised on bucketed shapes: counts up to 64 exactly, larger ones rounded to
six significant bits (≤ 1.6 % off), so a long simulation asks the engine only a few
thousand distinct shapes.  Sums over buckets keep per-request resolution at bucket width.

Coverage is checked when the model is built and a missing combination is a
:class:`~servesim.errors.ConfigError` naming the key and listing what exists — never a
silent fallback to the analytic model: GPU (NVIDIA systems the package ships; no AMD),
engine (``sglang``, ``vllm``, ``trtllm``), ``perf.aic.backend_version`` (the package's
queryable versions), precision (quant modes present in the tables) and model family (the
package's model registry).  Not modelled: ``attention_dp > 1`` (rejected), host-tier KV
load bytes (the worker adds ``host_load_s``), framework CPU overheads (use
``perf.frontend``).  Measured tables carry measurement noise: neighbouring shapes are not
always ordered, so monotonicity holds at table resolution, not between adjacent tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from servesim.errors import ConfigError
from servesim.hardware.gpu import GPUSpec
from servesim.models.arch import BUNDLED_DIR, ModelArch
from servesim.perf.plan import PassPlan

#: aiconfigurator-core version the mappings below were written against.
AIC_MAPPED_VERSION = "0.12.0"
INSTALL_HINT = "pip install 'servesim[aic]'"

#: servesim GPU name → aiconfigurator-core system name.
SYSTEMS: dict[str, str] = {
    "h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm", "b300_sxm": "b300_sxm",
    "gb200": "gb200", "gb300": "gb300", "a100_80gb": "a100_sxm", "l40s": "l40s",
}
#: servesim engine → aiconfigurator-core backend.
BACKENDS: dict[str, str] = {"sglang": "sglang", "vllm": "vllm", "trtllm": "trtllm"}
_FP8_GEMM = ("fp8_block", "fp8")  # DeepSeek/Qwen FP8 checkpoints: 128×128 block scales
#: weight precision → (GEMM quant modes, MoE quant modes), in order of preference: the first
#: one the tables hold is used (servesim's precision names a format, not a kernel recipe).
_WEIGHT_MODES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "bf16": (("bfloat16",), ("bfloat16",)), "fp16": (("bfloat16",), ("bfloat16",)),
    "fp8": (_FP8_GEMM, ("fp8_block", "fp8")),
    "fp4": (("nvfp4",), ("nvfp4",)), "nvfp4": (("nvfp4",), ("nvfp4",)),
    "mxfp4": (("bfloat16",), ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8", "w4a8_mxfp4_mxfp8_trtllm", "w4a16_mxfp4_cutlass")),
    "int4": (("bfloat16",), ("int4_wo",)),
}
#: KV dtype → KV-cache quant mode.
_KV_MODES: dict[str, str] = {"bf16": "bfloat16", "fp16": "bfloat16", "auto": "bfloat16",
                             "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


@dataclass(frozen=True)
class AicOptions:
    """``perf.aic`` keys: framework version and optional quant-mode overrides."""

    backend_version: str = "current"
    gemm_quant_mode: str | None = None
    moe_quant_mode: str | None = None
    kv_quant_mode: str | None = None
    fmha_quant_mode: str | None = None


def import_core() -> Any:
    """The ``aiconfigurator_core`` package, or a ConfigError saying how to install it."""
    try:
        import aiconfigurator_core  # noqa: F401
        from aiconfigurator_core.sdk import engine, perf_database  # noqa: F401
    except ImportError:
        raise ConfigError(
            "perf.model: 'aic' needs the optional package aiconfigurator-core, which is not installed; "
            f"install it with: {INSTALL_HINT}") from None
    # Library convention: without a handler of the application's own, the package's
    # data-provenance warnings stay silent instead of going to Python's last-resort stderr.
    log = logging.getLogger("aiconfigurator_core")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    return aiconfigurator_core


# ------------------------------------------------------------------ shapes
def bucket(n: int) -> int:
    """``n`` exactly up to 64, else rounded to six significant bits (monotone, ≤ 1.6 % off)."""
    if n <= 64:
        return int(n)
    step = 1 << (int(n).bit_length() - 6)
    return int(round(n / step)) * step


def bucket_array(a: np.ndarray) -> np.ndarray:
    """:func:`bucket` of every element (int64)."""
    a = np.asarray(a, dtype=np.int64)
    big = a > 64
    if not big.any():
        return a
    out = a.copy()
    v = a[big]
    step = np.left_shift(1, np.floor(np.log2(v)).astype(np.int64) - 5)
    out[big] = np.rint(v / step).astype(np.int64) * step
    return out


@contextlib.contextmanager
def _quiet_package_logs():
    """The package logs data-provenance warnings at load; keep servesim's output clean."""
    log = logging.getLogger("aiconfigurator_core")
    old = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(old)


# ------------------------------------------------------------ coverage
def _choice(key: str, value: str, table: dict[str, str], what: str) -> str:
    hit = table.get(value)
    if hit is None:
        raise ConfigError(f"{key}: {value!r} has no measured operator tables in aiconfigurator-core "
                          f"{AIC_MAPPED_VERSION} ({what}); available: {', '.join(sorted(table))}")
    return hit


def _systems_root() -> str:
    from aiconfigurator_core.sdk import perf_database

    return perf_database.get_systems_paths()[0]


def _resolve_version(system: str, backend: str, version: str) -> str:
    from aiconfigurator_core.sdk import perf_database

    root = _systems_root()
    try:
        return perf_database.resolve_query_version(system, backend, version, systems_paths=[root])
    except Exception as exc:  # the package raises ValueError/KeyError subclasses
        slots = perf_database.get_version_slots(system, backend, systems_paths=[root]) or {}
        avail = ", ".join(f"{k}={v}" for k, v in slots.items()) or "none"
        raise ConfigError(f"perf.aic.backend_version: {version!r} is not a queryable {backend} version "
                          f"for {system} ({exc}); available: {avail}") from None


def _load_database(system: str, backend: str, version: str) -> Any:
    from aiconfigurator_core.sdk import perf_database

    with _quiet_package_logs():
        db = perf_database.get_database(system, backend, version, systems_paths=[_systems_root()])
    if db is None:
        raise ConfigError(f"perf.aic.backend_version: no measured tables for {system}/{backend}/{version}")
    return db


def _check_override_names(opt: AicOptions) -> None:
    """``perf.aic.*_quant_mode`` overrides must be names the package knows."""
    from aiconfigurator_core.sdk import common

    enums = {"gemm_quant_mode": common.GEMMQuantMode, "moe_quant_mode": common.MoEQuantMode,
             "kv_quant_mode": common.KVCacheQuantMode, "fmha_quant_mode": common.FMHAQuantMode}
    for key, enum in enums.items():
        value = getattr(opt, key)
        names = [m.name for m in enum]
        if value is not None and value not in names:
            raise ConfigError(f"perf.aic.{key}: unknown quant mode {value!r}; expected one of {', '.join(names)}")


def _first(preferred: tuple[str, ...], have) -> str:
    """The first preferred mode present in a table (else the first: the check reports the gap)."""
    have = set(have or ())
    return next((m for m in preferred if m in have), preferred[0])


def _check_modes(db: Any, needs: list[tuple[str, str, str]], where: str) -> None:
    """Every (table, quant mode, config key) must be present in the database."""
    matrix = db.supported_quant_mode
    for table, mode, key in needs:
        have = list(matrix.get(table) or [])
        if mode not in have:
            raise ConfigError(f"{key}: quant mode {mode!r} has no {table!r} table for {where}; "
                              f"available: {', '.join(have) or 'none'}")


def _pick_fmha(db: Any, arch: ModelArch, kv: str, asked: str | None) -> str:
    """Prefill-attention precision: the one asked for, else the measured (fmha, kv) slice.

    The context tables are keyed jointly by (fmha, kv) mode and frameworks differ (SGLang on
    Hopper has fp8-KV prefill only with fp8 FMHA; vLLM only bf16 FMHA), so the default is
    the KV mode's own precision where measured, else bf16, else what exists.
    """
    if asked or (arch.is_mla and arch.index_topk):
        return asked or "bfloat16"
    from aiconfigurator_core.sdk import common, perf_database

    table = "context_mla" if arch.is_mla else "context_attention"
    have = perf_database.context_fmha_supported_modes(db, table, common.KVCacheQuantMode[kv])
    for mode in (kv, "bfloat16", *have):
        if mode in have:
            return mode
    return "bfloat16"  # no information: _check_modes / the build-time probe report the gap


# ------------------------------------------------------------ model layer
_CONFIG_DIRS: dict[str, str] = {}


def _config_dir(arch: ModelArch) -> str:
    """A folder holding the model's ``config.json`` (the package reads local folders offline)."""
    src = arch.config_source
    path = Path(src)
    if not path.is_file():
        path = BUNDLED_DIR / (src.replace("/", "__") + ".json")
    if not path.is_file():
        raise ConfigError(f"model: {arch.name!r}: no config.json found for the aic model layer ({src!r})")
    key = str(path.resolve())
    if key not in _CONFIG_DIRS:
        text = path.read_text()
        d = Path(tempfile.gettempdir(), "servesim-aic-" + hashlib.sha1(text.encode()).hexdigest()[:16])
        d.mkdir(exist_ok=True)
        if not (d / "config.json").is_file() or (d / "config.json").read_text() != text:
            (d / "config.json").write_text(text)
        _CONFIG_DIRS[key] = str(d)
    return _CONFIG_DIRS[key]


def _model_path(arch: ModelArch) -> str:
    """The package's own copy of the config when it ships one (its parser expects its
    spelling, e.g. Qwen3.5 ``layer_types``), else a folder holding servesim's config."""
    from aiconfigurator_core.sdk import common

    for name in (arch.config_source, arch.name):
        if name in common.DefaultHFModels:
            return name
    return _config_dir(arch)


def _build_model(arch: ModelArch, backend: str, tp: int, ep: int, modes: dict[str, str]) -> Any:
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    mc = build_model_config(tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=max(1, tp // ep),
                            moe_ep_size=ep, gemm_quant_mode=modes["gemm"], moe_quant_mode=modes["moe"],
                            kvcache_quant_mode=modes["kv"], fmha_quant_mode=modes["fmha"])
    try:
        with _quiet_package_logs():
            return get_model(_model_path(arch), mc, backend)
    except (ValueError, KeyError, NotImplementedError) as exc:
        archs = ", ".join(sorted(common.ARCHITECTURE_TO_MODEL_FAMILY))
        raise ConfigError(f"model: {arch.name!r} ({arch.architecture or arch.family}) is not covered by the "
                          f"aiconfigurator-core model layer ({exc}); supported architectures: {archs}") from None


def _is_token_op(op: Any) -> bool:
    """Token-major (cost depends on the token count only), looking through composites."""
    children = [c for g in ("_group_a", "_group_b", "_fallback") for c in (getattr(op, g, None) or ())]
    primary = getattr(op, "_primary", None)
    if primary is not None:
        children.append(primary)
    if children:
        return all(_is_token_op(c) for c in children)
    return getattr(type(op), "_ENGINE_QUERY_SHAPE", None) == "tokens"


@dataclass(frozen=True)
class _OpGroups:
    """One phase's operator list split into token-major, sequence-dependent and LM-head JSON."""

    tokens: str
    seq: str
    logits: str


def _split_ops(ops: list, db: Any) -> _OpGroups:
    from aiconfigurator_core.sdk.engine import _resolve_attention_lane_orders, build_ops_json

    _resolve_attention_lane_orders(ops, db, None)
    logits = [op for op in ops if "logits" in str(getattr(op, "_name", ""))]
    rest = [op for op in ops if op not in logits]
    tok = [op for op in rest if _is_token_op(op)]
    seq = [op for op in rest if not _is_token_op(op)]
    return _OpGroups(build_ops_json(tok), build_ops_json(seq), build_ops_json(logits))


# ------------------------------------------------------------ the model
class AicStepTime:
    """Prices passes from aiconfigurator-core's measured tables; see module docstring."""

    def __init__(self, arch: ModelArch, gpu: GPUSpec, tp: int = 1, ep: int = 1,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", engine: str = "sglang",
                 attention_dp: int = 1, options: AicOptions | None = None) -> None:
        import_core()
        from aiconfigurator_core.sdk.engine import EngineHandle

        opt = options or AicOptions()
        _check_override_names(opt)
        if attention_dp > 1:
            raise ConfigError("deployment.attention_dp: perf.model 'aic' prices attention_dp = 1 only "
                              f"(found {attention_dp}); use perf.model 'analytic' for DP attention")
        self.system = _choice("deployment.gpu", gpu.name, SYSTEMS, "NVIDIA systems only")
        self.backend = _choice("deployment.engine.name", engine, BACKENDS, "serving frameworks")
        self.version = _resolve_version(self.system, self.backend, opt.backend_version)
        db = _load_database(self.system, self.backend, self.version)
        self.modes = self._modes(db, arch, weight_dtype, kv_dtype, opt)
        self.modes["fmha"] = _pick_fmha(db, arch, self.modes["kv"], opt.fmha_quant_mode)
        _check_modes(db, self._needs(arch), f"{self.system}/{self.backend}/{self.version}")
        model = _build_model(arch, self.backend, tp, ep, self.modes)
        with _quiet_package_logs():
            self._handle = EngineHandle.for_database(db, systems_path=_systems_root())
            self._ctx_ops = _split_ops(list(model.context_ops), db)
            self._gen_ops = _split_ops(list(model.generation_ops), db)
        self.tp, self.ep = tp, ep
        self._tokens = lru_cache(maxsize=1 << 14)(self._tokens_raw)
        self._logits = lru_cache(maxsize=1 << 12)(self._logits_raw)
        self._prefill_seq = lru_cache(maxsize=1 << 16)(self._prefill_seq_raw)
        self._decode_seq = lru_cache(maxsize=1 << 16)(self._decode_seq_raw)
        self._probe()

    # ------------------------------------------------------------ setup
    @staticmethod
    def _modes(db: Any, arch: ModelArch, weight_dtype: str, kv_dtype: str, opt: AicOptions) -> dict[str, str]:
        """Quant modes: ``perf.aic`` overrides, else the first preferred mode the tables hold."""
        w = weight_dtype.lower()
        if arch.family == "gpt_oss" and w in ("fp4", "nvfp4"):
            w = "mxfp4"
        if w not in _WEIGHT_MODES:
            raise ConfigError(f"deployment.weight_dtype: {weight_dtype!r} has no aic quant-mode mapping; "
                              f"mapped: {', '.join(sorted(_WEIGHT_MODES))}")
        gemm, moe = _WEIGHT_MODES[w]
        if w in ("fp4", "nvfp4") and arch.is_moe:
            # ModelOpt NVFP4 MoE checkpoints keep attention in bf16 (precision.py); the tables price
            # every non-expert GEMM with one mode, and attention's projections dominate them
            gemm = ("bfloat16",)
        if w == "fp8" and arch.family == "llama":
            gemm = ("fp8", "fp8_block")  # Llama FP8 checkpoints (ModelOpt) use per-tensor scales
        matrix = db.supported_quant_mode
        kv = _KV_MODES.get(kv_dtype.lower())
        if kv is None:
            raise ConfigError(f"deployment.kv_cache_dtype: {kv_dtype!r} has no aic mapping; "
                              f"mapped: {', '.join(sorted(_KV_MODES))}")
        return {"gemm": opt.gemm_quant_mode or _first(gemm, matrix.get("gemm")),
                "moe": opt.moe_quant_mode or _first(moe, matrix.get("moe")),
                "kv": opt.kv_quant_mode or kv, "fmha": opt.fmha_quant_mode or "bfloat16"}  # fmha: see _pick_fmha

    def _needs(self, arch: ModelArch) -> list[tuple[str, str, str]]:
        m = self.modes
        needs = [("gemm", m["gemm"], "perf.aic.gemm_quant_mode (from deployment.precision)")]
        if arch.is_moe:
            needs.append(("moe", m["moe"], "perf.aic.moe_quant_mode (from deployment.precision)"))
        if arch.is_mla:
            if not arch.index_topk:
                needs.append(("generation_mla", m["kv"], "perf.aic.kv_quant_mode (from kv cache dtype)"))
        elif arch.num_full_layers or arch.num_sliding_layers:
            needs += [("context_attention", m["fmha"], "perf.aic.fmha_quant_mode"),
                      ("generation_attention", m["kv"], "perf.aic.kv_quant_mode (from kv cache dtype)")]
        return needs

    def _probe(self) -> None:
        """Price a small mixed and a decode-only pass now, so a gap in the tables fails at build time."""
        with _quiet_package_logs():
            self.pass_time(PassPlan(prefill_new=np.array([128]), prefill_cached=np.array([0]),
                                    decode_ctx=np.array([256])))
            self.pass_time(PassPlan(decode_ctx=np.array([256])))

    def describe(self) -> dict[str, Any]:
        """What the tables were selected by (for reports)."""
        import aiconfigurator_core

        return {"package_version": getattr(aiconfigurator_core, "__version__", AIC_MAPPED_VERSION),
                "system": self.system, "backend": self.backend, "backend_version": self.version,
                "quant_modes": dict(self.modes)}

    # ------------------------------------------------------------ lookups (ms → s)
    def _eval(self, ops_json: str, **kw) -> float:
        if ops_json == "[]":
            return 0.0
        try:
            rows = self._handle.evaluate_ops_json(ops_json, **kw)
        except Exception as exc:  # the engine's own errors (missing rows, missing flops)
            raise ConfigError(f"perf.model aic: {self.system}/{self.backend}/{self.version} with quant modes "
                              f"{self.modes} has no measured data for a pass shape {kw}: {exc}") from None
        return sum(r[1] for r in rows) * 1e-3

    def _tokens_raw(self, prefill: bool, x: int) -> float:
        g = self._ctx_ops if prefill else self._gen_ops
        return self._eval(g.tokens, is_context=prefill, batch_size=1 if prefill else x,
                          s=x if prefill else 1, x=x)

    def _logits_raw(self, x: int) -> float:
        return self._eval(self._gen_ops.logits, is_context=False, batch_size=x, s=1, x=x)

    def _prefill_seq_raw(self, new: int, cached: int) -> float:
        return self._eval(self._ctx_ops.seq, is_context=True, batch_size=1, s=new, prefix=cached)

    def _decode_seq_raw(self, batch: int, ctx: int) -> float:
        return self._eval(self._gen_ops.seq, is_context=False, batch_size=batch, s=ctx)

    # ------------------------------------------------------------ pricing
    def _decode_attn(self, ctx: np.ndarray, dtok: int) -> np.ndarray:
        """``Σ_i T(B, s_i) / B`` for every row of a (passes × requests) context matrix.

        One engine lookup per distinct bucketed context (memoised), then a vectorised gather.
        """
        n = ctx.shape[1]
        vals, inv = np.unique(bucket_array(ctx), return_inverse=True)
        b, look = bucket(n * dtok), self._decode_seq
        per = np.array([look(b, v) for v in vals.tolist()], dtype=np.float64)
        return per[inv.reshape(ctx.shape)].sum(axis=1) / n

    def pass_time(self, plan: PassPlan) -> float:
        n_chunks = plan.prefill_new.size
        n_dec = plan.decode_ctx.size
        tokens = plan.num_tokens
        if tokens <= 0:
            return 0.0
        t = self._tokens(n_chunks > 0, bucket(tokens))
        t += self._logits(bucket(n_chunks + n_dec * plan.decode_tokens))
        if n_chunks:
            look = self._prefill_seq
            for new, cached in zip(plan.prefill_new.tolist(), plan.prefill_cached.tolist()):
                t += look(bucket(new), bucket(cached))
        if n_dec:
            t += float(self._decode_attn(plan.decode_ctx[None, :], plan.decode_tokens)[0])
        return t

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        """The same sums as :meth:`pass_time`, for all passes at once (blocks of ≤ 1M cells)."""
        n = decode_ctx.size
        if steps <= 0 or n == 0:
            return np.zeros(max(steps, 0), dtype=np.float64)
        base = self._tokens(False, bucket(n)) + self._logits(bucket(n))
        out = np.empty(steps, dtype=np.float64)
        rows = max(1, (1 << 20) // n)
        for s0 in range(0, steps, rows):
            s = np.arange(s0, min(steps, s0 + rows), dtype=np.int64)
            out[s0:s0 + s.size] = base + self._decode_attn(decode_ctx[None, :] + s[:, None], 1)
        return out


__all__ = ["AIC_MAPPED_VERSION", "AicOptions", "AicStepTime", "BACKENDS", "SYSTEMS", "bucket", "bucket_array",
           "import_core"]
