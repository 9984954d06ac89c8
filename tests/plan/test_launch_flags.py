"""Launch commands of the chosen deployment, per engine."""

from __future__ import annotations

import shlex

import yaml

from servesim.plan.launch_flags import launch_files, sglang_command, trtllm_command, vllm_command

DEP = {"model": "deepseek-ai/DeepSeek-V3", "gpu": "h200_sxm", "tp": 1, "ep": 8, "attention_dp": 8, "workers": 2,
       "kv_dtype": "fp8", "speculative": {"method": "mtp", "draft_tokens": 3},
       "engine": {"name": "sglang", "page_size": 64, "schedule_policy": "lpm", "chunked_prefill_size": 8192,
                  "max_running_requests": 256, "disable_radix_cache": False}}


def test_sglang_flags_follow_its_options():
    cmd = sglang_command(DEP, "serve")
    s = " ".join(cmd)
    assert "--model-path deepseek-ai/DeepSeek-V3 --tp-size 8" in s  # 1 x 8 attention-DP ranks = 8 GPUs
    assert "--dp-size 8 --enable-dp-attention" in s and "--ep-size 8" in s
    assert "--page-size 64" in s and "--schedule-policy lpm" in s and "--chunked-prefill-size 8192" in s
    assert "--max-running-requests 256" in s and "--kv-cache-dtype fp8_e4m3" in s
    assert ("--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4") in s
    assert "--disaggregation-mode" not in s
    assert "--disaggregation-mode decode" in " ".join(sglang_command(DEP, "decode"))


def test_vllm_and_trtllm_translate_the_layout():
    v = " ".join(vllm_command(DEP, "serve"))
    assert "--tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel" in v
    assert "--kv-cache-dtype fp8" in v and '"method": "deepseek_mtp"' in v
    cmd, extra = trtllm_command(DEP, "serve")
    assert cmd[:6] == ["trtllm-serve", "deepseek-ai/DeepSeek-V3", "--backend", "pytorch", "--tp_size", "8"]
    assert extra["enable_attention_dp"] is True and extra["kv_cache_config"] == {"dtype": "fp8"}
    assert extra["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}


def test_files_for_a_disaggregated_deployment(tmp_path):
    dep = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "tp": 1, "workers": 1,
           "engine": {"name": "trtllm", "max_batch_size": 64, "max_num_tokens": 4096,
                      "capacity_scheduler_policy": "MAX_UTILIZATION", "enable_block_reuse": True},
           "disaggregation": {"prefill": {"workers": 1, "tp": 2}, "decode": {"workers": 3}}}
    files = launch_files({"deployment": dep}, tmp_path)
    names = sorted(f.name for f in files)
    assert names == ["sglang.sh", "trtllm.sh", "trtllm_decode_extra.yaml", "trtllm_prefill_extra.yaml", "vllm.sh"]
    text = (tmp_path / "launch" / "trtllm.sh").read_text()
    assert "# prefill: 1 worker(s) x 2 GPU(s)" in text and "# decode: 3 worker(s) x 1 GPU(s)" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("trtllm-serve")]
    assert shlex.split(lines[0])[5] == "2" and "--max_batch_size 64" in lines[1]
    extra = yaml.safe_load((tmp_path / "launch" / "trtllm_decode_extra.yaml").read_text())
    assert extra["scheduler_config"] == {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    assert "cache_transceiver_config" in extra


def test_expert_parallel_dispatch_backends_become_flags():
    """The all-to-all backends servesim prices (docs/physics.md, "Expert parallelism") are launched
    with them; the engines' defaults (gathered batches, masked experts) add no flag."""
    assert "--moe-a2a-backend" not in " ".join(sglang_command(DEP, "serve"))
    dep = {**DEP, "engine": {**DEP["engine"], "moe_a2a_backend": "deepep"}}
    assert "--ep-size 8 --moe-a2a-backend deepep" in " ".join(sglang_command(dep, "serve"))
    vdep = {**DEP, "engine": {"name": "vllm"}}
    assert "--all2all-backend" not in " ".join(vllm_command(vdep, "serve"))
    vdep["engine"]["all2all_backend"] = "deepep_low_latency"
    assert "--enable-expert-parallel --all2all-backend deepep_low_latency" in " ".join(vllm_command(vdep, "serve"))
