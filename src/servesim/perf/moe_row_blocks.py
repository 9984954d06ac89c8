"""The row block each fused-MoE kernel family tiles an expert's rows in.

A grouped GEMM pads every expert's rows up to whole row blocks, so its cost grows in steps of
the block, not with the rows.  The block is the kernel's own choice, made from the rows an
expert is expected to get; the op model (:meth:`servesim.perf.kernels.OpModel.moe`) asks the
family the engine runs for it:

- the engines' fused Triton MoE (SGLang's, vLLM's): 16 rows while experts get few, 64 beyond
  (their tuned configurations), the op model's default;
- Marlin's mixed-input MoE (:func:`marlin_row_block`);
- OpenAI's ``triton_kernels`` grouped matmul (:func:`ogs_row_block`), the MXFP4 kernel the
  engines serve gpt-oss with on Hopper.
"""

from __future__ import annotations

import numpy as np

#: Marlin's MoE row blocks, smallest first.  vLLM's ``fused_marlin_moe`` also has 8-row blocks, but
#: Marlin's tensor-core instructions are 16 rows tall (``mma.m16n8k16``), so an 8-row block costs
#: a 16-row one: fitted with 8 rows, vLLM's B200 int4 MoE scores 21% median error, with 16 rows 8%.
MARLIN_ROW_BLOCKS = (16.0, 32.0, 48.0, 64.0)
#: The smallest and largest row blocks of ``triton_kernels``' grouped matmul on NVIDIA GPUs.
OGS_ROW_BLOCK_RANGE = (16.0, 128.0)


def marlin_row_block(rows_per_expert):
    """The row block Marlin's fused MoE runs (the int4 experts' kernel in vLLM, and SGLang's on
    Hopper): the smallest of :data:`MARLIN_ROW_BLOCKS` that an expert's average rows (the
    layer's token-expert pairs over its local experts) fill to less than 90%, else the largest,
    as vLLM's ``fused_marlin_moe`` chooses it.  Its cost grows in steps of 16 rows where the fused
    Triton kernels' row tile jumps from 16 rows to 64 (an int4 Kimi prefill of 1k tokens at TP 8
    gives each expert ~21 rows: 32-row blocks, not 64)."""
    avg = np.asarray(rows_per_expert, float)
    tm = np.full_like(avg, MARLIN_ROW_BLOCKS[-1])
    for b in reversed(MARLIN_ROW_BLOCKS):
        tm = np.where(avg / b < 0.9, b, tm)
    return tm


def ogs_row_block(rows_per_expert):
    """The row block of ``triton_kernels``' grouped matmul (``matmul_ogs``: vLLM's, SGLang's and
    TensorRT-LLM's TRITON backend's MXFP4 experts on Hopper): the expected rows of an expert (the
    batch's token-expert pairs over all the model's experts, remote ones included) rounded up to
    a power of two, within :data:`OGS_ROW_BLOCK_RANGE` (its default NVIDIA flags).

    Measured (aiconfigurator moe_perf, gpt-oss-120b's experts on H200, vLLM's and TensorRT-LLM's
    tables): the latency is flat from 768 to 1,024 tokens and from 1,536 to 2,048 (24-32 and
    48-64 rows an expert: 32- and 64-row blocks) and rises ~1.45x between the two, where the
    fused Triton kernels' 64-row tile prices both alike."""
    avg = np.maximum(np.asarray(rows_per_expert, float), 1.0)
    lo, hi = OGS_ROW_BLOCK_RANGE
    return np.clip(np.exp2(np.ceil(np.log2(avg))), lo, hi)
