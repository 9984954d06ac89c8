"""Analytic op-level step-time model (the built-in default).

(Longer than 600 lines because it is one compiled class, :class:`AnalyticStepTime`: its pricing
methods share the coefficients it precomputes and call one another as C methods
(``analytic.pxd``); split over modules, the per-pass calls between them would go through Python.)

A pass is priced layer group by layer group from its real composition (every prefill chunk,
every decoding request's own context).  Each op's cost comes from the op model of
:mod:`servesim.perf.kernels` (checked kernel by kernel against measured tables, see
docs/physics.md)::

    t_op = kernels × t_kernel + max(compute over whole tiles and waves, bytes / bandwidth)

with efficiencies capped by the GPU's measured ceilings; the constants are fields of
:class:`AnalyticParams` (calibratable within their physical ranges) or facts of the GPU.

Ops per decoder layer (per GPU of the worker):

- attention projections (GQA q/k/v/o; MLA q_a/q_b/kv_a/kv_b/o; DSA indexer), as GEMMs over
  the pass's tokens; linear-attention in/out projections;
- prefill attention per chunk: causal pairs ``new × (cached + (new + 1)/2)`` (top-k-capped
  where the layer is sparse; a sliding-window layer's whole key blocks,
  ``attention_blocks.window_key_blocks``), reading the chunk's prefix KV;
- decode attention: each request reads its own context's KV (window- or top-k-capped), plus
  ``attn_decode_ctx_overhead_tokens`` per request (kernel fixed cost) and, for GQA, its work
  units' own time (``attn_decode_unit_s`` per KV head, or per query head where the engine's
  kernel does not take the group, over the SMs) as the tokens streamed in it; MLA decode is absorbed
  (reads the latent, computes over ``2·kv_lora_rank + rope`` per head);
- linear attention: per-token recurrent update FLOPs; state read+write per request; the
  chunked prefill kernel also waits on the longest chunk's chunk-to-chunk state chain;
- MLP, or MoE: router; routed experts as grouped GEMMs whose weights are read only for the
  experts the pass touches — expected distinct experts ``E × (1 − (1 − k/E)^tokens)``; each
  touched expert's rows padded to the grouped GEMM's row tile (16 rows at small batch, vLLM's
  fused-MoE default, so a decode pass with one or two rows per expert streams weights), and
  each touched expert costing ``moe_expert_s`` on top of its weights' bytes;
  with expert parallelism the layer reads the weights of the rank that touches the most of its
  local experts (:func:`expected_busiest_touched`: 4 decode tokens × 8 of 256 experts touch
  6.6 of the busiest of 8 ranks' 32 experts, 3.8 on average), and unless the engine dispatches
  by all-to-all (``moe_all_to_all``) each rank's kernel runs over the whole batch's
  ``tokens × k`` slots, the remote experts' masked (``OpModel.moe(slots=...)``, at the engine's
  ``moe_masked`` rate); shared experts; dense layers;
- elementwise (norms, residuals, activation, rope) as memory traffic plus their kernels;
- tensor-parallel all-reduce (2 per layer): one-shot or two-shot, latency + bandwidth against
  the message size and TP (``OpModel.all_reduce``); a model whose q/k norms span every head
  (MiniMax-M2) adds one small all-reduce per attention layer; with attention data parallelism,
  instead of the MLP all-reduce, the tokens' way to the experts and back: under expert
  parallelism an NCCL all-gather of the ranks' hidden states and a reduce-scatter of the
  outputs, or where the engine dispatches by all-to-all, the dispatch + combine; every
  collective's time times ``comm_time_scale`` (1 by default: GEMM efficiency that falls
  with TP is modelled by tile and wave quantization, not absorbed here).

Per pass: LM head for one token per prefill chunk plus each decode token; a fixed overhead
(scheduling + launch), smaller for decode-only batches that replay a CUDA graph; optional
per-request CPU overhead.  (Host-tier KV loads are not priced here: the engine sets the
plan's ``host_load_s`` from its own ``host_link_gbs`` and the worker adds or overlaps it.)

Attention data parallelism (``attention_dp > 1``): a plan with per-rank sub-plans
(``PassPlan.ranks``, from engines/attention_dp.py) is priced rank by rank — the slowest
rank's attention part plus the shared expert layers over all tokens (section "attention
DP, per rank").  A plan without ranks (e.g. a speculative draft estimate) falls back to
spreading its requests evenly over the ranks: attention work at 1/dp of the pass, MoE at
the whole pass.

Precisions: see :mod:`servesim.perf.precision`.  Attention math runs at the bf16 peak.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from servesim.compiled import compiled_module
from servesim.errors import ModelError
from servesim.hardware.gpu import GPUSpec
from servesim.models.arch import ModelArch
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.engine_kernels import NO_RATES, KernelRates
from servesim.perf.expert_balance import expected_busiest_touched
from servesim.perf.attention_blocks import (ATTN_BLOCK, packed_window_key_blocks, prefill_exposed_bytes,
                                            window_key_blocks)
from servesim.perf.gemm_set import GemmSet
from servesim.perf.kernels import (ATTN_CTA_HEAD_DIM, ATTN_KERNELS, ELEMENTWISE_KERNELS, LINEAR_ATTN_DECODE_KERNELS,
                                   LINEAR_ATTN_KERNELS, MLA_HEAD_BLOCK, OpModel, ramped)
from servesim.perf.launches import eager_ops_per_layer
from servesim.perf.memory import Layout, attention_params_per_gpu
from servesim.perf.plan import PassPlan, ends_from_durations
from servesim.perf.precision import fp4_output_projection, kv_bytes, layer_dtypes, weight_bytes

#: The compiled decode-stretch pricing, or None (bound at import: servesim/compiled.py's rule).
_core = compiled_module("perf._stretch_core")

#: ``ndarray.sum`` without its Python-level wrapper (numpy/_core/_methods.py): the same
#: reduction, about a microsecond less per call, which a pass pays once or twice.
_SUM = np.add.reduce

#: Bytes per token of the q/k-norm all-reduce of a model that norms across heads: q's and k's
#: fp32 sums of squares, reduced together.
QK_NORM_BYTES_PER_TOKEN = 8.0


def _attention_gemm_shapes(m: ModelArch, tp: int) -> list[tuple[float, float, bool]]:
    """(n, k, whether it is the output projection) of one softmax-attention layer's projections
    on one GPU of a tp group.

    GQA: fused q/k/v, then o.  MLA: the replicated down-projections (q_a, kv_a), the split
    up-projections (q_b, kv_b) and o.  Whatever :func:`attention_params_per_gpu` counts beyond
    these (a sparse-attention indexer) is one more GEMM on the hidden state.
    """
    h, nq = m.hidden_size, m.num_attention_heads
    if m.is_mla:
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        shapes = [(m.kv_lora_rank + m.qk_rope_head_dim, h, False)]
        if m.q_lora_rank:
            shapes += [(m.q_lora_rank, h, False), (nq * qk / tp, m.q_lora_rank, False)]
        else:
            shapes.append((nq * qk / tp, h, False))
        shapes += [(nq * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank, False),
                   (h, nq * m.v_head_dim / tp, True)]
    else:
        hd = m.head_dim
        q = nq * hd * (2 if m.attn_output_gate else 1) / tp
        shapes = [(q + 2 * m.kv_heads_per_gpu(tp) * hd, h, False), (h, nq * hd / tp, True)]
    rest = attention_params_per_gpu(m, tp) - sum(n * k for n, k, _ in shapes)
    if rest > 1.0:
        shapes.append((rest / h, h, False))
    return shapes


class AnalyticStepTime:
    """Roofline model of one worker's forward pass; see module docstring."""

    #: :meth:`decode_stretch_ends` takes a wrapper's per-pass overhead (``extra``).
    fuses_overhead_into_ends = True

    def __init__(
        self,
        model: ModelArch,
        gpu: GPUSpec,
        tp: int = 1,
        ep: int = 1,
        weight_dtype: str = "bf16",
        kv_dtype: str = "bf16",
        params: AnalyticParams | None = None,
        attention_dp: int = 1,
        eager_launch: bool = False,
        kernel_rates: KernelRates = NO_RATES,
        moe_all_to_all: bool = False,
        moe_kernel: str | None = None,
    ) -> None:
        """``eager_launch``: passes outside a CUDA graph dispatch every operation from Python
        (the engine plan's ``eager_launch``), paying ``eager_op_s`` per operation (perf/launches.py).
        ``kernel_rates``: the serving engine's own kernels' measured rates relative to the op
        model (perf/engine_kernels.py: its prefill attention and fused-MoE GEMMs, and whether
        its per-tensor fp8 GEMMs get their activations quantized by the producing kernel — not
        for a checkpoint with block-scaled fp8, quantized per token group in a kernel of its own).
        ``moe_all_to_all``: under expert parallelism the engine sends each token only to its
        routed experts' ranks (the engine plan's ``moe_all_to_all``: DeepEP, pplx, TensorRT-LLM's
        NVLink all-to-all).  False: every expert-parallel rank runs its fused MoE over the whole
        batch — replicated by tensor parallelism, or all-gathered from the attention-DP ranks —
        with the remote experts' ids masked (SGLang's StandardDispatcher, vLLM's expert map and
        its all-gather / reduce-scatter all2all manager, TensorRT-LLM without all-to-all).
        ``moe_kernel``: the fused-MoE kernel path the engine runs the routed experts on (the engine
        plan's ``moe_kernel``, e.g. TensorRT-LLM's CUTLASS or TRTLLM backend), priced with that
        path's rates (``kernels.OpModel.moe(kernel=...)``); None: the path the format's rates describe."""
        self.model, self.gpu = model, gpu
        self.eager_launch = eager_launch
        self.moe_all_to_all = moe_all_to_all
        self.moe_kernel = moe_kernel
        if kernel_rates.act_quant_fused and model.fp8_block_scales:
            kernel_rates = replace(kernel_rates, act_quant_fused=False)
        if not model.fp8_block_scales:  # fp8 experts, if any, scaled per tensor (KernelRates.fp8_per_tensor)
            kernel_rates = replace(kernel_rates, fp8_per_tensor=True)
        self.kernel_rates = kernel_rates
        self.layout = Layout(tp=tp, ep=ep, attention_dp=attention_dp)
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.p = p = params or AnalyticParams()
        # Read per pass: kept as plain numbers (an attribute of the params model costs more).
        self._gemm_eff_max, self._gemm_half = p.gemm_eff_max, p.gemm_half_tokens
        self._pre_eff_max, self._pre_half = p.attn_prefill_eff_max, p.attn_prefill_half_tokens
        if model.sliding_window and model.index_topk:
            raise ModelError(f"{model.name}: both a sliding window and sparse top-k attention; unsupported")
        self._precompute()
        self._cache: dict[tuple, float] = {}
        #: Memo of :meth:`_rank_local_tokens` (attention data parallelism).
        self._rank_cache: dict[tuple, float] = {}

    # ------------------------------------------------------------ precompute
    def _precompute(self) -> None:
        m, g, p, lay = self.model, self.gpu, self.p, self.layout
        tp, gpus, dp = lay.tp, lay.gpus, lay.attention_dp
        dt = layer_dtypes(self.weight_dtype, m.family, m.is_moe,
                          fp4_o_proj=m.is_mla and fp4_output_projection(m.name, self.weight_dtype, g.vendor))
        self._ops = ops = OpModel(g, p, self.kernel_rates)
        bw = g.memory_bandwidth_gbs * 1e9
        self._bw_eff = ops.bw_eff
        peak_attn = ops.peak_attn
        h = m.hidden_size
        L = m.num_layers
        n_soft = m.num_full_layers + m.num_sliding_layers

        # GEMMs by real shape, (layers, n, k, dtype) per GEMM (gemm_set.GemmSet): the attention
        # group runs on each attention rank's tokens, the MLP group on the whole pass's
        attn_g: list[tuple[float, float, float, str]] = []
        mlp_g: list[tuple[float, float, float, str]] = []
        if n_soft:
            attn_g += [(n_soft, n, k, dt["attention_out"] if out else dt["attention"])
                       for n, k, out in _attention_gemm_shapes(m, tp)]
        if m.num_linear_layers:
            lin = m.linear_attention_params_per_layer() / tp
            attn_g.append((m.num_linear_layers, lin / h, h, dt["linear_attention"]))
        mlp_split = gpus if m.is_moe else tp
        if m.num_dense_layers and m.intermediate_size:
            i_loc = m.intermediate_size / mlp_split
            (mlp_g if m.is_moe else attn_g).extend(
                [(m.num_dense_layers, 2 * i_loc, h, dt["dense_mlp"]), (m.num_dense_layers, h, i_loc, dt["dense_mlp"])])
        nm = m.num_moe_layers
        if nm:
            mlp_g.append((nm, m.num_experts, h, dt["router"]))
            if m.shared_expert_intermediate_size:
                si = m.shared_expert_intermediate_size / gpus
                mlp_g += [(nm, 2 * si, h, dt["shared_experts"]), (nm, h, si, dt["shared_experts"])]
        self._attn_gemms = GemmSet(ops, attn_g)
        self._mlp_gemms = GemmSet(ops, mlp_g)
        # routed experts
        if nm:
            E, k = m.num_experts, m.experts_per_token
            self._moe_log_miss = math.log1p(-k / E) if k < E else -math.inf
            # the (token, top-k) slots of each rank's kernel input per token of the pass: the
            # routed pairs only (None) where an all-to-all delivers them, else every token's k
            # slots, the remote experts' masked (the whole batch on every expert-parallel rank)
            masked = lay.ep > 1 and not self.moe_all_to_all
            self._moe = dict(E=E, k=k, local=E / lay.ep, ep=lay.ep, moe_tp=lay.moe_tp, layers=nm, busiest={},
                             memo={}, dtype=dt["routed_experts"], slots_per_token=float(k) if masked else None,
                             kernel=self.moe_kernel)
        else:
            self._moe = None
        # elementwise: norms, residual adds, activation (traffic per token and their kernels)
        self._elem_s = L * p.elementwise_bytes_per_token * h * 2.0 / self._bw_eff
        self._elem_fixed = L * ELEMENTWISE_KERNELS * ops.t_kernel
        # LM head (bf16, vocab-parallel over tp)
        self._lm = GemmSet(ops, [(1, m.vocab_size / tp, h, "bf16")])
        # attention ops' fixed cost per pass (one attention op per layer, whatever the batch)
        self._attn_fixed = n_soft * ATTN_KERNELS * ops.t_kernel
        # a pass with decode requests runs the engine's decode-attention op, whose fixed cost for
        # the cache's format differs (kernels.OpModel.decode_fixed): the difference
        self._attn_dec_fixed = n_soft * (float(ops.decode_fixed("mla" if m.is_mla else "gqa", kv_bytes(self.kv_dtype)))
                                         - ATTN_KERNELS * ops.t_kernel)
        self._sms = g.sm_count or 0
        self._heads = max(1, m.num_attention_heads // tp)
        # query heads a full-attention prefill block packs per KV head (kernels.OpModel
        # .attention_prefill, KernelRates.prefill_pack_gqa); 1: a block per query head
        kvh_rank = m.kv_heads_per_gpu(tp) if not m.is_mla else self._heads
        self._pack = self._heads // kvh_rank if self.kernel_rates.prefill_pack_gqa and not m.is_mla \
            and self._heads % kvh_rank == 0 else 1

        # attention per context token, summed over layers: compute-seconds and byte-seconds
        kvb = kv_bytes(self.kv_dtype)
        kv_layer = m.kv_bytes_per_token_layer(kvb, tp)
        nq = max(1, m.num_attention_heads // tp)
        if m.is_mla:
            pre_flops_pair = 2.0 * nq * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            dec_flops_tok = 2.0 * nq * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        else:
            pre_flops_pair = 4.0 * nq * m.head_dim
            dec_flops_tok = pre_flops_pair
        idx_flops = 2.0 * m.index_n_heads * m.index_head_dim if m.index_topk else 0.0
        idx_bytes = (m.index_head_dim + 4) if m.index_topk else 0.0
        main_kv = kv_layer - idx_bytes
        # "full" terms scale with the whole context, "cap" terms with min(context, W)
        #: whether the capped layers' cap is a sliding window (their prefill computes whole key
        #: blocks, attention_blocks.window_key_blocks) rather than sparse attention's top-k keys
        self._cap_window = not m.index_topk and bool(m.sliding_window)
        if m.index_topk:
            self._cap = m.index_topk
            n_full_l, n_cap_l = m.num_full_layers, m.num_full_layers
            full_pair, cap_pair = idx_flops, pre_flops_pair
            full_kv, cap_kv = idx_bytes, main_kv
            full_dec, cap_dec = idx_flops, dec_flops_tok
        else:
            self._cap = m.sliding_window
            n_full_l, n_cap_l = m.num_full_layers, m.num_sliding_layers
            full_pair = cap_pair = pre_flops_pair
            full_kv = cap_kv = kv_layer
            full_dec = cap_dec = dec_flops_tok
        pa = peak_attn
        # decode attention's KV stream: the engine's kernel for the cache's format (kernels.OpModel)
        dme = bw * float(ops.decode_mem_eff("mla" if m.is_mla else "gqa", kvb))
        # the engine's own prefill kernel (perf/engine_kernels.py)
        pa_pre = pa * self.kernel_rates.prefill_attention("mla" if m.is_mla else "gqa")
        self._pre_full = (n_full_l * full_pair / pa_pre, n_full_l * full_kv / self._bw_eff)
        pa_cap = pa * self.kernel_rates.prefill_attention("gqa_window") if self._cap_window else pa_pre
        self._pre_cap = (n_cap_l * cap_pair / pa_cap, n_cap_l * cap_kv / self._bw_eff)
        # a sliding window over a chunk's whole context is causal attention: those chunks' windowed
        # layers at the full-attention kernel's rate (kernels.OpModel.attention_prefill)
        self._pre_cap_causal = n_cap_l * cap_pair / pa_pre
        # each new token's query read, output write and KV-cache write, added to the prefill
        # attention's math (attention_blocks.prefill_exposed_bytes), seconds over all attention layers
        if m.is_mla:
            q_w, o_w = nq * (m.qk_nope_head_dim + m.qk_rope_head_dim), nq * m.v_head_dim
        else:
            q_w = o_w = nq * m.head_dim
        n_attn_l = n_full_l if m.index_topk else n_full_l + n_cap_l
        self._pre_tok = n_attn_l * float(prefill_exposed_bytes(q_w, o_w, main_kv / kvb, kvb)) / self._bw_eff
        # decode: (compute s per ctx token, memory s per ctx token) for full and capped parts
        self._dec_full = (n_full_l * full_dec / (pa * p.attn_decode_compute_eff), n_full_l * full_kv / dme)
        self._dec_cap = (n_cap_l * cap_dec / (pa * p.attn_decode_compute_eff), n_cap_l * cap_kv / dme)
        self._dec_oh = p.attn_decode_ctx_overhead_tokens
        # the decode kernel's work units (kernels.OpModel.decode_unit_tokens) as the tokens a
        # request takes in their time, at whichever of a layer's KV stream and math bounds it
        # (one query token: a speculative pass's verified tokens add math, not units)
        dec_c_tok = full_dec / (pa * p.attn_decode_compute_eff)
        if m.is_mla:
            # a request's blocks of query heads (kernels.OpModel.mla_decode), over its layer's
            # KV (the latent, and the indexer's keys)
            blocks = math.ceil(nq / MLA_HEAD_BLOCK)
            self._dec_oh += float(ops.decode_unit_tokens(blocks, max(dec_c_tok, kv_layer / dme)))
        else:
            # one per KV head, or per query head where the engine's kernel does not take the
            # group (kernels.OpModel.decode_streams), each then streaming its KV head on its own
            kvh = max(1, kv_layer / (2.0 * m.head_dim * kvb))
            streams = float(ops.decode_streams(nq, kvh))
            per_tok = kv_layer * streams / kvh
            if streams != kvh:  # the masked multi-head fallback: no partly used tile
                self._dec_full = (self._dec_full[0], n_full_l * per_tok / dme)
                self._dec_cap = (self._dec_cap[0], n_cap_l * per_tok / dme)
                self._dec_oh = 0.0
            self._dec_oh += float(ops.decode_unit_tokens(streams, max(dec_c_tok, per_tok / dme)))
        # a prefill thread block's fixed work in (query, key) pairs of this model's heads: key
        # blocks of a 128-wide head (kernels.ATTN_CTA_HEAD_DIM), MLA's in its own
        # (times the engine kernel's own, KernelRates.prefill_attention_fixed; the windowed layers'
        # kernel its own)
        cta_pairs = ops.cta_blocks * ATTN_BLOCK * ATTN_BLOCK * (1.0 if m.is_mla else ATTN_CTA_HEAD_DIM / m.head_dim)
        self._cta_pairs = cta_pairs * self.kernel_rates.prefill_attention_fixed("mla" if m.is_mla else "gqa")
        self._cta_pairs_cap = cta_pairs * self.kernel_rates.prefill_attention_fixed("gqa_window") \
            if self._cap_window else self._cta_pairs
        # the KV stream's ramp and tail (GPUSpec.stream_ramp_us), one per attention kernel: the
        # full and the capped layers' totals on one rank (kernels.OpModel._ramped per layer)
        self._dec_ramp = (n_full_l * ops.t_ramp, n_cap_l * ops.t_ramp)
        self._dp = dp
        #: Decode stretches priced by ``perf/_stretch_core.pyx`` (bit for bit the numpy result).
        self._compiled_stretch = _core is not None
        # linear attention
        if m.num_linear_layers:
            nv = max(1, math.ceil(m.linear_num_value_heads / tp))
            self._lin_flop_s = (m.num_linear_layers * p.linear_attn_flops_factor * nv * m.linear_key_head_dim
                                * m.linear_value_head_dim / pa)
            self._lin_state_s = 2.0 * m.state_bytes_per_request(p.state_dtype_bytes, tp) / self._bw_eff
            # the decode (recurrent) form's kernels in every pass; the chunked prefill form's extra
            # ones (``_lin_prefill_fixed``) in passes with prefill chunks
            self._attn_fixed += m.num_linear_layers * LINEAR_ATTN_DECODE_KERNELS * ops.t_kernel
            # the chunked prefill kernel (the engine's own: its math rate, chain latency and
            # kernel count, perf/engine_kernels.py); as kernels.OpModel.gated_delta
            rates = self.kernel_rates
            self._lin_prefill_fixed = m.num_linear_layers * max(
                LINEAR_ATTN_KERNELS * rates.linear_attn_fixed() - LINEAR_ATTN_DECODE_KERNELS, 0.0) * ops.t_kernel
            self._lin_pre_flop_s = self._lin_flop_s / (p.linear_attn_eff * rates.linear_attn())
            self._lin_chain_s = m.num_linear_layers * p.linear_attn_chain_s * rates.linear_attn_chain()
            self._lin_heads = nv
        else:
            self._lin_flop_s = self._lin_state_s = self._lin_prefill_fixed = 0.0
            self._lin_pre_flop_s = self._lin_chain_s = 0.0
            self._lin_heads = 0
        # communication
        up = g.scale_up
        if gpus <= up.domain_size:
            link_bw, lat = up.bandwidth_gbs * 1e9, up.latency_us * 1e-6
        else:
            link_bw, lat = g.scale_out.bandwidth_gbs * 1e9, g.scale_out.latency_us * 1e-6
        link = link_bw * p.comm_eff / p.comm_time_scale
        lat_s = p.link_latency_factor * lat * p.comm_time_scale

        def ar(ranks: int, count: int) -> tuple[float, float]:
            """(fixed s, s per token) of ``count`` bandwidth-bound (two-shot) all-reduces of one
            hidden vector per token (kernels.OpModel.all_reduce at large messages)."""
            if ranks <= 1 or count <= 0:
                return 0.0, 0.0
            fixed = p.allreduce_fixed_s * p.comm_time_scale + 2.0 * lat_s * math.log2(ranks)
            return count * fixed, count * 2.0 * (ranks - 1) / ranks * h * 2.0 / link

        # the tensor-parallel all-reduces of the hidden state: OpModel.all_reduce (one-shot
        # for small messages, two-shot beyond), memoised per token count
        self._ar_tp = (2 * L if dp == 1 else L) if tp > 1 else 0
        # q/k RMS norms over every head at once (MiniMax-M2): per attention layer, one small
        # all-reduce of each token's two fp32 sums of squares across the tensor-parallel ranks
        # (vLLM's MiniMaxText01RMSNormTP.forward_qk and SGLang's MiniMaxM2RMSNormTP reduce q's
        # and k's in one call)
        self._qk_ar = n_soft if tp > 1 and m.qk_norm_across_heads else 0
        self._ar_memo: dict[float, float] = {}
        # with attention DP, the MoE layers' tokens go to the experts and back per layer: by the
        # expert-parallel all-to-all's dispatch and combine where the engine has one; otherwise,
        # under expert parallelism, every rank gathers all ranks' hidden states and scatters the
        # summed outputs back — NCCL collectives at their measured law (:meth:`_gather_time`):
        # vLLM's AgRsAll2AllManager all_gatherv / reduce_scatterv (pynccl), TensorRT-LLM's
        # allgather / reducescatter.  (dp == 1: the tensor-parallel all-reduce after the MLP,
        # counted in _ar_tp, is the expert-parallel combine.)
        self._gather_layers = 0
        self._gather_memo: dict[float, float] = {}
        if dp == 1:
            self._a2a = (0.0, 0.0)
        else:
            dense = ar(gpus, m.num_dense_layers)
            if nm and lay.ep > 1 and self.moe_all_to_all:
                k = m.experts_per_token
                fixed = 2 * nm * (p.alltoall_fixed_s * p.comm_time_scale + lat_s * math.log2(gpus))
                per_tok = 2 * nm * k * (lay.ep - 1) / lay.ep * h * 2.0 / link / gpus
                self._a2a = (fixed + dense[0], per_tok + dense[1])
            elif nm and lay.ep > 1:
                self._gather_layers = nm
                self._a2a = dense
            else:
                moe_ar = ar(gpus, nm)
                self._a2a = (moe_ar[0] + dense[0], moe_ar[1] + dense[1])
        self._L = L
        # The fixed per-pass costs (_pass_overhead) and the per-request one, as plain numbers.
        self._graph_oh = p.graph_pass_overhead_s + L * p.graph_layer_overhead_s
        self._eager_oh = p.pass_overhead_s + L * p.layer_overhead_s
        if self.eager_launch:
            self._eager_oh += L * eager_ops_per_layer(m, tp) * p.eager_op_s
        self._graph_max_batch = p.cuda_graph_max_batch
        self._request_oh = p.overhead_per_request_s

    # --------------------------------------------------------------- pricing
    def _gemms_time(self, gemms, tokens: float) -> float:
        """Seconds of a :class:`~servesim.perf.gemm_set.GemmSet` at ``tokens`` rows."""
        return gemms.time(tokens)

    def _ar_time(self, tokens: float) -> float:
        """The pass's tensor-parallel all-reduces of ``tokens`` hidden vectors, and of their q/k
        norms' sums of squares where the model norms across heads (memoised)."""
        if not self._ar_tp or tokens <= 0:
            return 0.0
        hit = self._ar_memo.get(tokens)
        if hit is None:
            if len(self._ar_memo) > 100_000:
                self._ar_memo.clear()
            tp = self.layout.tp
            nbytes = tokens * self.model.hidden_size * 2.0
            hit = self._ar_tp * float(self._ops.all_reduce(nbytes, tp))
            if self._qk_ar:
                hit += self._qk_ar * float(self._ops.all_reduce(tokens * QK_NORM_BYTES_PER_TOKEN, tp))
            self._ar_memo[tokens] = hit
        return hit

    def _gather_time(self, tokens) -> float:
        """The gathered expert-parallel MoE layers' way there and back for ``tokens`` gathered
        tokens (attention DP without an all-to-all): per MoE layer an NCCL all-gather of the
        ranks' bf16 hidden states over the worker's GPUs and a reduce-scatter of the outputs
        (``OpModel.all_gather`` / ``nccl('reduce_scatter')``, the GPU's measured laws).
        Memoised; 0 for other layouts."""
        if not self._gather_layers or tokens <= 0:
            return 0.0
        hit = self._gather_memo.get(tokens)
        if hit is None:
            if len(self._gather_memo) > 100_000:
                self._gather_memo.clear()
            ops, gpus = self._ops, self.layout.gpus
            nbytes = tokens * self.model.hidden_size * 2.0
            hit = self._gather_layers * (float(ops.all_gather(nbytes, gpus))
                                         + float(ops.nccl("reduce_scatter", nbytes, gpus)))
            self._gather_memo[tokens] = hit
        return hit

    def _moe_time(self, t_total: int) -> float:
        """Routed experts over ``t_total`` tokens (kernels.OpModel.moe per layer): only the
        experts the pass touches load weights; with expert parallelism the layer waits for the
        rank with the most touched experts, and without an all-to-all dispatch each rank's kernel
        takes all ``t_total × k`` slots, the remote experts' masked (``slots_per_token``; with
        attention DP the gathered batch is the pass's ``t_total`` tokens).  A function of
        ``t_total`` alone, so decode stretches (``_token_part``'s base) price it as passes do.
        Memoised per token count."""
        moe = self._moe
        if moe is None or t_total <= 0:
            return 0.0
        memo = moe["memo"]
        hit = memo.get(t_total)
        if hit is not None:
            return hit
        frac = -math.expm1(t_total * self._moe_log_miss)  # P(an expert is touched)
        touched = moe["local"] * frac
        if moe["ep"] > 1:
            busiest = moe["busiest"]
            hit = busiest.get(t_total)
            if hit is None:
                if len(busiest) > 100_000:
                    busiest.clear()
                hit = busiest[t_total] = expected_busiest_touched(moe["E"], frac, moe["ep"], moe["k"])
            touched = hit
        m = self.model
        spt = moe["slots_per_token"]
        v = moe["layers"] * float(self._ops.moe(t_total, m.hidden_size, m.moe_intermediate_size, moe["k"], moe["E"],
                                                moe["moe_tp"], self.layout.ep, moe["dtype"], touched=touched,
                                                slots=None if spt is None else t_total * spt, kernel=moe["kernel"]))
        if len(memo) > 100_000:
            memo.clear()
        memo[t_total] = v
        return v

    def _pass_overhead(self, decode_only: bool, decode_batch: int) -> float:
        """Fixed per-pass cost: a CUDA-graph replay for small decode-only batches, else launches."""
        if decode_only and decode_batch <= self._graph_max_batch:
            return self._graph_oh
        return self._eager_oh

    def _token_part(self, t_total: int, n_chunks: int, n_dec: int, dtok: int, decode_only: bool) -> float:
        """Everything that depends only on token counts (not on context lengths); memoised."""
        key = (t_total, n_chunks, n_dec, dtok, decode_only)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = self.p
        dp = self._dp
        t_a = t_total / dp  # tokens per attention rank
        t = 0.0
        if t_a > 0:
            t += self._gemms_time(self._attn_gemms, t_a)
        if t_total > 0:
            t += self._gemms_time(self._mlp_gemms, t_total)
            t += self._moe_time(t_total)
            t += self._elem_s * t_a + self._elem_fixed + self._attn_fixed
            if n_dec:
                t += self._attn_dec_fixed
            # linear attention's recurrent (decode) update: FLOPs and state traffic; the chunked
            # prefill kernel depends on the chunks' lengths (:meth:`_lin_prefill`)
            if self._lin_flop_s and n_dec:
                t += max(n_dec * dtok / dp * self._lin_flop_s / p.linear_attn_eff, n_dec / dp * self._lin_state_s)
            # communication
            t += self._ar_time(t_a) + self._a2a[0] + self._a2a[1] * t_total + self._gather_time(t_total)
        # LM head: one row per prefill chunk (approximation) plus each decode token
        n_logits = (n_chunks + n_dec * dtok) / dp
        if n_logits > 0:
            t += self._gemms_time(self._lm, n_logits)
        t += self._pass_overhead(decode_only, n_dec)
        t += self._request_oh * (n_dec + n_chunks)
        if len(self._cache) > 200_000:
            self._cache.clear()
        self._cache[key] = t
        return t

    def _decode_attn(self, n: int, s_full, s_cap, dtok: int = 1, ranks=None):
        """Decode attention seconds from Σctx and Σmin(ctx, W); works on floats or arrays.

        ``dtok`` query tokens per request (speculative verification) multiply the math, not
        the KV bytes read.  The sums are spread evenly over ``ranks`` attention ranks (default:
        the worker's attention-DP ranks; 1 for one rank's own requests): the time is one rank's,
        each rank's KV stream paying its ramp and tail per layer (``R·M/(M + R)`` over all
        ranks with ``R`` the ranks' ramps together, as the ranks' ramps are on ``M / ranks``).
        """
        dp = self._dp if ranks is None else ranks
        oh = self._dec_oh * n
        cf, mf = self._dec_full
        rf, rc = self._dec_ramp
        cf = cf * dtok
        mem = ramped(mf * (s_full + oh), rf * dp)
        t = np.maximum(cf * (s_full + oh), mem) if isinstance(s_full, np.ndarray) else max(cf * (s_full + oh), mem)
        if self._cap:
            cc, mc = self._dec_cap
            cc = cc * dtok
            mem = ramped(mc * (s_cap + oh), rc * dp)
            t = t + (np.maximum(cc * (s_cap + oh), mem) if isinstance(s_cap, np.ndarray) else max(cc * (s_cap + oh), mem))
        return t / dp

    def _prefill_attn(self, new: list, cached: list) -> float:
        """Prefill attention seconds for chunks given as Python lists of ints.

        As :meth:`servesim.perf.kernels.OpModel.attention_prefill`: each chunk's queries in
        whole 128-row blocks (the diagonal blocks computed in full), each block with its own
        fixed work, the blocks of all chunks and heads run in waves over the SMs; the new tokens'
        query, output and KV-cache traffic added (``_pre_tok``).
        """
        tot_new = sum(new)
        if tot_new <= 0:
            return 0.0
        pairs = 0.0
        read = 0
        W = self._cap or 0
        pairs_cap = 0.0
        pairs_cover = 0.0  # windowed layers' chunks whose window covers their context: causal
        read_cap = 0
        blk = ATTN_BLOCK
        extra = self._cta_pairs
        extra_cap = self._cta_pairs_cap
        gp = self._pack
        ctas = 0
        ctas_full = 0
        for i in range(len(new)):  # (indexing: zip's object costs more than a pass's few chunks)
            n, c = new[i], cached[i]
            nq = (n + blk - 1) // blk
            ctas += nq
            if gp > 1:  # gp query heads' rows packed per block: pairs per query head
                nqp = (n * gp + blk - 1) // blk
                q = nqp * blk
                ctas_full += nqp
                inc = (q * c + 0.5 * q * (q / gp + 1.0) + nqp * extra) / gp
            else:
                q = nq * blk
                ctas_full += nq
                inc = q * c + 0.5 * q * (q + 1) + nq * extra
            pairs += inc
            q = nq * blk
            read += n + c
            if W:
                if self._cap_window and c + n <= W:  # as kernels.OpModel.attention_prefill
                    pairs_cover += inc
                elif self._cap_window and gp > 1:  # packed as the full-attention layers' blocks
                    pairs_cap += (packed_window_key_blocks(n, c, W, gp) * (blk * blk) + nqp * extra_cap) / gp
                elif self._cap_window:
                    pairs_cap += window_key_blocks(n, c, W) * (blk * blk) + nq * extra_cap
                else:  # sparse attention's top-k keys, pair by pair
                    a, b = c + 1, c + q  # attended counts of the chunk's first and last (padded) row
                    m = b if b < W else W
                    inside = 0.5 * (a + m) * (m - a + 1) if a <= W else 0.0
                    pairs_cap += inside + (b - (m if m > a - 1 else a - 1)) * W + nq * extra
                read_cap += (c + n) if (c + n) < W else W
        eff = self._pre_eff_max
        if self._pre_half:
            x = tot_new / len(new)
            eff = eff * x / (x + self._pre_half)
        eff_full = eff
        if self._sms:
            waves_ctas = ctas * self._heads
            eff = eff * waves_ctas / (((waves_ctas + self._sms - 1) // self._sms) * self._sms)
            waves_ctas = ctas_full * (self._heads // gp)
            eff_full = eff_full * waves_ctas / (((waves_ctas + self._sms - 1) // self._sms) * self._sms)
        c_full, m_full = self._pre_full
        t = max(pairs * c_full / eff_full, read * m_full)
        if W:
            c_cap, m_cap = self._pre_cap
            t += max(pairs_cap * c_cap / (eff_full if self._cap_window else eff)
                     + pairs_cover * self._pre_cap_causal / eff_full, read_cap * m_cap)
        return (t + tot_new * self._pre_tok) / self._dp

    def pass_time(self, plan: PassPlan) -> float:
        if plan.ranks is not None:  # attention DP with per-rank compositions
            return self.rank_pass_time(plan)
        ctx = plan.decode_ctx
        n_dec = len(ctx)
        n_chunks = len(plan.prefill_new)
        dtok = plan.decode_tokens
        if n_chunks:
            new = plan.prefill_new.tolist()
            t_pre = sum(new)
        else:
            t_pre = 0
        t = self._token_part(t_pre + n_dec * dtok, n_chunks, n_dec, dtok, n_chunks == 0)
        if n_dec:
            s_full, s_cap = self._ctx_sums(ctx)
            t = t + self._decode_attn(n_dec, s_full, s_cap, dtok)
        if n_chunks:
            t += self._prefill_attn(new, plan.prefill_cached.tolist())
            if self._lin_flop_s:
                t += self._lin_prefill(new) / self._dp
        return t

    def _lin_prefill(self, new: list) -> float:
        """The chunked gated-delta kernel over prefill chunks of ``new`` tokens (all linear
        layers): the math of every token, or the chains of the longest chunk (each value head
        of a chunk passes its state chunk to chunk in order; chains run in waves over the SMs),
        or each chunk's state read and written, whichever is longest, plus its fixed cost."""
        n = len(new)
        waves = (n * self._lin_heads + self._sms - 1) // self._sms if self._sms else 1
        return self._lin_prefill_fixed + max(sum(new) * self._lin_pre_flop_s, waves * max(new) * self._lin_chain_s,
                                             n * self._lin_state_s)

    def _ctx_sums(self, ctx: np.ndarray) -> tuple[float, float]:
        """The decode contexts' sum, and their sum each capped at the attention window (0.0
        without one): in one compiled loop where built (exact integer sums either way)."""
        if self._compiled_stretch:
            return _core.decode_ctx_sums(ctx, self._cap)
        return float(_SUM(ctx)), (float(_SUM(np.minimum(ctx, self._cap))) if self._cap else 0.0)

    def decode_stretch_ends(self, decode_ctx: np.ndarray, steps: int, now: float,
                            extra: float | None = None, overlapped: bool = False) -> np.ndarray:
        """End times of the passes of :meth:`decode_stretch_times` from ``now``, each pass
        ``extra`` seconds longer when given (a wrapper's per-pass overhead), or at least
        ``extra`` seconds long when ``overlapped`` (the scheduler's CPU time hidden behind the
        GPU's): the worker's ``d += extra`` (or ``d = max(d, extra)``), ``ends = d.cumsum()``,
        ``ends += now``, in one compiled call where built."""
        n = decode_ctx.size
        if self._compiled_stretch and n and steps > 0:
            return _core.decode_stretch_ends(
                *self._stretch_kernel_args(decode_ctx, steps, self._token_part(n, 0, n, 1, True)),
                extra is not None, 0.0 if extra is None else extra, now, overlapped)
        durations = self.decode_stretch_times(decode_ctx, steps)
        if extra is not None:
            if overlapped:
                np.maximum(durations, extra, out=durations)
            else:
                durations += extra
        return ends_from_durations(durations, now)

    def stretch_pricer(self, pass_s: float | None = None, per_request_s: float | None = None,
                       overlapped: bool = False):
        """A compiled callable ``(decode_ctx, steps, now) -> ends`` equal to
        :meth:`decode_stretch_ends` with ``extra = pass_s + per_request_s * n`` when ``pass_s``
        is given (a scheduler-overhead wrapper's, ``overlapped`` or not), or None where the
        kernel is not built."""
        if not self._compiled_stretch:
            return None
        return _core.StretchPricer(self, pass_s, per_request_s, overlapped)

    def _stretch_kernel_args(self, decode_ctx: np.ndarray, steps: int, base: float) -> tuple:
        """The compiled stretch kernels' leading arguments (see ``perf/_stretch_core.pyx``)."""
        cc, mc = self._dec_cap if self._cap else (0.0, 0.0)
        return (np.ascontiguousarray(decode_ctx, dtype=np.int64), steps, base, int(self._cap or 0),
                self._dec_oh * decode_ctx.size, *self._dec_full, cc, mc, float(self._dp), *self.stretch_ramps())

    def stretch_ramps(self) -> tuple[float, float]:
        """The compiled stretch kernels' ``(r_full, r_cap)``: the full and capped layers' KV-stream
        ramps over the worker's attention ranks, as :meth:`_decode_attn` applies them."""
        rf, rc = self._dec_ramp
        return float(rf * self._dp), float(rc * self._dp) if self._cap else 0.0

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        """``steps`` decode-only passes in closed form; equals :meth:`pass_time` pass by pass."""
        n = decode_ctx.size
        if steps <= 0:
            return np.zeros(0)
        base = self._token_part(n, 0, n, 1, True)
        if n == 0:
            return np.full(steps, base)
        if self._compiled_stretch:  # the same arithmetic, compiled
            return _core.decode_stretch_times(*self._stretch_kernel_args(decode_ctx, steps, base))
        s = np.arange(steps, dtype=np.int64)
        s_full = (int(decode_ctx.sum()) + n * s).astype(np.float64)
        if self._cap:
            W = self._cap
            srt = np.sort(decode_ctx.astype(np.int64))
            prefix = np.concatenate(([0], np.cumsum(srt)))
            below = np.searchsorted(srt, W - s, side="left")  # requests with ctx + s < W
            s_cap = (prefix[below] + below * s + (n - below) * W).astype(np.float64)
        else:
            s_cap = np.zeros(steps)
        return base + self._decode_attn(n, s_full, s_cap)

    # ------------------------------------------------- attention DP, per rank
    # A pass of an attention-DP worker (engines/attention_dp.py) carries one sub-plan per
    # rank.  Each rank runs its own tokens through the attention layers (GEMMs, attention,
    # norms, the attention-TP all-reduce, its LM-head rows, its per-request CPU cost); the
    # expert / MLP layers and their collectives are shared.  The pass lasts
    # ``shared + max over ranks of local``: ranks wait for the slowest one, and an idle
    # rank (no sub-plan) only joins the collectives.  Shared compute covers the union of
    # the ranks' tokens; the dispatch/combine (or all-gather) volume follows the busiest
    # rank, whose GPUs send the most (SGLang pads the gathered buffer to it).

    def _rank_local_tokens(self, t: int, n_chunks: int, n_dec: int, dtok: int) -> float:
        """One rank's work that depends only on its token counts; memoised."""
        cache = self._rank_cache
        key = (t, n_chunks, n_dec, dtok)
        hit = cache.get(key)
        if hit is not None:
            return hit
        p = self.p
        v = 0.0
        if t > 0:
            v += self._gemms_time(self._attn_gemms, t)
            v += self._elem_s * t + self._elem_fixed + self._attn_fixed
            if n_dec:
                v += self._attn_dec_fixed
            if self._lin_flop_s and n_dec:
                v += max(n_dec * dtok * self._lin_flop_s / p.linear_attn_eff, n_dec * self._lin_state_s)
            v += self._ar_time(t)
        n_logits = n_chunks + n_dec * dtok
        if n_logits > 0:
            v += self._gemms_time(self._lm, n_logits)
        v += p.overhead_per_request_s * (n_dec + n_chunks)
        if len(cache) > 200_000:
            cache.clear()
        cache[key] = v
        return v

    def rank_shared_time(self, t_total: int, t_busiest: int, decode_only: bool, max_rank_decode: int) -> float:
        """The layers all ranks run together: experts / MLP over ``t_total`` tokens, collectives
        sized by the busiest rank's ``t_busiest`` tokens, and the per-pass overhead (a CUDA
        graph when every rank decodes at most ``cuda_graph_max_batch`` requests)."""
        v = 0.0
        if t_total > 0:
            v += self._gemms_time(self._mlp_gemms, t_total) + self._moe_time(t_total)
            v += self._a2a[0] + self._a2a[1] * t_busiest * self._dp + self._gather_time(t_busiest * self._dp)
        return v + self._pass_overhead(decode_only, max_rank_decode)

    def rank_local_time(self, plan: PassPlan) -> float:
        """One rank's own part of the pass: its token work plus its attention over its contexts."""
        ctx = plan.decode_ctx
        n_dec = ctx.size
        dtok = plan.decode_tokens
        n_chunks = plan.prefill_new.size
        new = plan.prefill_new.tolist() if n_chunks else []
        t = self._rank_local_tokens(sum(new) + n_dec * dtok, n_chunks, n_dec, dtok)
        if n_dec:
            s_full, s_cap = self._ctx_sums(ctx)
            t = t + self._decode_attn(n_dec, s_full, s_cap, dtok, 1)
        if n_chunks:
            t += self._prefill_attn(new, plan.prefill_cached.tolist()) * self._dp
            if self._lin_flop_s:
                t += self._lin_prefill(new)
        return t

    def rank_pass_time(self, plan: PassPlan) -> float:
        """An attention-DP pass: shared layers plus the slowest rank's own part."""
        live = [r for r in plan.ranks if r is not None]
        local = max((self.rank_local_time(r) for r in live), default=0.0)
        busiest = max((r.num_tokens for r in live), default=0)
        max_dec = max((r.num_decode for r in live), default=0)
        shared = self.rank_shared_time(plan.num_tokens, busiest, plan.is_decode_only, max_dec)
        return shared + local

    def rank_stretch_times(self, plan: PassPlan, steps: int) -> np.ndarray:
        """``steps`` decode-only attention-DP passes; equals :meth:`rank_pass_time` pass by pass."""
        live = [r for r in plan.ranks if r is not None and r.decode_ctx.size]
        if steps <= 0:
            return np.zeros(0)
        local = np.zeros(steps)
        for r in live:
            n = r.decode_ctx.size
            local = np.maximum(local, self._rank_local_tokens(n, 0, n, 1) + self._rank_decode_stretch(r.decode_ctx, steps))
        busiest = max((r.decode_ctx.size for r in live), default=0)
        shared = self.rank_shared_time(plan.decode_ctx.size, busiest, True, busiest)
        return shared + local

    def _rank_decode_stretch(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        """One rank's decode attention over ``steps`` passes (as :meth:`decode_stretch_times`)."""
        n = decode_ctx.size
        s = np.arange(steps, dtype=np.int64)
        s_full = (int(decode_ctx.sum()) + n * s).astype(np.float64)
        if self._cap:
            W = self._cap
            srt = np.sort(decode_ctx.astype(np.int64))
            prefix = np.concatenate(([0], np.cumsum(srt)))
            below = np.searchsorted(srt, W - s, side="left")
            s_cap = (prefix[below] + below * s + (n - below) * W).astype(np.float64)
        else:
            s_cap = np.zeros(steps)
        return self._decode_attn(n, s_full, s_cap, 1, 1)

    # ------------------------------------------------------------ diagnostics
    def gemm_roofline_terms(self, tokens: int) -> tuple[float, float]:
        """(compute seconds, memory seconds) summed over the layers' dense GEMMs at ``tokens``."""
        ops = self._ops
        comp = mem = 0.0
        for count, n, k, dtype in self._attn_gemms.entries + self._mlp_gemms.entries:
            peak, eff = ops.gemm_eff(dtype)
            comp += count * float(ops.gemm_compute(tokens, n, k, peak, eff, ops.split_k(dtype), ops.gemm_tiles(dtype)))
            mem += count * (n * k * weight_bytes(dtype) + tokens * (k + n) * 2.0) / ops.bw_eff
        return comp, mem

    @staticmethod
    def expected_distinct_experts(num_experts: int, k: int, tokens: int) -> float:
        """Expected number of distinct experts ``tokens`` tokens with top-``k`` routing touch."""
        return num_experts * (1.0 - (1.0 - k / num_experts) ** tokens)
