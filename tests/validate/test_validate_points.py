"""Measured CSV rows → servesim configs."""

from __future__ import annotations

import csv

import pytest

from servesim.cluster.deployment import build_deployment
from servesim.config import load_config
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.errors import ConfigError
from servesim.validate.points import load_points, point_config, read_points, sample_rows
from servesim.validate.recipes.prompt_pool import PREFIX_CACHE_FLAGS, prefix_caching, turn_prefix_cache_on
from servesim.validate.recipes.trtllm import INFERENCEX_MTP_ACCEPTANCE, inferencex_mtp_sweep

from measured_rows import BASE, row


def test_sglang_deepseek_point():
    p = point_config(row())
    assert p.status == "ok"
    d = p.config["deployment"]
    assert d["model"] == "deepseek-ai/DeepSeek-V3" and d["gpu"] == "h200_sxm"
    assert (d["tp"], d["ep"], d["weight_dtype"], d["kv_dtype"]) == (8, 8, "fp8", None)  # SGLang's "auto"
    eng = d["engine"]
    assert eng["name"] == "sglang" and eng["disable_radix_cache"] is True
    assert eng["chunked_prefill_size"] == 32768 and eng["max_prefill_tokens"] == 32768
    assert eng["mem_fraction_static"] == 0.82 and eng["max_running_requests"] == 256
    wl = p.config["workload"]
    assert wl == {"kind": "closed_loop", "recipe": "inferencex_random", "concurrency": 16, "isl": 1024,
                  "osl": 1024, "range_ratio": 0.8, "num_prompts": 160, "warmup": 32}
    assert p.config["output"]["dir"] is None
    load_config(p.config)  # a valid servesim config


def test_vllm_and_trtllm_flags():
    v = point_config(row(backend="vllm", concurrency=64)).config["deployment"]
    assert v["kv_dtype"] == "fp8"
    assert v["engine"]["name"] == "vllm"
    assert v["engine"].get("max_num_seqs", 64) == 64
    assert v["engine"].get("enable_prefix_caching", False) is False
    t = point_config(row(backend="trtllm", precision="fp4", concurrency=32)).config["deployment"]
    assert t["engine"]["name"] == "trtllm" and t["kv_dtype"] == "fp8" and t["weight_dtype"] == "fp4"


def test_empty_precision_is_bf16_and_dense_ep_dropped():
    p = point_config(row(model="Qwen/Qwen3-32B", precision="", gpus=4, attention_tp=4, moe_ep=4))
    d = p.config["deployment"]
    assert d["weight_dtype"] == "bf16" and d["ep"] == 1 and d["tp"] == 4
    assert any("dense" in n for n in p.notes)
    assert "max_running_requests" not in d["engine"]


def test_fixed_lengths_workload():
    p = point_config(row(workload="fixed_lengths_unverified", range_ratio="1.0", num_prompts=""))
    wl = p.config["workload"]
    assert wl["recipe"] == "fixed" and wl["num_prompts"] == 160


@pytest.mark.parametrize("kw, reason", [
    ({"backend": "tgi"}, "unsupported: backend tgi"),
    ({"system": "tpu_v5"}, "unsupported: system tpu_v5"),
    ({"workload": "sharegpt"}, "unsupported: workload"),
])
def test_unsupported_rows_say_why(kw, reason):
    p = point_config(row(**kw))
    assert p.config is None and p.status.startswith(reason)


def test_attention_dp():
    from servesim.cluster.deployment import build_deployment

    p = point_config(row(attention_tp=1, attention_dp=8))
    assert p.status == "ok" and p.config["deployment"]["attention_dp"] == 8
    d = p.config["deployment"]
    assert (d["tp"], d["ep"]) == (1, 8)
    dep = build_deployment(load_config(p.config))
    assert dep.gpus_per_worker == 8 and dep.total_gpus == 8
    assert dep.kv_capacity_tokens == 8 * dep.memory.kv_tokens  # every rank's pool


def test_atom_is_simulated_by_the_sglang_model():
    p = point_config(row(backend="atom", system="mi355x"))
    # simulated by SGLang's model, calibrated in a group of its own (the measured server)
    assert p.status == "ok" and p.backend == "atom" and p.engine == "sglang" and p.group == "mi355x/atom"
    eng = p.config["deployment"]["engine"]
    assert eng["name"] == "sglang" and eng["disable_radix_cache"] is True
    assert p.config["deployment"]["kv_dtype"] == "fp8"
    load_config(p.config)


def test_sample_is_deterministic_and_ordered():
    rows = list(range(100))
    a, b = sample_rows(rows, 10, 3), sample_rows(rows, 10, 3)
    assert a == b == sorted(a) and len(a) == 10
    assert sample_rows(rows, None) == rows and sample_rows(rows, 500) == rows
    with pytest.raises(ConfigError):
        sample_rows(rows, 0)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_points(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model\nx,y\n")
    with pytest.raises(ConfigError, match="missing column"):
        read_points(bad)
    f = tmp_path / "nan.csv"
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(BASE))
        w.writeheader()
        w.writerow(row(concurrency="lots"))
    with pytest.raises(ConfigError, match="line 2: column concurrency"):
        load_points(f)


def test_every_calibration_row_maps():
    from tests.conftest import shared_file  # noqa: F401  (skips without ../shared)
    path = shared_file("measured", "calibration.csv")
    points = load_points(path)
    assert len(points) == len(read_points(path))
    for p in points:
        assert p.status == "ok" or p.status.startswith("unsupported: "), p.status
    assert sum(p.status == "ok" for p in points) > 1000


def test_fit_holdout_split_is_deterministic_and_disjoint():
    from servesim.validate.points import split_rows

    rows = [row(id=f"id{i}") for i in range(200)]
    fit, hold = split_rows(rows, "fit"), split_rows(rows, "holdout")
    assert len(fit) + len(hold) == 200 and not {r["id"] for r in fit} & {r["id"] for r in hold}
    assert 0.45 < len(fit) / 200 < 0.75 and split_rows(rows, "fit") == fit
    with pytest.raises(ConfigError):
        split_rows(rows, "train")


def test_sglang_kv_dtype_follows_the_launch_scripts():
    """fp8 KV for quantized checkpoints on Blackwell (InferenceX passes --kv-cache-dtype
    fp8_e4m3 there), the engine's auto choice on Hopper and for bf16 weights."""
    b200 = point_config(row(system="b200_sxm", precision="fp4", gpus=4, attention_tp=4, moe_ep=4, moe_tp=1))
    assert b200.status == "ok" and b200.config["deployment"]["kv_dtype"] == "fp8"
    h200 = point_config(row(system="h200_sxm", precision="fp8"))
    assert h200.config["deployment"]["kv_dtype"] is None
    bf16 = point_config(row(system="b200_sxm", precision=""))
    assert bf16.config["deployment"]["kv_dtype"] is None


IX = "aic_silicon_sample/inferencex"


def _trt(**kw) -> dict:
    kw.setdefault("measured_date", "2026-03-01")
    p = point_config(row(backend="trtllm", **kw))
    assert p.status == "ok"
    load_config(p.config)
    eng = dict(p.config["deployment"]["engine"])
    assert eng.pop("name") == "trtllm"
    return eng


def test_trtllm_deepseek_flags_follow_the_launch_scripts():
    # dsr1_fp8_b200_trt.sh: 1k/1k at conc >= 64 adds batch waiting; max_num_tokens
    # max(8192, round_up_64(conc + isl + 64)); no --max_batch_size (TensorRT-LLM's default)
    e = _trt(source=IX, system="b200_sxm", precision="fp8", concurrency=128)
    assert e == {"enable_block_reuse": False, "max_num_tokens": 8192, "free_gpu_memory_fraction": 0.8,
                 "batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8, "stream_interval": 10,
                 "moe_backend": "TRTLLM"}
    e = _trt(source=IX, system="b200_sxm", precision="fp8", concurrency=256, isl=8192, osl=1024,
             gpus=4, attention_tp=4, moe_ep=4)
    assert e["max_num_tokens"] == 8192 + 256 + 64 and e["free_gpu_memory_fraction"] == 0.75
    assert "batch_wait_timeout_iters" not in e and "max_batch_size" not in e
    assert _trt(source=IX, system="b200_sxm", precision="fp8", concurrency=512, osl=8192)["free_gpu_memory_fraction"] == 0.7
    assert _trt(source=IX, system="h200_sxm", precision="fp8")["free_gpu_memory_fraction"] == 0.75
    e = _trt(source="inferencex_fixture", model="deepseek-ai/DeepSeek-R1-0528", system="b200_sxm", precision="fp4",
             concurrency=8000, isl=1024)
    assert e["max_num_tokens"] == 9088 and e["free_gpu_memory_fraction"] == 0.8  # 1024 + 8000 + 64 -> 9088
    # before 2026-01-21 (PR 258) the *_trt_slurm.sh scripts passed the round-up without the 8192 floor
    assert _trt(source=IX, system="b200_sxm", precision="fp4", concurrency=64,
                measured_date="2025-12-15")["max_num_tokens"] == 1152
    assert _trt(source=IX, system="b200_sxm", precision="fp4", concurrency=64,
                measured_date="2026-01-21")["max_num_tokens"] == 8192
    # attention DP: the scripts' ADP balance
    e = _trt(source=IX, system="b200_sxm", precision="fp4", attention_tp=1, attention_dp=8)
    assert e["attention_dp_enable_balance"] is True and e["attention_dp_timeout_iters"] == 60
    # the MoE backend (tests/validate/test_recipes_trtllm_moe.py has the rules): CUTLASS with
    # attention DP on the fp4 script from 2026-02-03, the H200 script's CUTLASS
    assert e["moe_backend"] == "CUTLASS"
    assert _trt(source=IX, system="h200_sxm", precision="fp8")["moe_backend"] == "CUTLASS"


def test_trtllm_gptoss_and_llama_flags_follow_the_launch_scripts():
    e = _trt(source=IX, model="openai/gpt-oss-120b", system="b200_sxm", precision="fp4", gpus=1, attention_tp=1,
             moe_ep=1, concurrency=64)
    assert e == {"enable_block_reuse": False, "max_num_tokens": 20000, "max_batch_size": 512,
                 "free_gpu_memory_fraction": 0.85, "stream_interval": 20, "num_postprocess_workers": 4,
                 "moe_backend": "TRTLLM"}
    e = _trt(source=IX, model="openai/gpt-oss-120b", system="h200_sxm", precision="fp4", gpus=1, attention_tp=1,
             moe_ep=1, concurrency=64)
    assert e["max_batch_size"] == 64 and e["max_num_tokens"] == 20000
    assert e["moe_backend"] == "TRITON"  # gptoss_fp4_h200_trt*.sh: triton_kernels, not CUTLASS
    llama = {"source": IX, "model": "meta-llama/Llama-3.1-70B", "system": "h200_sxm", "moe_ep": 1}
    e = _trt(**llama, precision="fp8", gpus=4, attention_tp=4)
    assert e == {"enable_block_reuse": False, "max_num_tokens": 16384, "batch_wait_timeout_iters": 20,
                 "batch_wait_max_tokens_ratio": 0.9}
    e = _trt(**llama, precision="fp8", gpus=8, attention_tp=8)
    assert e == {"enable_block_reuse": False, "max_num_tokens": 16384}
    e = _trt(**{**llama, "system": "b200_sxm"}, precision="fp4", gpus=2, attention_tp=2, isl=8192)
    assert e == {"enable_block_reuse": False, "max_num_tokens": 16384}


def test_trtllm_streaming_flags_follow_the_launch_scripts():
    # every DeepSeek script, plain and MTP, streams with stream_interval 10 and no postprocess
    # workers: the first chunk waits 9 iterations; gpt-oss's 20 with 4 workers: none
    for kw in ({}, {"measured_date": "2025-12-15"}, {"measured_date": "2026-01-14"},
               {"attention_tp": 1, "attention_dp": 8}):
        e = _trt(source=IX, system="b200_sxm", precision="fp4", **kw)
        assert e["stream_interval"] == 10 and "num_postprocess_workers" not in e
        assert TRTLLMOptions(**e).first_chunk_delay_iters == 9
    e = _trt(source=IX, model="openai/gpt-oss-120b", system="h200_sxm", precision="fp4", gpus=1, attention_tp=1,
             moe_ep=1, concurrency=64)
    assert TRTLLMOptions(**e).first_chunk_delay_iters == 0
    assert TRTLLMOptions().first_chunk_delay_iters == 0  # TensorRT-LLM's default: every iteration


def test_trtllm_rows_without_a_script_keep_the_old_rule():
    e = _trt(source="aic_silicon_sample/nvidia", model="Qwen/Qwen3-32B", system="h100_sxm", precision="fp8",
             gpus=2, attention_tp=2, moe_ep=1, concurrency=48, workload="fixed_lengths_unverified")
    assert e == {"max_batch_size": 48, "enable_block_reuse": False, "max_num_tokens": 2248}


def _vllm(*, scheduling: bool = False, **kw) -> dict:
    """The point's vLLM flags (``async_scheduling`` only with ``scheduling``: its own test)."""
    p = point_config(row(backend="vllm", moe_ep=1, **kw))
    assert p.status == "ok"
    load_config(p.config)
    eng = dict(p.config["deployment"]["engine"])
    assert eng.pop("name") == "vllm"
    assert isinstance(eng["async_scheduling"], bool)  # always said: vLLM's default changed at 0.14
    if not scheduling:
        eng.pop("async_scheduling")
    return eng


MINIMAX = {"source": IX, "model": "MiniMaxAI/MiniMax-M2.5", "gpus": 4, "attention_tp": 4}


def test_vllm_minimax_flags_follow_the_launch_scripts():
    # single_node/minimaxm2.5_fp8_b200.sh before 2026-04-03: memory 0.95, block 32, vLLM's defaults
    e = _vllm(**MINIMAX, system="b200_sxm", precision="fp8", concurrency=64, measured_date="2026-03-11")
    assert e == {"enable_prefix_caching": False, "block_size": 32, "gpu_memory_utilization": 0.95}
    # from 2026-04-03 (and the B300 script): memory 0.90, --max-num-batched-tokens ISL * 2
    for system in ("b200_sxm", "b300_sxm"):
        e = _vllm(**MINIMAX, system=system, precision="fp8", isl=8192, osl=1024, measured_date="2026-04-21")
        assert e == {"enable_prefix_caching": False, "block_size": 32, "gpu_memory_utilization": 0.9,
                     "max_num_batched_tokens": 16384}
    e = _vllm(**MINIMAX, system="b300_sxm", precision="fp4", measured_date="2026-04-17")
    assert e == {"enable_prefix_caching": False, "gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048}
    e = _vllm(**MINIMAX, system="h100_sxm", precision="fp8", concurrency=64, measured_date="2026-03-27")
    assert e == {"enable_prefix_caching": False, "gpu_memory_utilization": 0.9, "max_num_seqs": 256}
    e = _vllm(**MINIMAX, system="h200_sxm", precision="fp8", concurrency=64, measured_date="2026-03-27")
    assert e == {"enable_prefix_caching": False, "gpu_memory_utilization": 0.95}


def test_vllm_gptoss_llama_kimi_flags_follow_the_launch_scripts():
    one = {"source": IX, "gpus": 1, "attention_tp": 1}
    e = _vllm(**one, model="openai/gpt-oss-120b", system="b200_sxm", precision="fp4", concurrency=64)
    assert e == {"enable_prefix_caching": False, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
                 "gpu_memory_utilization": 0.9, "max_model_len": 2068}
    e = _vllm(**one, model="openai/gpt-oss-120b", system="h100_sxm", precision="fp4", concurrency=64, isl=8192)
    assert e["max_num_seqs"] == 64 and e["max_model_len"] == 10240
    e = _vllm(**one, model="openai/gpt-oss-120b", system="h200_sxm", precision="fp4", concurrency=64, isl=8192)
    assert e["max_num_seqs"] == 64 and e["max_model_len"] == 8192 + 1024 + 200
    # VLLM_MXFP4_USE_MARLIN=1 in the H100 / H200 scripts from 2026-01-02 (InferenceX PR 327)
    for date, marlin in (("2025-12-08", False), ("2026-03-27", True)):
        for system in ("h100_sxm", "h200_sxm"):
            e = _vllm(**one, model="openai/gpt-oss-120b", system=system, precision="fp4", measured_date=date)
            assert e.get("mxfp4_use_marlin", False) is marlin
    e = _vllm(**one, model="openai/gpt-oss-120b", system="b200_sxm", precision="fp4", measured_date="2026-03-27")
    assert "mxfp4_use_marlin" not in e
    llama = {"source": IX, "model": "meta-llama/Llama-3.1-70B", "gpus": 2, "attention_tp": 2}
    e = _vllm(**llama, system="b200_sxm", precision="fp8", concurrency=16)
    assert e == {"enable_prefix_caching": False, "max_num_seqs": 512, "max_num_batched_tokens": 8192,
                 "gpu_memory_utilization": 0.9}
    assert _vllm(**llama, system="b200_sxm", precision="fp4")["max_model_len"] == 2068
    e = _vllm(**llama, system="h100_sxm", precision="fp8", concurrency=16)
    assert e["max_num_seqs"] == 16 and e["max_model_len"] == 10240
    kimi = {"source": IX, "model": "moonshotai/Kimi-K2.5", "gpus": 8, "attention_tp": 8}
    e = _vllm(**kimi, system="h200_sxm", precision="int4", concurrency=32, measured_date="2026-03-02")
    assert e == {"enable_prefix_caching": False, "max_num_seqs": 32, "gpu_memory_utilization": 0.95,
                 "max_num_batched_tokens": 8192}
    e = _vllm(**kimi, system="b200_sxm", precision="fp4", concurrency=32, measured_date="2026-03-27")
    assert e["gpu_memory_utilization"] == 0.9 and e["max_num_batched_tokens"] == 8192
    e = _vllm(**kimi, system="b200_sxm", precision="fp4", isl=8192, osl=1024, measured_date="2026-04-20")
    assert e["max_num_batched_tokens"] == 16384


def test_vllm_rows_without_a_script_keep_the_old_rule():
    old = {"max_num_seqs": 48, "max_num_batched_tokens": 8192, "enable_prefix_caching": False,
           "gpu_memory_utilization": 0.9}
    assert _vllm(source="aic_silicon_sample/nvidia", model="Qwen/Qwen3-32B", system="h100_sxm", precision="",
                 gpus=2, attention_tp=2, concurrency=48, workload="fixed_lengths_unverified") == old
    # an InferenceX row of a model no vLLM script here covers
    assert _vllm(source=IX, model="Qwen/Qwen3-32B", system="h100_sxm", precision="", gpus=2, attention_tp=2,
                 concurrency=48) == old


def test_vllm_schedules_asynchronously_from_014_and_where_the_2025_scripts_asked():
    """vLLM 0.14.0 turned async scheduling on by default; InferenceX's 2025 gpt-oss and
    Llama-3.1-70B scripts set ``async-scheduling: true`` in their config.yaml."""
    from servesim.validate.recipes.vllm import vllm_async_scheduling

    qwen = {"source": "aic_silicon_sample/nvidia", "model": "Qwen/Qwen3-32B", "system": "h100_sxm",
            "workload": "fixed_lengths_unverified"}
    assert not vllm_async_scheduling(row(**qwen, backend="vllm", backend_version="0.12.0"))
    assert vllm_async_scheduling(row(**qwen, backend="vllm", backend_version="0.14.0"))
    assert vllm_async_scheduling(row(**qwen, backend="vllm", backend_version="v0.19.0"))
    assert vllm_async_scheduling(row(**qwen, backend="vllm", backend_version="nightly-5b8c30d6",
                                     measured_date="2026-04-03"))
    assert not vllm_async_scheduling(row(**qwen, backend="vllm", backend_version="nightly-5b8c30d6",
                                         measured_date="2025-12-01"))
    assert not vllm_async_scheduling(row(**qwen, backend="vllm", backend_version=""))
    gptoss = {"source": IX, "model": "openai/gpt-oss-120b", "system": "h100_sxm", "precision": "fp4",
              "backend": "vllm", "backend_version": "0.11.2", "measured_date": "2025-12-08"}
    assert vllm_async_scheduling(row(**gptoss))
    assert _vllm(**qwen, backend_version="0.15.1", precision="", gpus=2, attention_tp=2, concurrency=8,
                 scheduling=True)["async_scheduling"] is True
    assert _vllm(**qwen, backend_version="0.12.0", precision="", gpus=2, attention_tp=2, concurrency=8,
                 scheduling=True)["async_scheduling"] is False


def _vllm_kv(**kw) -> str | None:
    p = point_config(row(**({"backend": "vllm", "moe_ep": 1} | kw)))
    assert p.status == "ok"
    return p.config["deployment"]["kv_dtype"]


def test_vllm_kv_dtype_follows_the_launch_scripts():
    # scripts without --kv-cache-dtype fp8 run vLLM's auto (bf16): MiniMax on Hopper, early fp8 B200
    assert _vllm_kv(**MINIMAX, system="h200_sxm", precision="fp8", measured_date="2026-03-27") == "bf16"
    assert _vllm_kv(**MINIMAX, system="b200_sxm", precision="fp8", measured_date="2026-03-11") == "bf16"
    assert _vllm_kv(**MINIMAX, system="b200_sxm", precision="fp8", measured_date="2026-04-21") == "fp8"
    gptoss = {"source": IX, "model": "openai/gpt-oss-120b", "gpus": 1, "attention_tp": 1, "precision": "fp4"}
    assert _vllm_kv(**gptoss, system="h100_sxm", measured_date="2026-03-20") == "bf16"
    assert _vllm_kv(**gptoss, system="b200_sxm", measured_date="2025-11-10") == "bf16"
    assert _vllm_kv(**gptoss, system="b200_sxm", measured_date="2026-02-10") == "fp8"
    kimi = {"source": IX, "model": "moonshotai/Kimi-K2.5", "gpus": 8, "attention_tp": 8, "moe_ep": 8}
    assert _vllm_kv(**(kimi | {"precision": "int4", "system": "h200_sxm"})) == "bf16"
    assert _vllm_kv(**(kimi | {"precision": "fp4", "system": "b200_sxm", "measured_date": "2026-04-21"})) == "fp8"
    llama = {"source": IX, "model": "meta-llama/Llama-3.1-70B", "gpus": 4, "attention_tp": 4, "precision": "fp8"}
    assert _vllm_kv(**llama, system="h100_sxm", measured_date="2025-10-20") == "fp8"
    # an inferencex_random row of a model no vLLM script covers keeps the README's --kv-cache-dtype fp8
    assert _vllm_kv(source=IX, model="Qwen/Qwen3-32B", system="h100_sxm", precision="fp8", gpus=2,
                    attention_tp=2) == "fp8"


NVIDIA = {"source": "aic_silicon_sample/nvidia", "workload": "fixed_lengths_unverified"}


def test_vllm_rows_with_undocumented_flags_run_vllms_auto_kv():
    # bf16 / fp8 / int4 checkpoints: "auto" is the activation dtype (None: the engine's bf16)
    assert _vllm_kv(**NVIDIA, model="Qwen/Qwen3-32B", system="h100_sxm", precision="", gpus=2,
                    attention_tp=2, backend_version="0.12.0") is None
    assert _vllm_kv(**NVIDIA, model="nvidia/Llama-3.1-8B-Instruct-FP8", system="h200_sxm", precision="fp8",
                    gpus=1, attention_tp=1, backend_version="0.12.0") is None
    kimi = {"model": "moonshotai/Kimi-K2.5", "system": "b200_sxm", "gpus": 4, "attention_tp": 4, "moe_ep": 4}
    assert _vllm_kv(**NVIDIA, **kimi, precision="int4", backend_version="0.15.1") is None
    # NVFP4 checkpoints carry kv_cache_quant_algo FP8, which "auto" follows after vLLM 0.12
    assert _vllm_kv(**NVIDIA, **kimi, precision="fp4", backend_version="0.17.0") == "fp8"
    assert _vllm_kv(**NVIDIA, **kimi, precision="fp4", backend_version="0.12.0") is None
    p = point_config(row(backend="vllm", moe_ep=1, model="Qwen/Qwen3-32B", system="h100_sxm", precision="",
                         gpus=2, attention_tp=2, **NVIDIA))
    assert build_deployment(load_config(p.config)).kv_dtype == "bf16"


def test_gpt_oss_h200_trtllm_runs_bf16_kv_as_its_script_says():
    """gptoss_fp4_h200_trt_slurm.sh: kv_cache_config dtype auto, and the mxfp4 checkpoint has no KV scheme."""
    def kv(system: str, source: str = IX) -> str | None:
        p = point_config(row(backend="trtllm", source=source, model="openai/gpt-oss-120b", precision="fp4",
                             system=system, gpus=4, attention_tp=4, moe_ep=1, measured_date="2025-12-15"))
        return p.config["deployment"]["kv_dtype"]

    assert kv("h200_sxm") == "bf16"
    assert kv("b200_sxm") == "fp8"  # the B200 script sets dtype: fp8
    assert kv("h200_sxm", source="aic_silicon_sample/nvidia") == "fp8"  # undocumented flags: the default rule


def test_minimax_fp4_b200_rows_of_2026_04_03_ran_pr_996s_script():
    def eng(date: str) -> dict:
        p = point_config(row(backend="vllm", source=IX, model="MiniMaxAI/MiniMax-M2.5", precision="fp4",
                             system="b200_sxm", gpus=4, attention_tp=4, moe_ep=1, isl=1024, measured_date=date))
        return p.config["deployment"]["engine"]

    early, later = eng("2026-04-03"), eng("2026-04-08")
    assert early["gpu_memory_utilization"] == 0.95 and early["block_size"] == 32
    assert "max_num_batched_tokens" not in early
    assert later["gpu_memory_utilization"] == 0.9 and later["max_num_batched_tokens"] == 2048


def test_trtllm_deepseek_fp8_b200_cases_follow_the_script_of_the_rows_date():
    """dsr1_fp8_b200_trt.sh from 2026-01-29: DELAY_BATCHING for 1k/1k at every CONC >= 64, the 0.7
    memory fraction for 1k/8k at CONC >= 256 only; the earlier slurm script had neither."""
    kw = dict(source=IX, system="b200_sxm", precision="fp8")
    e = _trt(concurrency=512, **kw)
    assert e["batch_wait_timeout_iters"] == 40 and e["free_gpu_memory_fraction"] == 0.8
    assert _trt(concurrency=256, osl=8192, **kw)["free_gpu_memory_fraction"] == 0.7
    early = _trt(concurrency=128, measured_date="2025-12-15", **kw)
    assert "batch_wait_timeout_iters" not in early and early["free_gpu_memory_fraction"] == 0.8


def test_sglang_deepseek_fp4_blackwell_flags_follow_the_script():
    """dsr1_fp4_b200(_docker).sh, unchanged 2025-11 .. 2026-05: 0.85, chunk 16384, 256 running requests."""
    p = point_config(row(source=IX, system="b200_sxm", precision="fp4", concurrency=512, gpus=4, attention_tp=4,
                         moe_ep=4))
    eng = p.config["deployment"]["engine"]
    assert (eng["mem_fraction_static"], eng["chunked_prefill_size"], eng["max_prefill_tokens"],
            eng["max_running_requests"], eng["scheduler_recv_interval"]) == (0.85, 16384, 16384, 256, 30)
    fp8 = point_config(row(source=IX, system="b200_sxm", precision="fp8")).config["deployment"]["engine"]
    assert fp8["mem_fraction_static"] == 0.82 and fp8["chunked_prefill_size"] == 32768


def _sglang_engine(**kw) -> dict:
    return point_config(row(source=IX, **kw)).config["deployment"]["engine"]


def test_sglang_deepseek_fp8_flags_follow_the_scripts():
    """dsr1_fp8_b200.sh / dsr1_fp8_b300.sh at tp 4: 32 running requests, 0.95, chunk 8192, receive interval
    10; tp 8 keeps the README's rule (the c256 rows contradict the scripts' 128 seats).  dsr1_fp8_h200.sh:
    512 running for 1k/1k, else 256."""
    for system in ("b200_sxm", "b300_sxm"):
        tp8 = _sglang_engine(system=system, precision="fp8", concurrency=256)
        assert (tp8["max_running_requests"], tp8["mem_fraction_static"], tp8["chunked_prefill_size"],
                tp8["max_prefill_tokens"], tp8["scheduler_recv_interval"]) == (256, 0.82, 32768, 32768, 30)
        tp4 = _sglang_engine(system=system, precision="fp8", concurrency=32, gpus=4, attention_tp=4, moe_ep=4,
                             isl=8192)
        assert (tp4["max_running_requests"], tp4["mem_fraction_static"], tp4["chunked_prefill_size"],
                tp4["max_prefill_tokens"], tp4["scheduler_recv_interval"]) == (32, 0.95, 8192, 8192, 10)
    assert _sglang_engine(system="h200_sxm", precision="fp8")["max_running_requests"] == 512
    # at concurrency 512 the README's rule would give 512; the 8k script says 256
    assert _sglang_engine(system="h200_sxm", precision="fp8", isl=8192, concurrency=512)["max_running_requests"] == 256
    # rows no InferenceX script ran keep the README's typical flags
    other = point_config(row(system="b200_sxm", precision="fp8", concurrency=256)).config["deployment"]["engine"]
    assert other["max_running_requests"] == 256 and other["scheduler_recv_interval"] == 30


def test_fixed_vllm_rows_spread_their_output_lengths_and_other_engines_do_not():
    """The NVIDIA vLLM fixed-length rows measure TTFTs no lockstep schedule allows (FIXED_VLLM_OUTPUT_SPREAD)."""
    from servesim.validate.points import FIXED_VLLM_OUTPUT_SPREAD

    qwen = {"model": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "", "gpus": 2, "attention_tp": 2,
            "moe_ep": 1}
    vllm = point_config(row(backend="vllm", **qwen, **NVIDIA))
    assert vllm.config["workload"]["recipe"] == "fixed"
    assert vllm.config["workload"]["output_spread"] == FIXED_VLLM_OUTPUT_SPREAD == 0.02
    for backend in ("sglang", "trtllm"):
        p = point_config(row(backend=backend, **qwen, **NVIDIA))
        assert "output_spread" not in p.config["workload"], backend
    ix = point_config(row(backend="vllm", **qwen, source=IX))
    assert ix.config["workload"]["recipe"] == "inferencex_random" and "output_spread" not in ix.config["workload"]


def test_output_spread_breaks_the_lockstep_waves_of_a_fixed_closed_loop():
    """Exact lengths: each wave's 16 prompts queue behind each other's prefill; a 2% spread staggers them."""
    import copy

    from servesim.validate.simulate import simulate_point

    qwen = {"model": "Qwen/Qwen3-32B", "system": "h100_sxm", "precision": "", "gpus": 8, "attention_tp": 8,
            "moe_ep": 1}
    config = point_config(row(backend="vllm", **qwen, **NVIDIA, concurrency=16, isl=1024, osl=256)).config
    lockstep = copy.deepcopy(config)
    lockstep["workload"]["output_spread"] = 0.0
    waves, spread = simulate_point(lockstep), simulate_point(config)
    assert spread.ttft_ms < 0.6 * waves.ttft_ms
    assert abs(spread.tpot_ms / waves.tpot_ms - 1) < 0.15  # the passes themselves barely change


def test_prompt_pool_campaigns_run_an_aiperf_client_against_a_prefix_cache():
    """reuses_prompt_pool: Dynamo-image rows and the H200 SGLang 0.5.6.post2 / vLLM 0.12.0 campaign."""
    from servesim.validate.recipes.prompt_pool import AIPERF_DATASET_ENTRIES, reuses_prompt_pool

    llama = {"model": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": "", "gpus": 1,
             "attention_tp": 1, "moe_ep": 1, "concurrency": 112, "isl": 1000, "osl": 100, "num_prompts": ""}
    for backend, version, cache_key in (("vllm", "0.12.0", "enable_prefix_caching"),
                                        ("sglang", "0.5.6.post2", "disable_radix_cache")):
        r = row(backend=backend, backend_version=version, **llama, **NVIDIA)
        assert reuses_prompt_pool(r)
        p = point_config(r)
        wl = p.config["workload"]
        assert (wl["recipe"], wl["prompt_pool"], wl["pool_sampling"], wl["num_prompts"], wl["warmup"]) == (
            "fixed", AIPERF_DATASET_ENTRIES, "shuffle", 20 * 112, 2 * 112)
        assert "output_spread" not in wl
        assert cache_key not in p.config["deployment"]["engine"]  # the flag turning the cache off is gone
        engine = load_config(p.config).deployment.engine
        assert engine.enable_prefix_caching if backend == "vllm" else not engine.disable_radix_cache
    # a row that records its request count keeps it
    assert point_config(row(backend="vllm", backend_version="0.12.0", **{**llama, "num_prompts": 500},
                            **NVIDIA)).config["workload"]["num_prompts"] == 500
    dynamo = row(backend="trtllm", model="nvidia/Qwen3-32B-NVFP4", system="gb200", precision="fp4", gpus=2,
                 attention_tp=2, moe_ep=1, num_prompts="", image="nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:0.8.1",
                 **NVIDIA)
    assert reuses_prompt_pool(dynamo)
    p = point_config(dynamo)
    assert p.config["workload"]["prompt_pool"] == AIPERF_DATASET_ENTRIES
    assert "enable_block_reuse" not in p.config["deployment"]["engine"]
    assert load_config(p.config).deployment.engine.enable_block_reuse
    # other campaigns, and InferenceX rows, keep their recipes
    assert not reuses_prompt_pool(row(backend="vllm", backend_version="0.12.0", **{**llama, "system": "h100_sxm"},
                                      **NVIDIA))
    assert not reuses_prompt_pool(row(backend="vllm", backend_version="0.16.0", **llama, **NVIDIA))
    ix = row(backend="vllm", backend_version="0.12.0", **llama, source=IX)
    assert not reuses_prompt_pool(ix) and "prompt_pool" not in point_config(ix).config["workload"]
    # a fixed row of another campaign keeps the README's cache-off flags
    h100 = point_config(row(backend="sglang", backend_version="0.5.1.post1", **{**llama, "system": "h100_sxm"},
                            **NVIDIA)).config
    assert h100["deployment"]["engine"]["disable_radix_cache"] is True and "prompt_pool" not in h100["workload"]


def test_a_reused_prompt_pool_is_served_from_the_prefix_cache():
    """With 100 prompts reused and the cache on, the measured requests mostly skip their prefill:
    TTFT about halves against fresh prompts, and the summary reports the reuse."""
    import copy

    from servesim.api import predict

    llama = {"model": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": "fp8", "gpus": 1,
             "attention_tp": 1, "moe_ep": 1, "concurrency": 32, "isl": 4000, "osl": 20, "num_prompts": ""}
    pooled = point_config(row(backend="vllm", backend_version="0.12.0", **llama, **NVIDIA)).config
    fresh = copy.deepcopy(pooled)
    del fresh["workload"]["prompt_pool"], fresh["workload"]["pool_sampling"]
    hit, miss = predict(pooled).summary, predict(fresh).summary
    assert hit["cache"]["prefix_reuse_ratio"] > 0.8 and miss["cache"]["prefix_reuse_ratio"] < 0.01
    assert hit["latency"]["ttft_ms"]["mean"] < 0.6 * miss["latency"]["ttft_ms"]["mean"]


def test_deepseek_trtllm_rows_of_mtp_only_sweeps_run_mtp_with_the_scripts_flags():
    """The dates on which InferenceX swept only the DeepSeek-R1 TensorRT-LLM MTP configs
    (perf-changelog: PRs 392, 632, 642) run MTP with the MTP scripts' batch and token limits."""
    kw = dict(source=IX, model="deepseek-ai/DeepSeek-R1", backend="trtllm", system="b200_sxm", precision="fp8",
              concurrency=32, isl=1024)
    p = point_config(row(measured_date="2026-02-05", **kw))
    spec = p.config["deployment"]["speculative"]
    assert spec == {"method": "mtp", "draft_tokens": 3, "acceptance_rate": INFERENCEX_MTP_ACCEPTANCE}
    eng = p.config["deployment"]["engine"]
    # --max_batch_size CONC, --max_num_tokens round_up_64((3 + 1) x 32 + 1024 + 64) = 1216
    assert (eng["max_batch_size"], eng["max_num_tokens"], eng["free_gpu_memory_fraction"]) == (32, 1216, 0.8)
    assert "batch_wait_timeout_iters" not in eng
    dep = build_deployment(load_config(p.config))
    assert dep.cfg.speculative is not None and dep.cfg.speculative.draft_tokens == 3
    # attention DP: one draft token; per-rank batch CONC/8 (PR 632, fp8), CONC/4 (PR 642, fp4), CONC/TP (PR 392)
    dp = dict(kw, concurrency=256, attention_tp=1, attention_dp=8)
    tp4 = dict(gpus=4, attention_tp=1, attention_dp=4)
    for date, precision, system, extra, batch, fraction in (
            ("2026-02-05", "fp8", "b200_sxm", {}, 32, 0.7),                      # CONC / 8
            ("2026-02-05", "fp8", "b200_sxm", {"concurrency": 4}, 4, 0.7),       # CONC < 8: CONC
            ("2026-02-06", "fp4", "b200_sxm", {}, 64, 0.8),                      # CONC / 4
            ("2026-02-06", "fp4", "b200_sxm", {"concurrency": 2}, 2, 0.8),       # CONC < 4: CONC
            ("2026-01-14", "fp8", "h200_sxm", {}, 32, 0.75),                     # CONC / TP
            ("2026-01-14", "fp4", "b200_sxm", {**tp4, "concurrency": 64}, 16, 0.8)):  # CONC / TP, TP 4
        p = point_config(row(**{**dp, "measured_date": date, "precision": precision, "system": system, **extra}))
        assert p.config["deployment"]["speculative"]["draft_tokens"] == 1
        eng = p.config["deployment"]["engine"]
        assert (eng["max_batch_size"], eng["free_gpu_memory_fraction"]) == (batch, fraction), (date, extra)
        assert eng["max_num_tokens"] == -(-(2 * batch + 1024 + 64) // 64) * 64
    # plain runs: another date, another engine, a source the scripts did not run, or a row the
    # source confirms was not speculative
    for other in (dict(measured_date="2026-01-29"), dict(measured_date="2026-01-28", system="h200_sxm"),
                  dict(measured_date="2026-02-05", backend="sglang"),
                  dict(measured_date="2026-02-05", source="aic_silicon_sample/nvidia"),
                  dict(measured_date="2026-02-05", quality="confirmed: no speculative decoding")):
        r = row(**{**kw, **other})
        assert inferencex_mtp_sweep(r) is None
        p = point_config(r)
        assert p.status == "ok" and "speculative" not in p.config["deployment"]


def test_mtp_rows_of_calibration_csv_ran_the_mtp_images():
    """On 2026-02-05/06 only the MTP configs had moved to TensorRT-LLM 1.2.0rc6.post3: every row
    taken as MTP on those dates carries that image, and no plain row does."""
    from tests.conftest import shared_file  # skips without ../shared

    rows = read_points(shared_file("measured", "calibration.csv"))
    post3 = [r for r in rows if r["backend"] == "trtllm" and (r.get("image") or "").endswith("1.2.0rc6.post3")]
    assert post3 and all(inferencex_mtp_sweep(r) in ("pr632", "pr642") for r in post3)
    later = [r for r in rows if inferencex_mtp_sweep(r) in ("pr632", "pr642")]
    assert len(later) == len(post3)


def test_rows_of_sweeps_that_ran_both_kinds_are_mtp_only_outside_the_plain_search_space():
    """2026-01-28 swept the plain H200 DeepSeek TRT-LLM config and its MTP twin: a layout or
    concurrency the plain config's search space lacks can only be an MTP run."""
    h200 = dict(source=IX, model="deepseek-ai/DeepSeek-R1", backend="trtllm", system="h200_sxm",
                precision="fp8", measured_date="2026-01-28", isl=1024, osl=8192, moe_ep=8)
    for kw in (dict(concurrency=64), dict(concurrency=32, isl=8192, osl=1024),
               dict(concurrency=64, isl=8192, osl=1024, attention_tp=1, attention_dp=8)):
        r = row(**{**h200, **kw})
        assert inferencex_mtp_sweep(r) is None, kw  # both configs sweep these
        assert "speculative" not in point_config(r).config["deployment"]
    for kw in (dict(concurrency=256, attention_tp=1, attention_dp=8), dict(concurrency=128)):
        r = row(**{**h200, **kw})  # only the MTP config sweeps these
        assert inferencex_mtp_sweep(r) == "pr392", kw
    p = point_config(row(**h200, concurrency=256, attention_tp=1, attention_dp=8))
    assert p.config["deployment"]["speculative"]["draft_tokens"] == 1
    assert p.config["deployment"]["engine"]["max_batch_size"] == 32  # CONC / TP
    load_config(p.config)
    # the B200 SGLang rows of 2026-03-25 stay plain (docs/validation.md)
    sgl = row(source=IX, model="deepseek-ai/DeepSeek-R1", backend="sglang", system="b200_sxm", precision="fp8",
              measured_date="2026-03-25", concurrency=128, moe_ep=1)
    assert inferencex_mtp_sweep(sgl) is None


@pytest.mark.parametrize("name", sorted(PREFIX_CACHE_FLAGS))
def test_prompt_pool_points_turn_each_engines_prefix_cache_back_on(name):
    flag, on = PREFIX_CACHE_FLAGS[name]
    engine = {"name": name, flag: not on}
    assert prefix_caching(engine) is False
    turn_prefix_cache_on(engine)
    assert flag not in engine and prefix_caching(engine) is True
