"""Median cost of pricing one pass (64 decode requests + 1 prefill chunk).

Run: PYTHONPATH=src python benchmarks/bench_pass_time.py [--model analytic|aic]

``aic`` prices with aiconfigurator-core's measured tables (``pip install 'servesim[aic]'``);
"no memo" clears its lookup caches before every pass, "memo warm" keeps them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.plan import PassPlan

CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 1, "bf16", "bf16"),
    ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", 4, 4, "fp8", "fp8"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", 8, 8, "fp4", "fp8"),
    ("openai/gpt-oss-120b", "b200_sxm", 2, 1, "fp4", "fp8"),
]


#: (model, gpu, tp, ep, weights, kv, engine) covered by the measured tables.
AIC_CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 1, "bf16", "bf16", "sglang"),
    ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", 4, 4, "fp8", "fp8", "sglang"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", 8, 8, "fp4", "fp8", "trtllm"),
    ("Qwen/Qwen3-32B", "h200_sxm", 2, 1, "bf16", "bf16", "vllm"),
]


def _analytic(model, gpu, tp, ep, wd, kd):
    st = AnalyticStepTime(load_model(model), load_gpu(gpu), tp=tp, ep=ep, weight_dtype=wd, kv_dtype=kd)
    return st, st._cache.clear


def _aic(model, gpu, tp, ep, wd, kd, engine):
    from servesim.perf.aic import AicStepTime

    st = AicStepTime(load_model(model), load_gpu(gpu), tp=tp, ep=ep, weight_dtype=wd, kv_dtype=kd, engine=engine)

    def clear():
        for f in (st._tokens, st._logits, st._prefill_seq, st._decode_seq):
            f.cache_clear()

    return st, clear


def bench(model, gpu, tp, ep, wd, kd, engine=None, reps=20000, memo=False):
    st, clear = _aic(model, gpu, tp, ep, wd, kd, engine) if engine else _analytic(model, gpu, tp, ep, wd, kd)
    rng = np.random.default_rng(0)
    plans = []
    for i in range(256):
        ctx = rng.integers(100, 8000, size=64)
        plans.append(PassPlan(prefill_new=np.array([int(rng.integers(256, 4096))]),
                              prefill_cached=np.array([int(rng.integers(0, 4096))]), decode_ctx=ctx))
    samples = []
    for r in range(reps // 256):
        for pl in plans:
            if not memo:
                clear()
            t0 = time.perf_counter_ns()
            st.pass_time(pl)
            samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000.0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("analytic", "aic"), default="analytic")
    ap.add_argument("--reps", type=int, default=20000)
    args = ap.parse_args()
    for c in (AIC_CASES if args.model == "aic" else CASES):
        cold = bench(*c, reps=args.reps, memo=False)
        warm = bench(*c, reps=args.reps, memo=True)
        print(f"{c[0]:40s} {c[1]:9s} tp={c[2]} ep={c[3]}: median {cold:6.2f} us/pass (no memo), {warm:6.2f} us (memo warm)")
