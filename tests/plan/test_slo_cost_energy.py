"""Attainment, goodput, cost and energy against values computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from servesim.api import predict
from servesim.hardware.gpu import load_gpu
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.models.arch import load_model
from servesim.plan.cost import CostConfig, cost_summary
from servesim.plan.energy import energy_summary, flops_per_token
from servesim.plan.fleet import Pool
from servesim.plan.slo import SLOConfig, percentile_share, slo_summary


def _recorder(reqs) -> RequestRecorder:
    """reqs: (arrival, token times or None, status, warmup) per request."""
    rec = RequestRecorder()
    for i, (arrival, tokens, status, warm) in enumerate(reqs):
        rec.register(i, f"r{i}", None, 0, 100, max(1, len(tokens or [])), warm)
        rec.arrived(i, arrival)
    for i, (arrival, tokens, status, warm) in enumerate(reqs):
        if tokens:
            rec.scheduled(i, arrival, 0)
            for t in tokens:
                rec.emit(np.array([i]), t)
        rec.finished(i, tokens[-1] if tokens else arrival, status, "" if status == Status.COMPLETED else "why")
    return rec


def test_attainment_and_goodput_by_hand():
    C, R = Status.COMPLETED, Status.REJECTED
    reqs = [
        (0.0, [0.1, 0.12, 0.14], C, False),  # ttft 100 ms, tpot 20 ms: meets both
        (1.0, [1.3, 1.31, 1.32], C, False),  # ttft 300 ms: misses ttft, tpot 10 ms meets
        (2.0, [2.05, 2.15], C, False),  # ttft 50 ms, tpot 100 ms: misses tpot
        (3.0, [3.2], C, False),  # one token: tpot undefined (not against it), ttft 200 ms meets
        (4.0, None, R, False),  # rejected: meets nothing
        (0.5, [5.0, 5.1], C, True),  # warm-up: not counted
    ]
    rec = _recorder(reqs)
    slo = SLOConfig(ttft_ms={"p50": 250}, tpot_ms={"p90": 50}, target=0.5)
    s = slo_summary(rec, slo, total_gpus=2)
    ttft, tpot = s["objectives"]
    assert ttft["metric"] == "ttft_ms" and ttft["attainment"] == pytest.approx(3 / 5)
    assert ttft["met"]  # 60% >= 50%
    assert tpot["attainment"] == pytest.approx(3 / 5) and not tpot["met"]  # 60% < 90%
    assert not s["met"]
    assert s["requests_meeting_all"] == 2  # requests 0 and 3
    assert s["attainment_all"] == pytest.approx(2 / 5)
    # measured span: first measured arrival 0.0 to last measured completion 3.2
    assert s["goodput_request_per_s"] == pytest.approx(2 / 3.2)
    assert s["goodput_output_tokens_per_s"] == pytest.approx((3 + 1) / 3.2)
    assert s["goodput_output_tokens_per_s_per_gpu"] == pytest.approx(4 / 3.2 / 2)
    assert not s["meets_target"]
    # two percentiles of one metric: "meeting all" uses the highest one's threshold
    s = slo_summary(rec, SLOConfig(ttft_ms={"p50": 60, "p99": 250}), total_gpus=1)
    assert [o["attainment"] for o in s["objectives"]] == [pytest.approx(1 / 5), pytest.approx(3 / 5)]
    assert s["attainment_all"] == pytest.approx(3 / 5)


def test_percentile_keys():
    assert percentile_share("p99.9") == pytest.approx(0.999)
    assert percentile_share("max") == 1.0
    with pytest.raises(ValueError):
        percentile_share("q90")


def test_slo_config_errors_name_the_key(base):
    from servesim.config import load_config
    from servesim.errors import ConfigError

    base["slo"] = {"ttft_ms": {"q90": 100}}
    with pytest.raises(ConfigError, match=r"slo\.ttft_ms.*not a percentile"):
        load_config(base)


def test_run_attainment_matches_the_requests(base):
    """On a real run, the summary's attainment equals a count over the per-request columns."""
    base["slo"] = {"ttft_ms": {"p90": 120}, "e2e_ms": {"p50": 1500}}
    pred = predict(base)
    rec = pred.recorder
    ttft = (rec.column("first_token") - rec.column("arrival")) * 1000
    e2e = (rec.column("finish") - rec.column("arrival")) * 1000
    done = rec.column("status") == Status.COMPLETED
    n = rec.size
    s = pred.summary["slo"]
    assert s["objectives"][0]["attainment"] == pytest.approx(float((done & (ttft <= 120)).sum()) / n)
    assert s["objectives"][1]["attainment"] == pytest.approx(float((done & (e2e <= 1500)).sum()) / n)
    good = done & (ttft <= 120) & (e2e <= 1500)
    span = pred.summary["throughput"]["duration_s"]
    assert s["goodput_request_per_s"] == pytest.approx(good.sum() / span)
    assert s["goodput_output_tokens_per_s"] == pytest.approx(rec.column("generated")[good].sum() / span)


def test_cost_by_hand():
    gpu = load_gpu("h100_sxm")
    cfg = CostConfig(gpu_hour_usd=3.0)
    c = cost_summary([("workers", gpu, 4)], cfg, duration_s=1800.0, input_tokens=2_000_000, output_tokens=500_000)
    assert c["usd_per_hour"] == 12.0
    assert c["run_usd"] == pytest.approx(6.0)
    assert c["usd_per_mtok"] == pytest.approx(6.0 / 2.5)
    assert c["usd_per_mtok_input"] == pytest.approx(3.0)
    assert c["usd_per_mtok_output"] == pytest.approx(12.0)
    # per-GPU prices, and the disaggregated split
    cfg = CostConfig(gpu_hour_usd={"h100_sxm": 2.0, "h200_sxm": 4.0})
    c = cost_summary([("prefill", gpu, 2), ("decode", load_gpu("h200_sxm"), 1)], cfg, 3600.0, 1_000_000, 1_000_000)
    assert c["usd_per_hour"] == 8.0
    assert c["prefill_usd_per_mtok_input"] == pytest.approx(4.0)
    assert c["decode_usd_per_mtok_output"] == pytest.approx(4.0)
    # a GPU without a bundled price: cost unknown, not zero
    c = cost_summary([("workers", load_gpu("mi355x"), 1)], None, 3600.0, 1, 1)
    assert c["usd_per_hour"] is None and c["usd_per_mtok"] is None


def test_bundled_prices_and_power_name_their_sources():
    from servesim.plan.cost import bundled_prices
    from servesim.plan.energy import bundled_power

    for name, entry in bundled_prices().items():
        load_gpu(name)  # every priced GPU is a bundled one
        assert entry["usd_per_gpu_hour"] > 0 and entry["source"] and entry["as_of"]
    for name, entry in bundled_power()["power"].items():
        load_gpu(name)
        assert 0 < entry["idle_w"] < entry["max_w"] and entry["source_max_w"].count("http") == 1


def test_energy_by_hand():
    gpu = load_gpu("h100_sxm")
    arch = load_model("meta-llama/Llama-3.1-8B-Instruct")
    cfg = CostConfig(power={"h100_sxm": {"idle_w": 100, "max_w": 700}}, memory_bound_share=0.5)
    fpt = flops_per_token(arch)
    assert 1.4e10 < fpt < 1.7e10  # ~2 x 7.5 B parameters without the embedding
    # one worker of 2 GPUs, busy 10 s of 20 s, processing tokens worth 4 s of peak compute per GPU
    tokens = int(4.0 * gpu.peak_flops("bf16") * 2 / fpt)
    worker = SimpleNamespace(busy_time=10.0, tokens=tokens)
    pool = Pool("workers", gpu, arch, "bf16", 2, [worker])
    e = energy_summary([pool], cfg, duration_s=20.0, input_tokens=tokens, output_tokens=0)
    compute_s = fpt * tokens / 2 / gpu.peak_flops("bf16")
    per_gpu = 100 * 20 + 600 * (0.5 * 10 + 0.5 * compute_s)
    assert e["joules"] == pytest.approx(2 * per_gpu)
    assert e["j_per_token"] == pytest.approx(2 * per_gpu / tokens)
    assert e["mean_power_w"] == pytest.approx(2 * per_gpu / 20)
    # compute can never exceed the busy time
    worker.tokens = tokens * 100
    e = energy_summary([pool], cfg, 20.0, 1, 0)
    assert e["joules"] == pytest.approx(2 * (100 * 20 + 600 * 10))


def test_run_reports_cost_and_energy_in_range(base):
    s = predict(base).summary
    assert s["cost"]["usd_per_hour"] == pytest.approx(6.73)  # 1 x H100 at the bundled price
    span = s["throughput"]["duration_s"]
    tokens = (s["throughput"]["input_tokens_per_s"] + s["throughput"]["output_tokens_per_s"]) * span
    assert s["cost"]["usd_per_mtok"] == pytest.approx(6.73 * span / 3600 / tokens * 1e6)
    # mean board power between idle and TDP
    assert 70 < s["energy"]["mean_power_w"] < 700
    assert not math.isnan(s["energy"]["j_per_token"])
