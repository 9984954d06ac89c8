"""Digest the per-request results of a fixed set of configurations, to prove a speed-up changes nothing.

Speed work on the engines must keep every result byte for byte.  This script runs a list of
small configurations through ``servesim.api.predict`` — the block-pool engines (vLLM,
TensorRT-LLM) on their fast and general paths: fast and step mode, a KV cache small enough
for preemptions, ``lfu`` / ``fifo`` / ``belady`` eviction, block size 8, prefix caching off, a
host KV tier, ``long_prefill_token_threshold`` with ``max_num_seqs`` 64, KV event sinks,
speculative decoding, disaggregation — and SGLang (fast and step mode, retractions, pages of
16, a receive interval with a load-aware router, speculative decoding) — and writes, per
configuration, the sha256 of every per-request column and of the inter-token-gap samples.
Record the digests of the unmodified tree first, then compare after every change::

    PYTHONPATH=/tmp/base/src python benchmarks/check_identical.py --out /tmp/base.json
    python benchmarks/check_identical.py --out /tmp/new.json --compare /tmp/base.json

Pass times come from the ``linear`` step-time model (fixed coefficients), so that edits to
the analytic model or its calibration files do not show up as engine differences; one
configuration (``analytic-vllm``) uses the analytic default and may differ for that reason
alone.  The two ``mooncake-*`` configurations need the trace of
``benchmarks/bench_simulator.py`` and are skipped without it.  ``--only NAME``
(repeatable) runs a subset; ``--list`` prints the names.  About a minute in all.

A change that regroups decode stretches (longer or shorter ones) legitimately moves pass end
times in their last bits, so its digests differ.  ``--against-step`` checks such a change
instead: it runs each fast-mode configuration in step mode too, on the same tree, and
requires every per-request timestamp to agree within 1e-9 (relative) and every count, status
and worker exactly::

    python benchmarks/check_identical.py --against-step --only sglang --only sglang-small
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import time
from collections.abc import Callable

import numpy as np

#: Pass times that depend on the pass's composition, independent of perf/ calibration files.
LINEAR = {"model": "linear", "base_s": 0.006, "per_prefill_token_s": 2.5e-5, "per_decode_request_s": 6e-5,
          "per_context_token_s": 4e-9, "per_prefill_attention_pair_s": 1e-11}


def base(engine: dict, n: int = 1000, workers: int = 2, rate: float = 10.0) -> dict:
    """A shared-prefix synthetic workload on ``workers`` Llama-3.1-8B workers (H100)."""
    return {
        "seed": 7,
        "workload": {
            "kind": "synthetic", "num_requests": n,
            "arrival": {"process": "poisson", "rate": rate},
            "input": {"dist": "lognormal", "median": 2000, "sigma": 0.7, "max": 12000},
            "output": {"dist": "lognormal", "median": 200, "sigma": 0.7, "max": 1200},
            "prefix": {"num_groups": 24, "length": 1024, "share": 0.6},
        },
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": workers,
                       "engine": engine},
        "perf": dict(LINEAR),
        "output": {"dir": None, "timeseries": False},
    }


def bench(n: int, engine: str) -> dict:
    """The simulator benchmark's synthetic workload (benchmarks/bench_simulator.py), linear pass times."""
    from bench_simulator import synthetic

    return dict(synthetic(n, engine), perf=dict(LINEAR))


def trace(engine: str) -> dict | None:
    """The benchmark's Mooncake conversation trace (8 workers), linear pass times; None if absent."""
    from bench_simulator import TRACE, mooncake

    return dict(mooncake(engine), perf=dict(LINEAR)) if TRACE.exists() else None


def with_(cfg: dict, **paths) -> dict:
    """A copy of ``cfg`` with dotted-path overrides (``simulation__mode="step"``)."""
    out = copy.deepcopy(cfg)
    for path, value in paths.items():
        *head, last = path.split("__")
        d = out
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return out


SMALL_V = 0.3  # gpu_memory_utilization that leaves vLLM a few thousand blocks: preemptions
SMALL_T = 0.3  # TensorRT-LLM's free_gpu_memory_fraction, same idea
SMALL_S = 0.25  # SGLang's mem_fraction_static: a KV pool of a few ten thousand tokens, retractions


def configs() -> dict[str, Callable[[], dict]]:
    """Name → config builder (built lazily so ``--only`` skips the rest)."""
    v = {"name": "vllm"}
    vs = dict(v, gpu_memory_utilization=SMALL_V)
    t = {"name": "trtllm"}
    ts = dict(t, free_gpu_memory_fraction=SMALL_T)
    sg = {"name": "sglang"}
    sgs = dict(sg, mem_fraction_static=SMALL_S)
    step = {"simulation__mode": "step"}
    return {
        "vllm": lambda: base(v),
        "vllm-step": lambda: with_(base(v), **step),
        "vllm-small": lambda: base(vs, n=1200, rate=20.0),
        "vllm-small-step": lambda: with_(base(vs, n=1200, rate=20.0), **step),
        "vllm-lfu-small": lambda: base(dict(vs, eviction_policy="lfu"), n=1200, rate=20.0),
        "vllm-fifo-bs8-small": lambda: base(dict(vs, eviction_policy="fifo", block_size=8), n=1200, rate=20.0),
        "vllm-belady-small": lambda: base(dict(vs, eviction_policy="belady"), n=900, rate=20.0),
        "vllm-nocache": lambda: base(dict(v, enable_prefix_caching=False)),
        "vllm-nocache-small": lambda: base(dict(vs, enable_prefix_caching=False), n=900, rate=20.0),
        "vllm-bs8": lambda: base(dict(v, block_size=8)),
        "vllm-host-small": lambda: base(dict(vs, host_kv_gb=4), n=1200, rate=20.0),
        "vllm-threshold-seqs64": lambda: base(dict(v, long_prefill_token_threshold=512, max_num_seqs=64),
                                              rate=20.0),
        "vllm-threshold-seqs64-step": lambda: with_(
            base(dict(v, long_prefill_token_threshold=512, max_num_seqs=64), rate=20.0), **step),
        "vllm-kv-events": lambda: with_(base(vs, n=900, rate=20.0), output__kv_events=True),
        "vllm-kv-aware": lambda: with_(base(v), deployment__router="kv_aware"),
        "vllm-spec": lambda: with_(base(v, n=500),
                                   deployment__speculative={"method": "mtp", "draft_tokens": 3,
                                                            "mean_accepted_length": 2.5}),
        "vllm-disagg": lambda: with_(base(v, n=500, workers=1),
                                     deployment__disaggregation={"prefill": {"workers": 1},
                                                                 "decode": {"workers": 1}}),
        "vllm-bench": lambda: bench(3000, "vllm"),
        "trtllm": lambda: base(t),
        "trtllm-step": lambda: with_(base(t), **step),
        "trtllm-small": lambda: base(ts, n=1200, rate=20.0),
        "trtllm-small-step": lambda: with_(base(ts, n=1200, rate=20.0), **step),
        "trtllm-lfu-small": lambda: base(dict(ts, eviction_policy="lfu"), n=1200, rate=20.0),
        "trtllm-host-small": lambda: base(dict(ts, host_kv_gb=4), n=900, rate=20.0),
        "trtllm-maxutil-small": lambda: base(dict(ts, capacity_scheduler_policy="MAX_UTILIZATION"), n=1200,
                                             rate=20.0),
        "trtllm-chunked-small": lambda: base(dict(ts, enable_chunked_context=True, max_num_tokens=2048,
                                                  max_batch_size=64), n=1200, rate=20.0),
        "trtllm-batch-wait": lambda: base(dict(t, batch_wait_timeout_iters=8, batch_wait_max_tokens_ratio=0.5),
                                          rate=20.0),
        "trtllm-kv-events": lambda: with_(base(ts, n=900, rate=20.0), output__kv_events=True),
        "trtllm-spec": lambda: with_(base(t, n=500),
                                     deployment__speculative={"method": "mtp", "draft_tokens": 3,
                                                              "mean_accepted_length": 2.5}),
        "trtllm-bench": lambda: bench(3000, "trtllm"),
        "trtllm-disagg": lambda: with_(base(t, n=500, workers=1),
                                       deployment__disaggregation={"prefill": {"workers": 1},
                                                                   "decode": {"workers": 1}}),
        "mooncake-vllm": lambda: trace("vllm"),
        "mooncake-trtllm": lambda: trace("trtllm"),
        "sglang": lambda: base(sg),
        "sglang-step": lambda: with_(base(sg), **step),
        "sglang-small": lambda: base(sgs, n=1200, rate=20.0),
        "sglang-small-step": lambda: with_(base(sgs, n=1200, rate=20.0), **step),
        "sglang-page16-small": lambda: base(dict(sgs, page_size=16), n=1200, rate=20.0),
        "sglang-recv4-least-loaded": lambda: with_(base(dict(sg, scheduler_recv_interval=4), rate=20.0),
                                                   deployment__router="least_loaded"),
        "sglang-spec": lambda: with_(base(sg, n=500),
                                     deployment__speculative={"method": "mtp", "draft_tokens": 3,
                                                              "mean_accepted_length": 2.5}),
        "sglang-bench": lambda: bench(3000, "sglang"),
        "analytic-vllm": lambda: with_(base(v), perf={"model": "analytic"}),
    }


def _sha(a) -> str:
    arr = np.ascontiguousarray(np.asarray(a))
    return hashlib.sha256(arr.dtype.str.encode() + arr.tobytes()).hexdigest()


def digest(pred) -> dict:
    """sha256 of every per-request column, the id and reason lists, the ITL samples and the summary."""
    rec = pred.recorder
    out: dict[str, str | int] = {"requests": int(rec.size)}
    for name in (*rec.FLOAT_COLUMNS, *rec.INT_COLUMNS, *sorted(rec.extra_columns)):
        out[name] = _sha(rec.column(name))
    out["request_id"] = hashlib.sha256("\n".join(rec.request_id).encode()).hexdigest()
    out["reason"] = hashlib.sha256("\n".join(rec.reason).encode()).hexdigest()
    for label, samples in (("itl", rec.itl), ("itl_warmup", rec.itl_warmup)):
        v, w = samples.arrays()
        out[label] = _sha(v) + ":" + _sha(w)
    out["retractions_total"] = int(rec.column("retractions").sum())
    out["summary"] = hashlib.sha256(json.dumps(pred.summary, sort_keys=True).encode()).hexdigest()
    return out


def run(names: list[str]) -> dict[str, dict]:
    from servesim.api import predict

    table = configs()
    results: dict[str, dict] = {}
    for name in names:
        cfg = table[name]()
        if cfg is None:
            print(f"{name:28} skipped (input not found)", file=sys.stderr)
            continue
        t0 = time.process_time()
        results[name] = digest(predict(cfg))
        print(f"{name:28} {results[name]['requests']:5d} requests, "
              f"{results[name]['retractions_total']:4d} retractions, {time.process_time() - t0:6.2f} s CPU",
              file=sys.stderr)
    return results


#: Per-request columns compared within 1e-9 by ``--against-step``; the rest must be equal.
TIME_COLUMNS = ("arrival", "first_scheduled", "first_token", "second_token", "last_token", "finish")
EXACT_COLUMNS = ("generated", "emissions", "cached_tokens", "host_cached_tokens", "retractions", "status",
                 "worker")


def against_step(names: list[str]) -> list[str]:
    """Names of fast-mode configurations whose results differ from step mode's (see the module doc)."""
    from servesim.api import predict

    table = configs()
    bad = []
    for name in names:
        cfg = table[name]()
        if cfg is None or cfg.get("simulation", {}).get("mode") == "step":
            continue
        step = copy.deepcopy(cfg)
        step.setdefault("simulation", {})["mode"] = "step"
        fast_rec, step_rec = predict(cfg).recorder, predict(step).recorder
        diff = [c for c in TIME_COLUMNS
                if not np.allclose(fast_rec.column(c), step_rec.column(c), rtol=1e-9, atol=0, equal_nan=True)]
        diff += [c for c in EXACT_COLUMNS if not np.array_equal(fast_rec.column(c), step_rec.column(c))]
        print(f"{name:28} " + (f"DIFFERS from step mode in {', '.join(diff)}" if diff else "equals step mode"),
              file=sys.stderr)
        if diff:
            bad.append(name)
    return bad


def compare(new: dict[str, dict], old: dict[str, dict]) -> list[str]:
    """Names of configurations whose digests differ (or that one side lacks)."""
    bad = []
    for name in sorted(set(new) | set(old)):
        if name not in new or name not in old:
            print(f"{name}: only in {'new' if name in new else 'old'}")
            continue
        diff = [k for k in sorted(set(new[name]) | set(old[name])) if new[name].get(k) != old[name].get(k)]
        if diff:
            bad.append(name)
            print(f"{name}: DIFFERS in {', '.join(diff)}")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the digests here (JSON)")
    ap.add_argument("--compare", help="digests of the reference tree (JSON) to compare with")
    ap.add_argument("--only", action="append", help="run only this configuration (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the configuration names and exit")
    ap.add_argument("--against-step", action="store_true",
                    help="compare each fast-mode configuration with step mode (1e-9) instead of digests")
    args = ap.parse_args()
    if args.list:
        print("\n".join(configs()))
        return 0
    names = args.only or list(configs())
    if args.against_step:
        bad = against_step(names)
        print(f"{'all equal step mode' if not bad else 'differ from step mode: ' + ', '.join(bad)}")
        return 1 if bad else 0
    results = run(names)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            old = json.load(f)
        old = {k: v for k, v in old.items() if k in results}
        bad = compare(results, old)
        print(f"{len(results) - len(bad)} of {len(results)} configurations identical"
              + (f"; differ: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
