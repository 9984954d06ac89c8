"""The AISimulate side-by-side (benchmarks/aisimulate_validate.py) gives AISimulate servesim's workload.

AISimulate itself is not installed here (it lives in its own virtual environment). The config
tests pin down what the script sends (requests, concurrency, scheduler limits, quantisation);
a stand-in executable that reads the config and trace the script wrote and answers with
per-request lines computed from the trace pins down how it reads the answer (warm-up left out,
TPOT as the benchmark client defines it, failures kept as statuses).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servesim.validate.points import point_config
from servesim.workload.config import parse_workload
from servesim.workload.source import build_source

from benchscripts import load_benchmark
from measured_rows import row


ROW = row(model="meta-llama/Llama-3.1-70B", system="b200_sxm", backend="vllm", gpus=4, attention_tp=4,
          moe_tp=4, moe_ep=1, concurrency=8, osl=64, num_prompts=80, measured_mean_ttft_ms=100.0,
          measured_mean_tpot_ms=10.0)

#: Plays ``aisimulate predict -c CFG --output-dir DIR ...``: request i (1-based line of the
#: trace) gets TTFT = i ms and TPOT = 2 ms.
FAKE = '''
import json, sys, yaml
from pathlib import Path
args = sys.argv[1:]
cfg = yaml.safe_load(open(args[args.index("-c") + 1]))
out = Path(args[args.index("--output-dir") + 1]); out.mkdir(parents=True)
lines = open(cfg["traffic"]["source"]["paths"][0]).read().splitlines()
with open(out / "requests.jsonl", "w") as f:
    for i, line in enumerate(lines, 1):
        r = json.loads(line)
        ttft = float(i)
        e2e = ttft + 2.0 * (r["output_length"] - 1)
        f.write(json.dumps({"session_id": f"request_{i}", "ttft_ms": ttft, "e2e_latency_ms": e2e,
                            "output_length": r["output_length"], "terminal_status": "completed"}) + "\\n")
'''


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("aisimulate_validate")


def fake_exe(tmp_path: Path, body: str, name: str = "aisimulate") -> str:
    exe = tmp_path / name
    exe.write_text(f"#!{sys.executable}\n{body}")
    exe.chmod(0o755)
    return str(exe)


def test_trace_holds_servesims_requests_for_the_point(bench, tmp_path: Path) -> None:
    config = point_config(ROW).config
    reqs, warmup = bench.closed_loop_requests(config)
    ours = list(build_source(parse_workload(config["workload"]), seed=config["seed"]).requests())
    assert reqs == [(r.input_length, r.output_length, r.hash_ids) for r in ours]
    assert warmup == sum(r.warmup for r in ours) == 16 and len(reqs) == 96
    bench.write_trace(reqs, tmp_path / "t.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [(x["input_length"], x["output_length"], tuple(x["hash_ids"])) for x in lines] == reqs
    assert all(x["timestamp"] == 0 for x in lines)
    ids = [h for x in lines for h in x["hash_ids"]]
    assert len(ids) == len(set(ids))  # random prompts: nothing to reuse
    assert all(len(x["hash_ids"]) == -(-x["input_length"] // bench.TRACE_BLOCK) for x in lines)


def test_a_prompt_pool_point_replays_its_repeated_prompts_with_the_cache_on(bench, tmp_path: Path) -> None:
    """Points whose client reused 100 prompts (validate/recipes/prompt_pool.py:reuses_prompt_pool) give AISimulate
    the same repeated block ids and a prefix cache, so both simulators see the same reuse."""
    row = dict(ROW, source="aic_silicon_sample/nvidia", workload="fixed_lengths_unverified", system="h200_sxm",
               backend_version="0.12.0", num_prompts="")
    config = point_config(row).config
    reqs, warmup = bench.closed_loop_requests(config)
    assert len({ids for _, _, ids in reqs}) <= 100 < len(reqs) and warmup == 16
    bench.write_trace(reqs, tmp_path / "t.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [tuple(x["hash_ids"]) for x in lines] == [ids for _, _, ids in reqs]
    cfg = bench.aisimulate_config(row, config, tmp_path / "t.jsonl", None)
    assert cfg["engine"]["workers"]["aggregated"]["kv_cache"]["prefix_caching"] is True


def test_prefix_caching_follows_each_engines_flags_and_defaults(bench) -> None:
    assert bench.prefix_caching({"name": "vllm"}) is True
    assert bench.prefix_caching({"name": "vllm", "enable_prefix_caching": False}) is False
    assert bench.prefix_caching({"name": "sglang"}) is True
    assert bench.prefix_caching({"name": "sglang", "disable_radix_cache": True}) is False
    assert bench.prefix_caching({"name": "trtllm"}) is True
    assert bench.prefix_caching({"name": "trtllm", "enable_block_reuse": False}) is False
    with pytest.raises(ValueError, match="no prefix-cache rule"):
        bench.prefix_caching({"name": "other"})


def test_config_carries_the_points_engine_flags_and_layout(bench, tmp_path: Path) -> None:
    point = point_config(ROW)
    eng = point.config["deployment"]["engine"]
    cfg = bench.aisimulate_config(ROW, point.config, tmp_path / "t.jsonl", None)
    e = cfg["engine"]
    assert e["model"] == "meta-llama/Meta-Llama-3.1-70B"  # the id AISimulate bundles
    assert (e["hardware"], e["backend"], e["gemm_quant_mode"], e["kvcache_quant_mode"]) == \
        ("b200_sxm", "vllm", "fp8", "fp8")
    w = e["workers"]["aggregated"]
    assert w["scheduler"] == {"max_sequences": eng["max_num_seqs"],
                              "max_batched_tokens": eng["max_num_batched_tokens"]}
    assert w["kv_cache"]["prefix_caching"] is False
    assert w["parallelism"] == {"tensor": 4, "attention_data": 1, "moe_tensor": 4, "moe_expert": 1}
    assert cfg["traffic"]["load"] == {"type": "concurrency", "concurrency": 8}
    assert "timing" not in w  # AISimulate's own database mode unless asked
    hybrid = bench.aisimulate_config(ROW, point.config, tmp_path / "t.jsonl", None, "hybrid")
    assert hybrid["engine"]["workers"]["aggregated"]["timing"] == {"database_mode": "HYBRID"}
    sample = {"model_path": "x/y", "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block"}
    assert bench.aisimulate_config(ROW, point.config, tmp_path / "t.jsonl", sample)["engine"]["gemm_quant_mode"] \
        == "fp8_block"
    oss = dict(ROW, model="openai/gpt-oss-120b", precision="fp4", system="h100_sxm")
    e = bench.aisimulate_config(oss, point_config(oss).config, tmp_path / "t.jsonl", sample)["engine"]
    assert (e["gemm_quant_mode"], e["moe_quant_mode"]) == ("bfloat16", "w4a16_mxfp4")
    trt = dict(oss, system="b200_sxm", backend="trtllm")
    e = bench.aisimulate_config(trt, point_config(trt).config, tmp_path / "t.jsonl", sample)["engine"]
    assert (e["gemm_quant_mode"], e["moe_quant_mode"]) == ("bfloat16", "w4a8_mxfp4_mxfp8")
    kimi = dict(ROW, model="moonshotai/Kimi-K2.5", precision="int4", moe_tp="1", moe_ep="4")
    e = bench.aisimulate_config(kimi, point_config(kimi).config, tmp_path / "t.jsonl", sample)["engine"]
    assert (e["gemm_quant_mode"], e["moe_quant_mode"]) == ("bfloat16", "int4_wo")


def test_trtllm_without_chunked_context_turns_chunked_prefill_off(bench, tmp_path: Path) -> None:
    trt = dict(ROW, backend="trtllm", source="x/nvidia", workload="fixed_lengths_unverified")
    point = point_config(trt)
    cfg = bench.aisimulate_config(trt, point.config, tmp_path / "t.jsonl", None)
    eng = point.config["deployment"]["engine"]
    assert cfg["engine"]["enable_chunked_prefill"] is bool(eng.get("enable_chunked_context", False))
    assert cfg["engine"]["workers"]["aggregated"]["scheduler"]["max_batched_tokens"] == eng["max_num_tokens"]


def test_an_mtp_point_gives_aisimulate_its_drafts_and_mean_acceptance(bench, tmp_path: Path) -> None:
    mtp = row(source="aic_silicon_sample/inferencex", model="deepseek-ai/DeepSeek-R1", backend="trtllm",
              system="b200_sxm", precision="fp8", measured_date="2026-02-05", concurrency=16)
    point = point_config(mtp)
    p = point.config["deployment"]["speculative"]["acceptance_rate"]
    e = bench.aisimulate_config(mtp, point.config, tmp_path / "t.jsonl", None)["engine"]
    assert e["nextn"] == 3 and e["nextn_accepted"] == pytest.approx(p + p ** 2 + p ** 3)
    plain = dict(mtp, measured_date="2026-01-29")
    e = bench.aisimulate_config(plain, point_config(plain).config, tmp_path / "t.jsonl", None)["engine"]
    assert "nextn" not in e and "nextn_accepted" not in e


def test_run_point_reads_means_of_measured_requests(bench, tmp_path: Path) -> None:
    exe = fake_exe(tmp_path, FAKE)
    res = bench.run_point(exe, ROW, None, str(tmp_path))
    assert res["status"] == "ok", res["status"]
    # measured requests are trace lines 17..96: TTFT 17..96 ms, TPOT exactly 2 ms each
    assert float(res["predicted_mean_ttft_ms"]) == pytest.approx((17 + 96) / 2)
    assert float(res["predicted_mean_tpot_ms"]) == pytest.approx(2.0)


def test_run_point_reports_aisimulates_reason_and_unsupported_kinds(bench, tmp_path: Path) -> None:
    failing = fake_exe(tmp_path, "import sys\nprint('noise')\n"
                                 "print('aisimulate predict failed: missing performance data: MoE')\nsys.exit(1)\n")
    res = bench.run_point(failing, ROW, None, str(tmp_path))
    assert res["status"] == "error: missing performance data: MoE"
    silent = fake_exe(tmp_path, FAKE.replace('"completed"', '"rejected"'), name="rejecting")
    assert bench.run_point(silent, ROW, None, str(tmp_path))["status"] == \
        "error: cannot read AISimulate's requests.jsonl: no measured request completed"
    amd = bench.run_point(failing, dict(ROW, system="mi355x", backend="sglang"), None, str(tmp_path))
    assert amd["status"].startswith("unsupported: AISimulate has no mi355x")


def test_request_means_skip_warmup_and_unfinished(bench) -> None:
    lines = [{"session_id": "request_1", "ttft_ms": 1000.0, "e2e_latency_ms": 2000.0, "output_length": 11,
              "terminal_status": "completed"},
             {"session_id": "request_2", "ttft_ms": 10.0, "e2e_latency_ms": 110.0, "output_length": 11,
              "terminal_status": "completed"},
             {"session_id": "request_3", "ttft_ms": 30.0, "e2e_latency_ms": 30.0, "output_length": 1,
              "terminal_status": "completed"},
             {"session_id": "request_4", "ttft_ms": 5.0, "e2e_latency_ms": 5.0, "output_length": 9,
              "terminal_status": "rejected"}]
    ttft, tpot = bench.request_means(lines, warmup=1)
    assert ttft == pytest.approx(20.0) and tpot == pytest.approx(10.0)
    with pytest.raises(RuntimeError):
        bench.request_means(lines[:1], warmup=1)


def test_compare_scores_both_simulators_on_common_points(bench, tmp_path: Path, capsys) -> None:
    def res(i: str, ttft: str, tpot: str, status: str = "ok") -> dict:
        return {"id": i, "system": "h100_sxm", "backend": "vllm", "workload": "inferencex_random",
                "measured_mean_ttft_ms": "100", "measured_mean_tpot_ms": "10",
                "predicted_mean_ttft_ms": ttft, "predicted_mean_tpot_ms": tpot, "status": status}
    aisim = [res("a", "50", "12"), res("b", "150", "9"), res("c", "", "", "error: no data")]
    ours = tmp_path / "ours.csv"
    ours.write_text("id,predicted_mean_ttft_ms,predicted_mean_tpot_ms,status\n"
                    "a,110,10,ok\nb,100,11,ok\nc,100,10,ok\n")
    bench.compare(aisim, str(ours))
    out = capsys.readouterr().out
    assert "AISimulate simulated 2 of 3 points" in out
    # AISimulate: TTFT -50% / +50%, TPOT +20% / -10%; servesim: TTFT +10% / 0%, TPOT 0% / +10%
    assert "| overall | 2 | 50% | +0% | 5% | +5% | 15% | +5% | 5% | +5% |" in out
    assert "TTFT: AISimulate 0% within 20%, median 50%; servesim 100% within 20%, median 5%" in out


def test_reuse_compares_an_earlier_aisimulate_file_without_running_it(bench, tmp_path: Path, capsys,
                                                                      monkeypatch) -> None:
    """--reuse: AISimulate's predictions are deterministic, so a servesim refit is compared with
    its earlier --out file; no --aisimulate executable is needed."""
    cols = ("id,system,backend,workload,measured_mean_ttft_ms,measured_mean_tpot_ms,"
            "predicted_mean_ttft_ms,predicted_mean_tpot_ms,status\n")
    theirs = tmp_path / "aisim.csv"
    theirs.write_text(cols + "a,h100_sxm,vllm,inferencex_random,100,10,50,12,ok\n"
                             "b,h100_sxm,vllm,inferencex_random,100,10,150,9,ok\n")
    ours = tmp_path / "ours.csv"
    ours.write_text("id,predicted_mean_ttft_ms,predicted_mean_tpot_ms,status\na,110,10,ok\nb,100,11,ok\n")
    monkeypatch.setattr(sys, "argv", ["aisimulate_validate.py", "--reuse", str(theirs), "--servesim", str(ours)])
    assert bench.main() == 0
    assert "| overall | 2 | 50% | +0% | 5% | +5% | 15% | +5% | 5% | +5% |" in capsys.readouterr().out
