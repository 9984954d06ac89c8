"""Median cost of pricing one pass with the analytic model (64 decode requests + 1 prefill chunk).

Run: PYTHONPATH=src python benchmarks/bench_pass_time.py
"""

from __future__ import annotations

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


def bench(model, gpu, tp, ep, wd, kd, reps=20000, memo=False):
    st = AnalyticStepTime(load_model(model), load_gpu(gpu), tp=tp, ep=ep, weight_dtype=wd, kv_dtype=kd)
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
                st._cache.clear()
            t0 = time.perf_counter_ns()
            st.pass_time(pl)
            samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1000.0


if __name__ == "__main__":
    for c in CASES:
        cold = bench(*c, memo=False)
        warm = bench(*c, memo=True)
        print(f"{c[0]:40s} {c[1]:9s} tp={c[2]} ep={c[3]}: median {cold:6.2f} us/pass (no memo), {warm:6.2f} us (memo warm)")
