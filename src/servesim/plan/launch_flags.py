"""Launch commands of a deployment for vLLM, SGLang and TensorRT-LLM.

The chosen engine's options map one to one onto its own flags; the other two engines get the
same model, parallel layout, batch limits, KV precision and speculative decoding in their own
terms, so a user can try the layout on any of them.  Flag names follow each engine's
command-line reference (``vllm serve --help``, ``python -m sglang.launch_server --help``,
``trtllm-serve --help`` with ``--extra_llm_api_options``); servesim has no option that the
engine lacks, and engine options servesim does not model are left at the engine's default.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

#: servesim's speculative method -> (vLLM speculative_config method, SGLang algorithm, TRT-LLM decoding_type).
_SPEC = {"mtp": ("deepseek_mtp", "NEXTN", "MTP"), "eagle": ("eagle", "EAGLE", "Eagle"),
         "ngram": ("ngram", "NGRAM", "NGram")}


def _pool_layouts(dep: dict) -> list[tuple[str, dict]]:
    """[(role, deployment fields of that role)]: one pool, or the prefill and decode pools."""
    dis = dep.get("disaggregation")
    if not dis:
        return [("serve", dep)]
    out = []
    for role in ("prefill", "decode"):
        pool = dict(dep)
        for k, v in (dis.get(role) or {}).items():
            if v is not None:
                pool[k] = v
        pool["disaggregation"] = None
        out.append((role, pool))
    return out


def _engine(pool: dict, name: str) -> dict:
    e = pool.get("engine") or {}
    return e if e.get("name") == name else {}


def vllm_command(pool: dict, role: str) -> list[str]:
    e = _engine(pool, "vllm")
    cmd = ["vllm", "serve", pool["model"], "--tensor-parallel-size", str(pool["tp"])]
    if pool.get("attention_dp", 1) > 1:
        cmd += ["--data-parallel-size", str(pool["attention_dp"])]
    if pool.get("ep", 1) > 1:
        cmd += ["--enable-expert-parallel"]
        if e.get("all2all_backend") not in (None, "allgather_reducescatter"):
            cmd += ["--all2all-backend", e["all2all_backend"]]
    for key, flag in (("max_num_seqs", "--max-num-seqs"), ("max_num_batched_tokens", "--max-num-batched-tokens"),
                      ("max_model_len", "--max-model-len"), ("block_size", "--block-size"),
                      ("gpu_memory_utilization", "--gpu-memory-utilization"),
                      ("long_prefill_token_threshold", "--long-prefill-token-threshold")):
        if e.get(key):
            cmd += [flag, str(e[key])]
    if e and not e.get("enable_prefix_caching", True):
        cmd += ["--no-enable-prefix-caching"]
    if e and not e.get("enable_chunked_prefill", True):
        cmd += ["--no-enable-chunked-prefill"]
    if pool.get("kv_dtype") == "fp8":
        cmd += ["--kv-cache-dtype", "fp8"]
    spec = pool.get("speculative")
    if spec:
        cmd += ["--speculative-config", json.dumps({"method": _SPEC[spec["method"]][0],
                                                    "num_speculative_tokens": spec["draft_tokens"]})]
    if role != "serve":
        cmd += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})]
    return cmd


def sglang_command(pool: dict, role: str) -> list[str]:
    e = _engine(pool, "sglang")
    dp = pool.get("attention_dp", 1)
    gpus = pool["tp"] * dp
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", pool["model"], "--tp-size", str(gpus)]
    if dp > 1:
        cmd += ["--dp-size", str(dp), "--enable-dp-attention"]
    if pool.get("ep", 1) > 1:
        cmd += ["--ep-size", str(pool["ep"])]
        if e.get("moe_a2a_backend") not in (None, "none"):
            cmd += ["--moe-a2a-backend", e["moe_a2a_backend"]]
    for key, flag in (("page_size", "--page-size"), ("schedule_policy", "--schedule-policy"),
                      ("chunked_prefill_size", "--chunked-prefill-size"), ("max_prefill_tokens", "--max-prefill-tokens"),
                      ("max_running_requests", "--max-running-requests"), ("mem_fraction_static", "--mem-fraction-static"),
                      ("schedule_conservativeness", "--schedule-conservativeness"), ("context_length", "--context-length"),
                      ("load_balance_method", "--load-balance-method")):
        v = e.get(key)
        if v is not None and not (key == "load_balance_method" and dp == 1):
            cmd += [flag, str(v)]
    if e.get("disable_radix_cache"):
        cmd += ["--disable-radix-cache"]
    if e.get("enable_piecewise_cuda_graph"):
        cmd += ["--enable-piecewise-cuda-graph"]
    if e.get("host_kv_gb"):
        cmd += ["--enable-hierarchical-cache", "--hicache-size", str(int(e["host_kv_gb"]))]
    if pool.get("kv_dtype") == "fp8":
        cmd += ["--kv-cache-dtype", "fp8_e4m3"]
    spec = pool.get("speculative")
    if spec:
        algo = _SPEC[spec["method"]][1]
        cmd += ["--speculative-algorithm", algo]
        if algo != "NGRAM":  # a chain of k draft steps (top-1): k + 1 tokens verified per pass
            cmd += ["--speculative-num-steps", str(spec["draft_tokens"]), "--speculative-eagle-topk", "1"]
        cmd += ["--speculative-num-draft-tokens", str(spec["draft_tokens"] + 1)]
    if role != "serve":
        cmd += ["--disaggregation-mode", role]
    return cmd


def trtllm_command(pool: dict, role: str) -> tuple[list[str], dict]:
    """(command, the --extra_llm_api_options YAML mapping)."""
    e = _engine(pool, "trtllm")
    dp = pool.get("attention_dp", 1)
    gpus = pool["tp"] * dp
    cmd = ["trtllm-serve", pool["model"], "--backend", "pytorch", "--tp_size", str(gpus)]
    if pool.get("ep", 1) > 1:
        cmd += ["--ep_size", str(pool["ep"])]
    for key, flag in (("max_batch_size", "--max_batch_size"), ("max_num_tokens", "--max_num_tokens"),
                      ("max_seq_len", "--max_seq_len"), ("free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction")):
        if e.get(key) is not None:
            cmd += [flag, str(e[key])]
    extra: dict[str, Any] = {}
    if dp > 1:
        extra["enable_attention_dp"] = True
    kv: dict[str, Any] = {}
    if e:
        extra["enable_chunked_prefill"] = bool(e.get("enable_chunked_context", False))
        extra["scheduler_config"] = {"capacity_scheduler_policy": e.get("capacity_scheduler_policy", "GUARANTEED_NO_EVICT")}
        kv.update(enable_block_reuse=bool(e.get("enable_block_reuse", True)), tokens_per_block=e.get("tokens_per_block", 32))
    if pool.get("kv_dtype") == "fp8":
        kv["dtype"] = "fp8"
    if kv:
        extra["kv_cache_config"] = kv
    spec = pool.get("speculative")
    if spec:
        kind = _SPEC[spec["method"]][2]
        extra["speculative_config"] = ({"decoding_type": kind, "num_nextn_predict_layers": spec["draft_tokens"]}
                                       if kind == "MTP" else {"decoding_type": kind, "max_draft_len": spec["draft_tokens"]})
    if role != "serve":
        extra["cache_transceiver_config"] = {"backend": "DEFAULT"}
    return cmd, extra


def launch_files(config: dict, out_dir: Path) -> list[Path]:
    """Write ``launch/{vllm,sglang,trtllm}.sh`` (and TensorRT-LLM's options YAML) for a config
    mapping; returns the files written."""
    dep = config["deployment"]
    launch = out_dir / "launch"
    launch.mkdir(parents=True, exist_ok=True)
    written = []
    router = dep.get("router", "round_robin")
    for engine in ("vllm", "sglang", "trtllm"):
        lines = ["#!/usr/bin/env bash", f"# {engine} launch of the deployment servesim chose (servesim recommend).",
                 "# One command per worker; run `workers` copies (one per group of GPUs) behind a load balancer "
                 f"that routes like servesim's `{router}` router."]
        for role, pool in _pool_layouts(dep):
            n = pool.get("workers", 1)
            lines.append(f"# {role}: {n} worker(s) x {pool['tp'] * pool.get('attention_dp', 1)} GPU(s) of {pool['gpu']}")
            if engine == "vllm":
                cmd = vllm_command(pool, role)
            elif engine == "sglang":
                cmd = sglang_command(pool, role)
            else:
                cmd, extra = trtllm_command(pool, role)
                if extra:
                    yml = launch / f"trtllm_{role}_extra.yaml"
                    yml.write_text(yaml.safe_dump(extra, sort_keys=True))
                    written.append(yml)
                    cmd += ["--extra_llm_api_options", yml.name]
            lines.append(" ".join(shlex.quote(c) for c in cmd))
        path = launch / f"{engine}.sh"
        path.write_text("\n".join(lines) + "\n")
        written.append(path)
    return written
