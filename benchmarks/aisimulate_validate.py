"""NVIDIA AISimulate's error on the measured points servesim validates: a side-by-side figure.

``servesim validate`` reports servesim's error on ``calibration.csv``; this script runs the
reference simulator, AISimulate (``pip install "aisimulate==0.13.0.dev202610270000000085"`` into
a separate virtual environment; never a dependency of servesim), on the same points with the
same workload, and prints both simulators' errors on the points both could simulate::

    servesim validate --points ../shared/data/measured/calibration.csv --split holdout \\
        --calibration fit-split --out servesim_holdout.csv --processes 2
    python benchmarks/aisimulate_validate.py --aisimulate VENV/bin/aisimulate \\
        --points ../shared/data/measured/calibration.csv --split holdout \\
        --servesim servesim_holdout.csv --out aisimulate_holdout.csv --processes 2

After a servesim refit, ``--reuse aisimulate_holdout.csv --servesim new_holdout.csv`` compares
AISimulate's earlier ``--out`` file with the new servesim rows without running AISimulate again (its
predictions depend only on the points' configs and requests; the measured values are the file's).

(``--sample N`` and ``--model ID`` run a subset; about 4 s of AISimulate per point.
``--database-mode hybrid`` lets AISimulate estimate the operators it has not measured instead of
failing on those points.)

How a point is given to AISimulate (``aisimulate_config``):

- the requests are servesim's own for the point (:func:`servesim.validate.points.point_config`,
  the recipe's warm-up then measured requests, same seed), written as a Mooncake trace
  (servesim's block ids: unique for random prompts, repeated where the point's client reuses a
  pool of prompts) and replayed by AISimulate's closed loop at the point's concurrency; warm-up
  requests are left out of the means, as servesim does;
- model, weight and MoE quantisation as NVIDIA's own evaluation sample inside the AISimulate
  wheel describes the point (``aisimulate_core/systems/silicon_sample.csv``: ``model_path``,
  ``gemm_quant_mode``, ``moe_quant_mode``), else from the row's precision (gpt-oss and Kimi
  int4 are corrected to their checkpoints' actual formats: :func:`quant_modes`); KV precision as
  servesim uses for the point; layout from the row (attention tp × dp, MoE tp × ep);
- scheduler limits from the point's engine flags (batched tokens, sequences), prefix caching
  as the flags leave it (off, except for the prompt-pool campaigns of
  ``validate/recipes/prompt_pool.py:reuses_prompt_pool``), chunked prefill off where the TRT-LLM flags turn
  chunked context off;
- speculative decoding where servesim simulates the point with it (the InferenceX MTP sweeps of
  ``validate/recipes/trtllm.py:inferencex_mtp_sweep``): AISimulate's ``nextn`` = the draft tokens and
  ``nextn_accepted`` = the mean accepted drafts servesim's acceptance rates give;
- every other setting is AISimulate's default (its measured operator tables, its engine
  models).

Mean TTFT and mean TPOT are computed from AISimulate's per-request output exactly as
servesim and the benchmark client define them: TTFT = arrival → first token, TPOT =
(end-to-end − TTFT) / (output tokens − 1), means over measured requests.  No point is dropped:
one AISimulate has no GPU or engine for (AMD GPUs, ATOM) gets ``status`` = ``unsupported: ...``,
one it fails on (no measured data for a shape, does not fit) ``error: <its reason>``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from servesim.engines.speculative import SpeculativeConfig, expected_length
from servesim.validate.points import point_config, read_points, sample_rows, split_rows
from servesim.validate.recipes.prompt_pool import prefix_caching
from servesim.workload.config import ClosedLoopWorkload
from servesim.workload.recipes import PROMPT_BLOCK, generate_closed_loop

#: Tokens per hash id in the traces written for AISimulate (its Mooncake default).
TRACE_BLOCK = 512
if PROMPT_BLOCK != TRACE_BLOCK:  # the trace carries servesim's own prompt block ids
    raise ImportError(f"servesim's closed-loop prompt blocks are {PROMPT_BLOCK} tokens, the trace's {TRACE_BLOCK}")
#: AISimulate knows these GPUs (``aisimulate_core/systems``) and engines.
AISIM_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
AISIM_BACKENDS = ("vllm", "sglang", "trtllm")
BLACKWELL = ("b200_sxm", "b300_sxm", "gb200", "gb300")
#: Row precision -> AISimulate GEMM / MoE quant mode, where its evaluation sample has none.
PRECISION_QUANT = {"bf16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4", "int4": "int4_wo"}
KV_QUANT = {"fp8": "fp8", "bf16": "bfloat16", None: None}
#: Models AISimulate bundles under another id (same architecture: its config files
#: ``aisimulate_core/model_configs``), so that it never tries to download a config.
MODEL_ALIASES = {
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Meta-Llama-3.1-8B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
}

OUT_COLUMNS = ("id", "model", "system", "backend", "precision", "concurrency", "isl", "osl", "workload",
               "measured_mean_ttft_ms", "measured_mean_tpot_ms", "predicted_mean_ttft_ms",
               "predicted_mean_tpot_ms", "status", "host_seconds")


def silicon_sample(exe: str) -> dict[str, dict[str, str]]:
    """NVIDIA's evaluation rows shipped in the AISimulate wheel, by id (model path, quant modes)."""
    venv = Path(exe).resolve().parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/aisimulate_core/systems/silicon_sample.csv"))
    if not found:
        return {}
    with open(found[0], newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def closed_loop_requests(config: dict[str, Any]) -> tuple[list[tuple[int, int, tuple[int, ...]]], int]:
    """The (input, output, prompt block ids) servesim sends for a point, in send order, and the
    warm-up count.  Ids are servesim's own: fresh per request, or repeated where the point's client
    reuses a pool of prompts (``workload.prompt_pool``)."""
    wl = ClosedLoopWorkload(**config["workload"])
    reqs = [(r.input_length, r.output_length, r.hash_ids) for r in generate_closed_loop(wl, config.get("seed", 0))]
    return reqs, wl.resolved_warmup


def write_trace(reqs: list[tuple[int, int, tuple[int, ...]]], path: Path) -> None:
    """Mooncake-format lines, all ready at t = 0, with the requests' own prompt block ids."""
    with open(path, "w") as f:
        for isl, osl, ids in reqs:
            f.write(json.dumps({"timestamp": 0, "input_length": isl, "output_length": osl,
                                "hash_ids": list(ids)}) + "\n")


def aisimulate_model(model: str) -> str:
    """The id AISimulate bundles ``model``'s architecture under (:data:`MODEL_ALIASES`)."""
    return MODEL_ALIASES.get(model, model)


def _scheduler(engine: dict[str, Any], concurrency: int) -> tuple[dict[str, int], float | None, bool | None]:
    """AISimulate scheduler limits, KV memory fraction and chunked-prefill switch from servesim's engine flags."""
    name = engine["name"]
    if name == "vllm":
        seqs, tokens = engine.get("max_num_seqs", concurrency), engine.get("max_num_batched_tokens", 8192)
        return {"max_sequences": seqs, "max_batched_tokens": tokens}, engine.get("gpu_memory_utilization"), None
    if name == "trtllm":
        seqs, tokens = engine.get("max_batch_size", concurrency), engine.get("max_num_tokens", 8192)
        chunked = engine.get("enable_chunked_context", False)  # servesim's TRT-LLM default (off)
        return {"max_sequences": seqs, "max_batched_tokens": tokens}, None, chunked
    seqs = engine.get("max_running_requests", concurrency)
    tokens = engine.get("chunked_prefill_size", 8192)
    return {"max_sequences": seqs, "max_batched_tokens": tokens}, engine.get("mem_fraction_static"), None


def quant_modes(row: dict[str, str], silicon: dict[str, str] | None) -> tuple[str, str]:
    """AISimulate's GEMM and MoE quantisation modes for a point: its evaluation sample's, else the precision's."""
    precision = (row.get("precision") or "").strip().lower() or "bf16"
    gemm = (silicon or {}).get("gemm_quant_mode") or PRECISION_QUANT.get(precision, precision)
    moe = (silicon or {}).get("moe_quant_mode") or gemm
    if "gpt-oss" in row["model"] and precision == "fp4":
        # The checkpoint's experts are mxfp4 and everything else bf16; the sample's "nvfp4"
        # has no AISimulate data for gpt-oss, nor Hopper fp4 GEMMs.  TensorRT-LLM on Blackwell
        # runs the experts with mxfp8 activations; elsewhere AISimulate has the weight-only kernel.
        blackwell_trt = row["backend"] == "trtllm" and row["system"] in BLACKWELL
        return "bfloat16", ("w4a8_mxfp4_mxfp8" if blackwell_trt else "w4a16_mxfp4")
    if "Kimi" in row["model"] and precision == "int4":
        # Kimi's int4 is weight-only on the routed experts (quantisation-aware trained); the
        # other layers are bf16 (AISimulate has no int4 GEMM data at all)
        return "bfloat16", "int4_wo"
    return gemm, moe


def aisimulate_config(row: dict[str, str], config: dict[str, Any], trace: Path,
                      silicon: dict[str, str] | None, database_mode: str | None = None) -> dict[str, Any]:
    """AISimulate ``predict`` config for one point (see the module docstring).

    ``database_mode`` (AISimulate's ``timing.database_mode``; None: its default, ``SILICON``)
    ``HYBRID`` lets it estimate the operators it has no measurement for instead of failing.
    """
    dep = config["deployment"]
    gemm, moe = quant_modes(row, silicon)
    scheduler, mem_fraction, chunked = _scheduler(dep["engine"], int(row["concurrency"]))
    kv_cache: dict[str, Any] = {"prefix_caching": prefix_caching(dep["engine"])}
    if mem_fraction is not None:
        kv_cache["capacity"] = {"memory_fraction": float(mem_fraction)}
    engine: dict[str, Any] = {
        "mode": "aggregated",
        "model": aisimulate_model((silicon or {}).get("model_path") or row["model"]),
        "hardware": row["system"],
        "backend": row["backend"],
        "gemm_quant_mode": gemm,
        "moe_quant_mode": moe,
        "workers": {"aggregated": {
            "parallelism": {"tensor": int(row["attention_tp"]), "attention_data": int(row["attention_dp"]),
                            "moe_tensor": int(row["moe_tp"]), "moe_expert": int(row["moe_ep"])},
            "scheduler": scheduler,
            "kv_cache": kv_cache,
        }},
    }
    kv = KV_QUANT.get(dep.get("kv_dtype"))
    if kv is not None:
        engine["kvcache_quant_mode"] = kv
    if chunked is not None:
        engine["enable_chunked_prefill"] = bool(chunked)
    if dep.get("speculative"):
        spec = SpeculativeConfig.model_validate(dep["speculative"])
        engine["nextn"] = spec.draft_tokens
        engine["nextn_accepted"] = expected_length(spec.rates()) - 1.0
    if database_mode is not None:
        engine["workers"]["aggregated"]["timing"] = {"database_mode": database_mode.upper()}
    return {
        "traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)],
                               "block_size": TRACE_BLOCK},
                    "load": {"type": "concurrency", "concurrency": int(row["concurrency"])}},
        "engine": engine,
    }


def request_means(lines: list[dict[str, Any]], warmup: int) -> tuple[float, float]:
    """Mean TTFT and mean TPOT (ms) of the measured requests of AISimulate's ``requests.jsonl``.

    Requests are matched to the trace by ``session_id`` ``request_<line number from 1>``;
    the first ``warmup`` lines are the warm-up.
    """
    ttft, tpot = [], []
    for r in lines:
        index = int(str(r["session_id"]).rsplit("_", 1)[-1]) - 1
        if index < warmup or r.get("terminal_status") != "completed":
            continue
        ttft.append(float(r["ttft_ms"]))
        if int(r["output_length"]) > 1:
            tpot.append((float(r["e2e_latency_ms"]) - float(r["ttft_ms"])) / (int(r["output_length"]) - 1))
    if not ttft:
        raise RuntimeError("no measured request completed")
    return sum(ttft) / len(ttft), (sum(tpot) / len(tpot) if tpot else math.nan)


def failure_message(text: str) -> str:
    """The line of AISimulate's output that says why it failed (its ``... failed: <why>`` line if any)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "failed:" in ln:
            return ln.split("failed:", 1)[1].strip()[:300]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors[-1] if errors else lines[-1] if lines else "no output")[:300]


def run_point(exe: str, row: dict[str, str], silicon: dict[str, str] | None, workdir: str,
              database_mode: str | None = None) -> dict[str, Any]:
    """One point through AISimulate: its output row (status ``ok``, ``unsupported: ...`` or ``error: ...``)."""
    out: dict[str, Any] = {k: row.get(k, "") for k in OUT_COLUMNS}
    out.update(predicted_mean_ttft_ms="", predicted_mean_tpot_ms="", host_seconds="")
    point = point_config(row)
    if point.config is None:
        out["status"] = point.status
        return out
    if row["system"] not in AISIM_SYSTEMS or row["backend"] not in AISIM_BACKENDS:
        out["status"] = f"unsupported: AISimulate has no {row['system']}/{row['backend']}"
        return out
    import yaml

    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        tmpd = Path(tmp)
        reqs, warmup = closed_loop_requests(point.config)
        write_trace(reqs, tmpd / "trace.jsonl")
        cfg = aisimulate_config(row, point.config, tmpd / "trace.jsonl", silicon, database_mode)
        (tmpd / "config.yaml").write_text(yaml.safe_dump(cfg))
        t0 = time.perf_counter()
        proc = subprocess.run([exe, "predict", "-c", str(tmpd / "config.yaml"), "--output-dir", str(tmpd / "out"),
                               "--overwrite", "--capture-per-request"], capture_output=True, text=True)
        out["host_seconds"] = f"{time.perf_counter() - t0:.2f}"
        result = tmpd / "out" / "requests.jsonl"
        if proc.returncode != 0 or not result.exists():
            out["status"] = "error: " + failure_message(proc.stderr + proc.stdout)
            return out
        try:
            with open(result) as f:
                ttft, tpot = request_means([json.loads(line) for line in f], warmup)
        except (RuntimeError, ValueError, KeyError) as exc:
            out["status"] = f"error: cannot read AISimulate's requests.jsonl: {exc}"
            return out
    out.update(predicted_mean_ttft_ms=f"{ttft:.4f}", predicted_mean_tpot_ms=f"{tpot:.4f}", status="ok")
    return out


def _rel_error(pred: str, meas: str) -> float | None:
    """Signed relative error pred / meas - 1, None where either is missing."""
    try:
        p, m = float(pred), float(meas)
    except (TypeError, ValueError):
        return None
    return p / m - 1.0 if m > 0 and math.isfinite(p) else None


def _errors(rows: list[dict[str, Any]], preds: list[dict[str, Any]], metric: str) -> list[float]:
    out = []
    for r, src in zip(rows, preds):
        e = _rel_error(src[f"predicted_mean_{metric}_ms"], r[f"measured_mean_{metric}_ms"])
        if e is not None:
            out.append(e)
    return out


def _mape_bias(errs: list[float]) -> str:
    if not errs:
        return "- | -"
    return f"{100 * sum(abs(e) for e in errs) / len(errs):.0f}% | {100 * sum(errs) / len(errs):+.0f}%"


def compare(aisim: list[dict[str, Any]], servesim_csv: str | None) -> None:
    """Markdown table: MAPE and signed bias of TTFT and TPOT for AISimulate and (if given)
    servesim, on the points both simulated: overall, per workload kind, per GPU/engine."""
    ours: dict[str, dict[str, str]] = {}
    if servesim_csv:
        with open(servesim_csv, newline="") as f:
            ours = {r["id"]: r for r in csv.DictReader(f) if r["status"] == "ok"}
    ok = [r for r in aisim if r["status"] == "ok"]
    print(f"AISimulate simulated {len(ok)} of {len(aisim)} points")
    both = [r for r in ok if r["id"] in ours] if ours else ok
    by_workload: dict[str, list[dict[str, Any]]] = {}
    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in both:
        by_workload.setdefault(r["workload"], []).append(r)
        by_group.setdefault(f"{r['system']}/{r['backend']}", []).append(r)
    groups = {"overall": both, **dict(sorted(by_workload.items())), **dict(sorted(by_group.items()))}
    sources = [("AISimulate", None)] + ([("servesim", ours)] if ours else [])
    cols = [f"{name} {m} MAPE | {name} {m} bias" for m in ("TTFT", "TPOT") for name, _ in sources]
    print("| points | n | " + " | ".join(cols) + " |")
    print("|---|---:|" + "---:|---:|" * len(cols))
    for name, rows in groups.items():
        cells = [_mape_bias(_errors(rows, rows if table is None else [table[r["id"]] for r in rows], metric))
                 for metric in ("ttft", "tpot") for _, table in sources]
        print(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    for metric in ("ttft", "tpot"):
        line = []
        for name, table in sources:
            errs = sorted(abs(e) for e in _errors(both, both if table is None else [table[r["id"]] for r in both],
                                                  metric))
            if errs:
                within = 100 * sum(e <= 0.2 for e in errs) / len(errs)
                line.append(f"{name} {within:.0f}% within 20%, median {100 * statistics.median(errs):.0f}%")
        print(f"{metric.upper()}: " + "; ".join(line))


def _worker(args: tuple[str, dict[str, str], dict[str, str] | None, str, str | None]) -> dict[str, Any]:
    return run_point(*args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aisimulate", metavar="EXE", help="the aisimulate command of its venv")
    ap.add_argument("--reuse", metavar="CSV", help="compare an earlier --out file of AISimulate's predictions "
                    "instead of running it again (they are deterministic; only servesim's side changed)")
    ap.add_argument("--points", help="calibration.csv-format measured points (not read with --reuse)")
    ap.add_argument("--split", choices=("fit", "holdout"), help="as servesim validate --split")
    ap.add_argument("--sample", type=int, help="as servesim validate --sample (seed 0)")
    ap.add_argument("--servesim", help="servesim validate --out CSV of the same points, for the side-by-side")
    ap.add_argument("--out", help="write AISimulate's predictions here (columns named as servesim validate's)")
    ap.add_argument("--model", action="append", help="only rows of this model id (repeatable)")
    ap.add_argument("--database-mode", choices=("silicon", "hybrid", "empirical", "sol"),
                    help="AISimulate's timing.database_mode (default: its own, silicon; hybrid estimates "
                         "operators it has not measured instead of failing)")
    ap.add_argument("--processes", type=int, default=1)
    args = ap.parse_args()
    if args.reuse:
        with open(args.reuse, newline="") as f:
            compare(list(csv.DictReader(f)), args.servesim)
        return 0
    if not args.points:
        ap.error("--points is required (unless --reuse compares an earlier file)")
    if not args.aisimulate or shutil.which(args.aisimulate) is None:
        print(f"--aisimulate: {args.aisimulate!r} is not an executable; expected the aisimulate command of "
              "the virtual environment AISimulate is installed in (see this script's docstring)", file=sys.stderr)
        return 2
    rows = sample_rows(split_rows(read_points(args.points), args.split), args.sample, 0)
    if args.model:
        rows = [r for r in rows if r["model"] in args.model]
    silicon = silicon_sample(args.aisimulate)
    work = [(args.aisimulate, r, silicon.get(r["id"]), tempfile.gettempdir(), args.database_mode) for r in rows]
    results: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.processes)) as pool:
        for i, res in enumerate(pool.map(_worker, work), 1):
            results.append(res)
            print(f"[{i}/{len(work)}] {res['id']}: {res['status']} "
                  f"{res['predicted_mean_ttft_ms'] or ''} {res['predicted_mean_tpot_ms'] or ''}",
                  file=sys.stderr, flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=OUT_COLUMNS)
            w.writeheader()
            w.writerows(results)
    compare(results, args.servesim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
