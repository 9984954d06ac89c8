"""servesim's decode attention of a DeepSeek-sparse-attention model against the measured DSA modules.

Run: PYTHONPATH=src python benchmarks/dsa_modules.py   (needs the ``aic`` extra; a few seconds)

aiconfigurator-core times the whole attention block of a DSA layer during decode
(``dsa_generation_module_perf``: the down and up projections, the indexer's projections, its
FP8 MQA logits over the context and its top-k, sparse MLA over the chosen keys, the output
projection) for SGLang, TensorRT-LLM and vLLM on H100 / H200 / B200 / B300.  Of the models it
measures servesim bundles GLM-5 (64 heads: a row's ``num_heads`` per GPU gives the tensor-parallel
size).  Each row (batch ``batch_size`` of requests at context ``step``) is priced as the same
part of a decode pass of :class:`~servesim.perf.analytic.AnalyticStepTime` (GLM-5, the row's
GEMM and KV formats, the engine's kernel rates, uncalibrated), per layer: the attention
projections at ``batch_size`` tokens, the decode attention (indexer over the whole context,
sparse MLA over min(context, top-k)), and the attention ops' fixed cost.

Prints, per engine and GPU, the median ratio servesim / measured and the median of what the
measurement has beyond the price at small batches (≤ 4 requests, context ≤ 1,024), in
microseconds and in the GPU's kernel latencies (``GPUSpec.kernel_latency_us``): a fixed cost the
op model lacks shows as the same count of kernel latencies on every GPU, host dispatch in the
collector as the same microseconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.engine_kernels import kernel_rates

SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")
#: the tables' model names servesim prices, and the bundled model they are
MODELS = {"zai-org/GLM-5": "zai-org/GLM-5", "zai-org/GLM-5-FP8": "zai-org/GLM-5"}
WEIGHTS = {"fp8_block": "fp8", "bfloat16": "bf16", "nvfp4": "fp4"}
KV = {"fp8": "fp8", "bfloat16": "bf16"}


def _rows(root: Path):
    """(system, engine, rows of every version) of each DSA decode-module table."""
    import pandas as pd
    import pyarrow.parquet as pq

    for system in SYSTEMS:
        for f in sorted((root / system / "sparse_attention").glob("*/*/dsa_generation_module_perf.parquet")):
            df = pq.read_table(f).to_pandas()
            df = df[df.model.isin(MODELS) & df.gemm_type.isin(WEIGHTS) & df.kv_cache_dtype.isin(KV)
                    & ~df.kernel_source.str.contains("skip_indexer") & (df.latency > 0)]
            if len(df):
                yield system, f.parts[-3], pd.DataFrame(df)


def price(df, system: str, engine: str):
    """servesim's seconds per layer for each row of one engine's table on one GPU."""
    gpu = load_gpu(system)
    rates = kernel_rates(engine, gpu)
    out = np.full(len(df), np.nan)
    for (model, heads, wt, kv), idx in df.groupby(["model", "num_heads", "gemm_type", "kv_cache_dtype"]).groups.items():
        arch = load_model(MODELS[model])
        if arch.num_attention_heads % int(heads):
            continue
        st = AnalyticStepTime(arch, gpu, tp=arch.num_attention_heads // int(heads), weight_dtype=WEIGHTS[wt],
                              kv_dtype=KV[kv], kernel_rates=rates)
        rows = df.loc[idx]
        for pos, b, ctx in zip(df.index.get_indexer(idx), rows.batch_size.values, rows.step.values.astype(float)):
            attn = float(st._decode_attn(int(b), b * ctx, b * min(ctx, st._cap)))
            t = attn + st._gemms_time(st._attn_gemms, int(b)) + st._attn_fixed + st._attn_dec_fixed
            out[pos] = t / arch.num_full_layers
    return out


def main(argv: list[str] | None = None) -> int:
    from aiconfigurator_core.sdk import perf_database

    argparse.ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)
    root = Path(perf_database.get_systems_paths()[0]) / "data"
    print(f"{'engine':<8} {'gpu':<10} {'rows':>5} {'servesim/measured':>18} {'extra us (b<=4)':>16} {'in kernel latencies':>20}")
    for system, engine, df in _rows(root):
        df = df.reset_index(drop=True)
        pred = price(df, system, engine)
        ok = np.isfinite(pred) & (df.step.values >= 256) & (df.step.values <= 8192) & (df.batch_size.values <= 256)
        if not ok.any():
            continue
        meas = df.latency.values * 1e-3
        small = ok & (df.batch_size.values <= 4) & (df.step.values <= 1024)
        extra = np.median(meas[small] - pred[small]) * 1e6 if small.any() else float("nan")
        klat = load_gpu(system).kernel_latency_us
        print(f"{engine:<8} {system:<10} {int(ok.sum()):>5} {np.median(pred[ok] / meas[ok]):>18.2f} "
              f"{extra:>16.1f} {extra / klat:>20.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
