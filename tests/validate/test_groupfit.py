"""The sensitivity calibration: surrogate arithmetic, file round trip, and recovery of known values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.errors import ConfigError
from servesim.validate.groupfit import GroupParams, fit_hierarchy
from servesim.validate.points import Point
from servesim.validate.sensitivity import (KNOBS, BaseParams, PointSensitivity,
                                           read_sensitivities, write_sensitivities)

from sens_tables import drop_columns
from servesim.validate.sensitivity import physical_base

#: The base the synthetic tables are measured around: the op model's own values, so that the
#: groups' true values (scales of it) sit inside the fit's physical ranges.
DEFAULT_BASE = physical_base()


def _rel(mem_scale: float, prefill_scale: float, sched_s: float, stream_s: float,
         layer_s: float = DEFAULT_BASE.graph_layer_overhead_s, req_s: float = 0.0,
         running_s: float = 0.0, kv_scale: float = 1.2, comm_scale: float = 1.0) -> GroupParams:
    """Group values given as time scales relative to DEFAULT_BASE (additive ones absolute)."""
    return GroupParams(-math.log(DEFAULT_BASE.mem_eff) + math.log(mem_scale),
                       -math.log(DEFAULT_BASE.gemm_eff_max) + math.log(prefill_scale), sched_s, stream_s,
                       layer_s, req_s, running_s, -math.log(DEFAULT_BASE.attn_decode_mem_eff) + math.log(kv_scale),
                       math.log(DEFAULT_BASE.comm_time_scale * comm_scale))


def _point(i: int, gpu: str, engine: str, model: str, precision: str = "fp8",
           source: str = "aic_silicon_sample/inferencex") -> Point:
    row = {"id": f"p{i}", "system": gpu, "backend": engine, "model": model, "precision": precision,
           "workload": "inferencex_random", "measured_mean_ttft_ms": "1", "measured_mean_tpot_ms": "1",
           "source": source}
    return Point(row, {}, "ok")


#: Synthetic clients: calibration.csv source → (first_token_overhead_s, stream_per_running_s).
CLIENTS = {"aic_silicon_sample/inferencex": (0.03, 300e-6), "aic_silicon_sample/nvidia": (0.012, 80e-6)}


#: Layers of the synthetic models (one count per model, as real models have).
LAYERS = {"org/A": 80, "org/B": 61}


def _per_pass_s(sched_s: float, layer_s: float, model: str) -> float:
    """What the scheduler and per-layer times add to every pass: on one model's points only
    this sum is identifiable (both add a constant to every pass)."""
    return sched_s + LAYERS.get(model, 40) * layer_s


def _synthetic(truth: dict[str, GroupParams], n_per_group: int = 12, seed: int = 0,
               own_bases: bool = False, clients: dict[str, tuple[float, float]] | None = None) -> list[PointSensitivity]:
    """Points whose response is exactly the linear surrogate; 'measured' = surrogate at the true values.

    ``own_bases``: each point measured around its own random parameters (a second round).
    ``clients``: each point's source drawn in turn from these, and its client's stream values used
    instead of the group's ``stream_s`` / ``running_s`` (without it every point is an InferenceX row
    and the group's values stand for the client's)."""
    rng = np.random.default_rng(seed)
    comm_rng = np.random.default_rng(seed + 1000)  # its own stream: the other knobs' draws stay as they were
    out = []
    i = 0
    for key, g in truth.items():
        gpu, engine, model = key.split("/", 2)
        for j in range(n_per_group):
            source = sorted(clients)[j % len(clients)] if clients else "aic_silicon_sample/inferencex"
            p = _point(i, gpu, engine, model, source=source)
            stream_s, running_s = clients[source] if clients else (g.stream_s, g.running_s)
            i += 1
            s = PointSensitivity(p, "ok", ttft_base=float(rng.uniform(50, 500)), tpot_base=float(rng.uniform(5, 40)),
                                 layers=LAYERS.get(model, 40), first_token_running=float(rng.uniform(1, 256)))
            # slopes: ms per unit of each knob, physically signed (slower scales → longer times)
            # req: ms per (second per request and pass) = the sched slope times the batch size
            batch = float(rng.choice([1, 4, 16, 64, 256]))
            s.ttft_slope = {"mem": float(rng.uniform(5, 100)), "prefill": float(rng.uniform(20, 300)),
                            "sched": float(rng.uniform(1e3, 2e4))}
            s.ttft_slope["req"] = s.ttft_slope["sched"] * batch * float(rng.uniform(0.5, 1.0))
            s.tpot_slope = {"mem": s.tpot_base * float(rng.uniform(0.4, 0.8)), "prefill": float(rng.uniform(0, 2)),
                            "sched": float(rng.uniform(900, 1100))}
            s.tpot_slope["req"] = s.tpot_slope["sched"] * batch
            # kv: the KV reads grow with the batch and each request's context, not as the weights do
            context = float(rng.choice([1, 2, 8]))
            s.ttft_slope["kv"] = float(rng.uniform(0, 20))
            s.tpot_slope["kv"] = s.tpot_base * min(0.9, 0.002 * batch * context)
            # comm: collectives exist only on multi-GPU workers; their share grows with tp
            comm_share = float(comm_rng.choice([0.0, 0.05, 0.15, 0.3]))
            s.ttft_slope["comm"] = s.ttft_base * comm_share * float(comm_rng.uniform(0.5, 1.5))
            s.tpot_slope["comm"] = s.tpot_base * comm_share * float(comm_rng.uniform(0.5, 1.0))
            if own_bases:
                s.base = BaseParams(float(rng.uniform(0.3, 0.8)), float(rng.uniform(0.4, 0.9)), 0.3,
                                    float(rng.uniform(0.0, 0.01)), {},
                                    scheduler_per_request_s=float(rng.uniform(0.0, 30e-6)),
                                    attn_decode_mem_eff=float(rng.uniform(0.5, 0.9)),
                                    comm_time_scale=float(comm_rng.uniform(0.7, 1.5)))
            else:  # measured around this module's base (not the package's older DEFAULT_BASE)
                s.base = DEFAULT_BASE
            ttft, tpot = s.predict_at(g.mem_eff, g.gemm_eff_max, g.sched_s, stream_s, DEFAULT_BASE,
                                      graph_layer_overhead_s=g.layer_s, scheduler_per_request_s=g.req_s,
                                      stream_per_running_s=running_s, attn_decode_mem_eff=g.kv_eff,
                                      comm_time_scale=g.comm_scale)
            p.row["measured_mean_ttft_ms"] = str(ttft)
            p.row["measured_mean_tpot_ms"] = str(tpot)
            out.append(s)
    return out


def test_surrogate_is_linear_in_the_knobs():
    s = PointSensitivity(_point(0, "h200_sxm", "vllm", "m"), "ok", ttft_base=100.0, tpot_base=10.0,
                         ttft_slope={"mem": 10.0, "prefill": 50.0, "sched": 1000.0, "req": 3e4, "kv": 4.0,
                                     "comm": 30.0},
                         tpot_slope={"mem": 6.0, "prefill": 1.0, "sched": 1000.0, "req": 6e4, "kv": 5.0,
                                     "comm": 2.0})
    assert s.predict(1.0, 1.0, 0.0, 0.0) == (100.0, 10.0)
    ttft, tpot = s.predict(1.5, 1.0, 0.002, 0.03)
    assert math.isclose(ttft, 100 + 5 + 2 + 30) and math.isclose(tpot, 10 + 3 + 2)
    ttft, tpot = s.predict(1.0, 1.0, 0.0, 0.0, req_delta_s=10e-6)
    assert math.isclose(ttft, 100 + 0.3) and math.isclose(tpot, 10 + 0.6)
    ttft, tpot = s.predict(1.0, 1.0, 0.0, 0.0, kv=1.2)
    assert math.isclose(ttft, 100 + 0.8) and math.isclose(tpot, 10 + 1.0)
    ttft, tpot = s.predict(1.0, 1.0, 0.0, 0.0, comm=2.0)
    assert math.isclose(ttft, 100 + 30) and math.isclose(tpot, 10 + 2)
    # absolute values (a calibration's) map to the same relative scale
    b = DEFAULT_BASE
    at = s.predict_at(b.mem_eff, b.gemm_eff_max, b.scheduler_pass_s, 0.0, b, comm_time_scale=2 * b.comm_time_scale)
    assert at == pytest.approx((ttft, tpot))
    resolved = s.predict_resolved({"comm_time_scale": 2 * b.comm_time_scale},
                                  {"scheduler_pass_s": b.scheduler_pass_s,
                                   "scheduler_per_request_s": b.scheduler_per_request_s}, b)
    assert resolved == pytest.approx((ttft, tpot))
    # an engine CPU time the calibration does not set is 0, as a simulation takes it
    unset = s.predict_resolved({"comm_time_scale": 2 * b.comm_time_scale}, {}, b)
    assert unset == pytest.approx(s.predict(1.0, 1.0, -b.scheduler_pass_s, 0.0, comm=2.0,
                                            req_delta_s=-b.scheduler_per_request_s))


def test_layer_knob_is_the_sched_slope_times_the_layers():
    """Δ seconds on every layer adds layers × Δ to every pass: the sched knob's response."""
    s = PointSensitivity(_point(0, "h200_sxm", "vllm", "m"), "ok", ttft_base=100.0, tpot_base=10.0,
                         ttft_slope={"mem": 10.0, "prefill": 50.0, "sched": 1000.0, "req": 0.0, "kv": 0.0,
                                     "comm": 0.0},
                         tpot_slope={"mem": 6.0, "prefill": 1.0, "sched": 900.0, "req": 0.0, "kv": 0.0, "comm": 0.0},
                         layers=80)
    ttft, tpot = s.predict(1.0, 1.0, 0.0, 0.0, layer_delta_s=50e-6)
    assert math.isclose(ttft, 100 + 1000 * 80 * 50e-6) and math.isclose(tpot, 10 + 900 * 80 * 50e-6)
    # the same seconds per pass through the scheduler knob give the same answer
    assert s.predict(1.0, 1.0, 80 * 50e-6, 0.0) == pytest.approx((ttft, tpot))


def test_model_groups_separate_weight_traffic_from_the_per_layer_floor():
    """TPOT = a / tp + b across tensor-parallel sizes: the mem knob moves a (its slope shrinks
    with tp), the per-pass time moves b; a model group's fit recovers both."""
    truth = _rel(1.2, 1.0, 0.001, 0.05, layer_s=60e-6)
    rng = np.random.default_rng(3)
    sens = []
    for i in range(24):
        tp = int(rng.choice([1, 2, 4, 8]))
        p = _point(i, "b200_sxm", "vllm", "org/Dense")
        s = PointSensitivity(p, "ok", ttft_base=float(rng.uniform(80, 400)), tpot_base=16.0 / tp + 0.5,
                             layers=LAYERS.get("org/Dense", 40))
        s.ttft_slope = {"mem": 2.0, "prefill": float(rng.uniform(50, 200)), "sched": 2e3, "req": 0.0, "kv": 0.0,
                        "comm": 0.0}
        s.tpot_slope = {"mem": 16.0 / tp, "prefill": 0.1, "sched": 1e3, "req": 0.0, "kv": 0.0, "comm": 0.0}
        ttft, tpot = s.predict_at(truth.mem_eff, truth.gemm_eff_max, truth.sched_s, truth.stream_s, DEFAULT_BASE,
                                  graph_layer_overhead_s=truth.layer_s)
        p.row["measured_mean_ttft_ms"], p.row["measured_mean_tpot_ms"] = str(ttft), str(tpot)
        sens.append(s)
    cal = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5, min_model_points=3, prior_scale=0.0)
    a, f = cal.resolve("b200_sxm", "vllm", "org/Dense", "fp8")
    assert a["mem_eff"] == pytest.approx(truth.mem_eff, rel=0.02)
    assert _per_pass_s(f["scheduler_pass_s"], a["graph_layer_overhead_s"], "org/Dense") == pytest.approx(
        _per_pass_s(truth.sched_s, truth.layer_s, "org/Dense"), rel=0.05)


@pytest.mark.parametrize("prior_scale,tol,own_bases", [(0.0, 0.01, False), (0.25, 0.15, False), (0.0, 0.01, True)])
def test_fit_recovers_known_group_values(prior_scale, tol, own_bases):
    """Without priors the engine values of each model group and the stream values of each
    client are recovered exactly (also when every point was measured around its own base, as in
    a second round); the default priors bias them a little.  The clients' values are the same
    on every GPU and engine: they are fitted per client, never per group."""
    truth = {"h200_sxm/vllm/org/A": _rel(1.1, 1.1, 0.001, 0.0, layer_s=4e-6, req_s=5e-6, kv_scale=1.2),
             "b200_sxm/trtllm/org/B": _rel(1.05, 1.2, 0.004, 0.0, layer_s=6e-6, req_s=25e-6, kv_scale=1.15)}
    sens = _synthetic(truth, n_per_group=30, own_bases=own_bases, clients=CLIENTS)
    cal = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5, min_model_points=3, prior_scale=prior_scale)
    for key, g in truth.items():
        gpu, engine, model = key.split("/", 2)
        want_a, want_f = g.overrides(DEFAULT_BASE)
        got_a, got_f = cal.resolve(gpu, engine, model, "fp8")
        assert math.isclose(got_a["mem_eff"], want_a["mem_eff"], rel_tol=tol), key
        assert math.isclose(got_a["gemm_eff_max"], want_a["gemm_eff_max"], rel_tol=tol), key
        assert math.isclose(_per_pass_s(got_f["scheduler_pass_s"], got_a["graph_layer_overhead_s"], model),
                            _per_pass_s(g.sched_s, g.layer_s, model), rel_tol=3 * tol), key
        assert math.isclose(got_f["scheduler_per_request_s"], g.req_s, rel_tol=3 * tol), key
        assert math.isclose(got_a["attn_decode_mem_eff"], g.kv_eff, rel_tol=3 * tol), key
        assert got_a["comm_time_scale"] == 1.0  # collectives as the link model prices them
        assert "first_token_overhead_s" not in got_f and "stream_per_running_s" not in got_f
        assert f"{gpu}/{engine}/{model}@fp8" in cal.groups
    from servesim.perf.clients import client_for_source

    for source, (stream, running) in CLIENTS.items():
        fitted = cal.clients[client_for_source(source)]["frontend"]
        assert math.isclose(fitted["first_token_overhead_s"], stream, rel_tol=3 * tol, abs_tol=1e-4), source
        assert math.isclose(fitted["stream_per_running_s"], running, rel_tol=3 * tol, abs_tol=2e-6), source


def test_fitted_values_stay_in_their_physical_ranges():
    """Points that would need a faster-than-HBM memory time or a large per-layer floor under CUDA
    graphs get the bounds, not unphysical values."""
    from servesim.validate.groupfit import GEMM_EFF_BOUNDS, LAYER_BOUNDS_S, MEM_EFF_BOUNDS

    truth = {"h200_sxm/vllm/org/A": _rel(0.5, 0.6, 0.0, 0.0, layer_s=80e-6)}
    cal = fit_hierarchy(_synthetic(truth, n_per_group=20), DEFAULT_BASE, min_group_points=5, prior_scale=0.0)
    for key, g in cal.groups.items():
        a = g["analytic"]
        assert MEM_EFF_BOUNDS[0] <= a["mem_eff"] <= MEM_EFF_BOUNDS[1] + 1e-9, key
        assert a["gemm_eff_max"] <= GEMM_EFF_BOUNDS[1] + 1e-9, key
        assert a["graph_layer_overhead_s"] <= LAYER_BOUNDS_S[1] + 1e-12, key


def test_small_model_groups_keep_their_parent():
    truth = {"h200_sxm/vllm/org/A": _rel(1.4, 1.0, 0.001, 0.08)}
    sens = _synthetic(truth, n_per_group=12)
    lonely = _synthetic({"h200_sxm/vllm/org/Lonely": _rel(0.7, 1.0, 0.0, 0.5)}, n_per_group=2,
                        seed=1)
    for s in lonely:
        s.point.row["id"] += "-lonely"
    cal = fit_hierarchy(sens + lonely, DEFAULT_BASE, min_group_points=5, min_model_points=3)
    assert "h200_sxm/vllm/org/Lonely@fp8" not in cal.groups
    # its GPU/engine group's values; not the engine CPU time fitted on the group's other models
    assert cal.resolve("h200_sxm", "vllm", "org/Lonely", "fp8") == (cal.resolve("h200_sxm", "vllm")[0], {})


def test_a_model_without_a_group_gets_a_firmly_held_gpu_engine_fit():
    """One dominant model skews a GPU/engine group's weakly held fit, which its model groups
    start from; a model calibration never saw gets the group's values held nearer the physical
    ones instead (memory time scales: the dominant model 1.25, the physical prior ~0.69)."""
    sens = (_synthetic({"h200_sxm/vllm/org/A": _rel(1.25, 1.0, 0.002, 0.05)}, n_per_group=30)
            + _synthetic({"b200_sxm/vllm/org/B": _rel(0.8, 1.0, 0.002, 0.05)}, n_per_group=30, seed=1)
            + _synthetic({"h100_sxm/vllm/org/C": _rel(0.8, 1.0, 0.002, 0.05)}, n_per_group=30, seed=2))
    for i, s in enumerate(sens):
        s.point.row["id"] = f"q{i}"
    weak = fit_hierarchy(sens, DEFAULT_BASE, fallback_prior_weight=0.3)  # the model groups' parent
    cal = fit_hierarchy(sens, DEFAULT_BASE)

    def mem_scale(c, model):
        return DEFAULT_BASE.mem_eff / c.resolve("h200_sxm", "vllm", model, "fp8")[0]["mem_eff"]

    physical = DEFAULT_BASE.mem_eff / cal.shared["analytic"]["mem_eff"]
    assert physical < mem_scale(cal, "org/New") < mem_scale(weak, "org/New")
    # the fitted model keeps its own values, the same under either fallback
    assert mem_scale(cal, "org/A") == pytest.approx(mem_scale(weak, "org/A"))
    assert mem_scale(cal, "org/A") == pytest.approx(1.25, rel=0.05)


def test_a_checkpoint_without_a_group_gets_its_architectures():
    """Model groups are fitted per checkpoint name (runs of DeepSeek-V3, -R1 and -R1-0528 came
    from different campaigns and differ); one with too few points of its own resolves to the
    group of its architecture (DeepSeek-V3's shapes), not to the GPU/engine group."""
    v3 = _synthetic({"h200_sxm/trtllm/deepseek-ai/DeepSeek-V3": _rel(1.3, 0.9, 0.002, 0.12)}, n_per_group=6)
    few = _synthetic({"h200_sxm/trtllm/deepseek-ai/DeepSeek-R1-0528": _rel(1.0, 1.0, 0.002, 0.3)},
                     n_per_group=2, seed=1)
    dense = _synthetic({"h200_sxm/trtllm/org/A": _rel(0.8, 1.2, 0.002, 0.03)}, n_per_group=8, seed=2)
    for tag, group in (("-0528", few), ("-dense", dense)):
        for s in group:
            s.point.row["id"] += tag
    cal = fit_hierarchy(v3 + few + dense, DEFAULT_BASE, min_group_points=5, min_model_points=3, prior_scale=0.0)
    assert "h200_sxm/trtllm/deepseek-ai/DeepSeek-R1-0528@fp8" not in cal.groups
    own = cal.resolve("h200_sxm", "trtllm", "deepseek-ai/DeepSeek-V3", "fp8")
    assert own != cal.resolve("h200_sxm", "trtllm")
    assert cal.resolve("h200_sxm", "trtllm", "deepseek-ai/DeepSeek-R1-0528", "fp8") == own
    assert cal.group_of("h200_sxm", "trtllm", "deepseek-ai/DeepSeek-R1-0528", "fp8") == \
        "h200_sxm/trtllm/deepseek-ai/DeepSeek-V3@fp8"


def test_sensitivities_round_trip(tmp_path):
    sens = _synthetic({"h200_sxm/vllm/org/A": _rel(1.0, 1.0, 0.003, 0.02)}, n_per_group=3, own_bases=True)
    sens[0].base = None  # a point measured around the common base
    sens.append(PointSensitivity(_point(99, "h200_sxm", "vllm", "org/A"), "error: boom"))
    path = tmp_path / "s.csv"
    write_sensitivities(sens, path)
    again = read_sensitivities(path, [s.point for s in sens] + [_point(100, "x", "y", "z")])
    for a, b in zip(sens, again):
        assert a.status == b.status
        if a.status == "ok":
            assert math.isclose(a.ttft_base, b.ttft_base) and all(
                math.isclose(a.tpot_slope[k], b.tpot_slope[k]) for k in KNOBS)
            assert math.isclose(a.first_token_running, b.first_token_running)
            assert (a.base is None) == (b.base is None)
            if a.base is not None:
                assert math.isclose(a.base.mem_eff, b.base.mem_eff)
                assert math.isclose(a.base.scheduler_pass_s, b.base.scheduler_pass_s)
                assert math.isclose(a.base.scheduler_per_request_s, b.base.scheduler_per_request_s)
                assert math.isclose(a.base.attn_decode_mem_eff, b.base.attn_decode_mem_eff)
                assert math.isclose(a.base.comm_time_scale, b.base.comm_time_scale)
    assert again[-1].status.startswith("error: not in")


def test_sensitivities_of_a_changed_config_are_refused(tmp_path):
    """A row measured for one config must not feed a fit of the point under another."""
    sens = _synthetic({"h200_sxm/vllm/org/A": _rel(1.0, 1.0, 0.003, 0.02)}, n_per_group=3)
    for s in sens:
        s.point.config = {"deployment": {"kv_dtype": "fp8"}}
    path = tmp_path / "s.csv"
    write_sensitivities(sens, path)
    points = [s.point for s in sens]
    assert [s.status for s in read_sensitivities(path, points)] == [s.status for s in sens]
    points[1].config = {"deployment": {"kv_dtype": None}}  # e.g. the point's KV precision changed
    with pytest.raises(ConfigError, match=f"{points[1].id}.*re-measure"):
        read_sensitivities(path, points)


def test_a_refused_layout_keeps_its_config_digest_in_one_process(tmp_path):
    """A point whose layout the deployment model refuses is measured as unsupported; in one
    process (no pool copying the points) its table row must carry the digest of the point as
    loaded, or reading the table back calls it stale."""
    from servesim.validate.points import point_config
    from servesim.validate.sensitivity import measure_sensitivities

    from measured_rows import row

    # DeepSeek-V3 in fp8 on one H200: its weights do not fit
    pt = point_config(row(gpus="1", attention_tp="1", moe_ep="1"))
    assert pt.status == "ok"
    sens = measure_sensitivities([pt], DEFAULT_BASE, processes=1)
    assert sens[0].status.startswith("unsupported") and pt.config is not None
    path = tmp_path / "s.csv"
    write_sensitivities(sens, path)
    fresh = point_config(row(gpus="1", attention_tp="1", moe_ep="1"))
    assert read_sensitivities(path, [fresh])[0].status.startswith("unsupported")


def test_second_round_measures_each_point_around_its_own_group_values(monkeypatch):
    """measure_sensitivities with BaseParams.for_point: each point's runs use the values the
    previous calibration gives it, and its slopes are taken around them."""
    from servesim.perf.calibration import Calibration
    from servesim.validate import sensitivity as sv

    seen: dict[str, list[float]] = {}

    def fake_simulate(config, analytic, frontend):  # TTFT ∝ 1/mem_eff, TPOT ∝ 1/gemm_eff_max
        seen.setdefault(config["id"], []).append(analytic["mem_eff"])
        return type("R", (), {"completed": 1, "ttft_ms": 10.0 / analytic["mem_eff"], "first_token_running": 3.0,
                              "tpot_ms": 1.0 / analytic["gemm_eff_max"]})()

    monkeypatch.setattr(sv, "simulate_point", fake_simulate)
    monkeypatch.setattr(sv, "check_point", lambda p: p)
    cal = Calibration(shared={"analytic": {"mem_eff": 0.6, "gemm_eff_max": 0.8, "attn_prefill_eff_max": 0.3},
                              "frontend": {"scheduler_pass_s": 0.002}},
                      groups={"h200_sxm/vllm": {"analytic": {"mem_eff": 0.4}, "frontend": {}}})
    # (an AMD GPU: an NVIDIA one would inherit h200_sxm's group, the nearest of its vendor)
    pts = [_point(0, "h200_sxm", "vllm", "m"), _point(1, "mi300x", "vllm", "m")]
    for p in pts:
        p.config = {"id": p.id}
    sens = sv.measure_sensitivities(pts, lambda p: BaseParams.for_point(cal, p))
    assert [s.base.mem_eff for s in sens] == [0.4, 0.6]
    assert seen["p0"][0] == 0.4 and seen["p1"][0] == 0.6  # base runs at the point's own values
    for s in sens:  # the mem variant divides mem_eff by MEM_STEP: TTFT slope = 10/mem_eff per unit scale
        assert math.isclose(s.ttft_slope["mem"], 10.0 / s.base.mem_eff, rel_tol=1e-9)
        assert math.isclose(s.predict_at(s.base.mem_eff / 2, 0.8, 0.002, 0.0, DEFAULT_BASE)[0],
                            10.0 / s.base.mem_eff * 2, rel_tol=1e-9)


def test_mem_variant_stays_a_valid_efficiency():
    """Near mem_eff = 1 the mem variant steps the other way (slower), and says so in its delta."""
    from servesim.validate.sensitivity import MEM_STEP

    low = BaseParams(0.5, 0.8, 0.3, 0.002, {})
    high = BaseParams(0.9, 0.8, 0.3, 0.002, {})
    assert low.variants()["mem"][0]["mem_eff"] == pytest.approx(0.5 / MEM_STEP)
    assert high.variants()["mem"][0]["mem_eff"] == pytest.approx(0.9 * MEM_STEP) and 0.9 * MEM_STEP <= 1
    for b in (low, high):  # delta = time scale of the variant relative to the base, minus 1
        assert b.knob_deltas()["mem"] == pytest.approx(b.mem_eff / b.variants()["mem"][0]["mem_eff"] - 1)


def test_req_variant_adds_scheduler_time_per_request_and_old_files_are_refused(tmp_path):
    """The req variant moves scheduler_per_request_s by REQ_STEP_S (its delta); a sensitivities file
    written before the knob existed is refused with what to do, not fitted with a zero slope."""
    from servesim.validate.sensitivity import FIELDS, REQ_STEP_S

    b = BaseParams(0.5, 0.8, 0.3, 0.002, {}, scheduler_per_request_s=7e-6)
    base_fe, req_fe = b.variants()["base"][1], b.variants()["req"][1]
    assert base_fe["scheduler_per_request_s"] == 7e-6
    assert req_fe["scheduler_per_request_s"] == pytest.approx(7e-6 + REQ_STEP_S)
    assert b.knob_deltas()["req"] == REQ_STEP_S
    from servesim.perf.calibration import Calibration

    cal = Calibration(shared={"analytic": {}, "frontend": {"scheduler_per_request_s": 9e-6}})
    assert BaseParams.for_point(cal, _point(0, "h200_sxm", "sglang", "m")).scheduler_per_request_s == 9e-6
    old = tmp_path / "old.csv"
    old.write_text(",".join(f for f in FIELDS if not f.endswith("_req")) + "\n")
    with pytest.raises(ConfigError, match="before the 'req' knob"):
        read_sensitivities(old, [])


def test_model_groups_fit_their_own_per_request_time():
    """Two models under one GPU/engine whose per-request host times differ (sampling over
    vocabularies of different sizes): each model group recovers its own, with its own memory
    efficiency, while the GPU/engine group's value lies between them; a model without a group
    of its own takes none of it (Calibration.measured: another model's host time does not carry
    over)."""
    truth = {"h200_sxm/sglang/org/A": _rel(1.25, 1.0, 0.001, 0.05, req_s=10e-6),
             "h200_sxm/sglang/org/B": _rel(1.02, 1.0, 0.001, 0.05, req_s=40e-6)}
    cal = fit_hierarchy(_synthetic(truth, n_per_group=20), DEFAULT_BASE, min_group_points=5,
                        min_model_points=3, prior_scale=0.0)
    got = {}
    for model in ("org/A", "org/B"):
        a, f = cal.resolve("h200_sxm", "sglang", model, "fp8")
        got[model] = (f["scheduler_per_request_s"], a["mem_eff"])
        assert f["scheduler_per_request_s"] == pytest.approx(truth[f"h200_sxm/sglang/{model}"].req_s, rel=0.1)
        assert a["mem_eff"] == pytest.approx(truth[f"h200_sxm/sglang/{model}"].mem_eff, rel=0.05)
    parent = cal.resolve("h200_sxm", "sglang")[1]["scheduler_per_request_s"]
    assert got["org/A"][0] < parent < got["org/B"][0]
    assert cal.resolve("h200_sxm", "sglang", "org/C", "fp8")[1] == {}


def test_surrogate_at_a_calibrations_values_moves_with_its_per_request_time():
    """predict_resolved (used by benchmarks/calibration_cv.py) reads scheduler_per_request_s."""
    s = PointSensitivity(_point(0, "h200_sxm", "sglang", "m"), "ok", ttft_base=100.0, tpot_base=10.0,
                         ttft_slope={"mem": 0.0, "prefill": 0.0, "sched": 0.0, "req": 2e4, "kv": 0.0, "comm": 0.0},
                         tpot_slope={"mem": 0.0, "prefill": 0.0, "sched": 0.0, "req": 1e5, "kv": 0.0, "comm": 0.0})
    base_a, base_f = {}, {"scheduler_pass_s": DEFAULT_BASE.scheduler_pass_s,
                          "scheduler_per_request_s": DEFAULT_BASE.scheduler_per_request_s}
    assert s.predict_resolved(base_a, base_f, DEFAULT_BASE) == pytest.approx((100.0, 10.0))
    ttft, tpot = s.predict_resolved(base_a, base_f | {"scheduler_per_request_s": 10e-6}, DEFAULT_BASE)
    step = 10e-6 - DEFAULT_BASE.scheduler_per_request_s
    assert ttft == pytest.approx(100.0 + 2e4 * step) and tpot == pytest.approx(10.0 + 1e5 * step)
    assert step > 0


def test_a_file_without_the_running_count_is_refused(tmp_path):
    """A table written before first_token_running existed would fit stream_per_running_s at 0 while
    the other parameters absorbed its share: refused with what to do."""
    from servesim.validate.sensitivity import BASE_FIELDS, CONFIG_FIELD, FIELDS

    old = tmp_path / "old.csv"
    old.write_text(",".join(FIELDS + BASE_FIELDS + [CONFIG_FIELD]) + "\n")
    with pytest.raises(ConfigError, match="before the 'first_token_running' column"):
        read_sensitivities(old, [])


def test_a_table_without_the_kv_knob_is_completed_not_refused(tmp_path, monkeypatch):
    """A table written before the kv knob reads with kv missing; a fit refuses it until
    measure_missing_knobs runs each point at its base and at the kv variant only (two runs), and
    writing it back keeps the rows of points outside the selection."""
    from servesim.validate import sensitivity as sv

    sens = _synthetic({"h200_sxm/vllm/org/A": _rel(1.0, 1.0, 0.003, 0.02)}, n_per_group=6, own_bases=True)
    path = tmp_path / "old.csv"
    write_sensitivities(sens, path)
    drop_columns(path, ("ttft_d_kv", "tpot_d_kv"))
    points = [s.point for s in sens]
    old = read_sensitivities(path, points[:4])  # the "fit split": four of the six rows
    assert all(s.missing_knobs == ("kv",) for s in old)
    with pytest.raises(ValueError, match="no slopes"):
        fit_hierarchy(old, DEFAULT_BASE)
    runs: list[list[str]] = []

    def fake_run_jobs(jobs, processes, progress):  # TPOT ∝ 1/attn_decode_mem_eff
        out = []
        for point, variants in jobs:
            runs.append(sorted(variants))
            out.append(("ok", {k: (100.0, 7.5 / a["attn_decode_mem_eff"], 1.0) for k, (a, _) in variants.items()}))
        return out

    monkeypatch.setattr(sv, "_run_jobs", fake_run_jobs)
    assert sv.measure_missing_knobs(old) == 4
    assert runs == [["base", "kv"]] * 4
    for s in old:
        assert s.missing_knobs == () and s.ttft_slope["kv"] == 0.0
        # the kv variant divides the efficiency by KV_STEP: slope = base TPOT per unit time scale
        assert s.tpot_slope["kv"] == pytest.approx(7.5 / s.base.attn_decode_mem_eff)
    write_sensitivities(old, path, keep_other_rows=True)
    again = read_sensitivities(path, points)
    assert [s.missing_knobs for s in again] == [()] * 4 + [("kv",)] * 2
    assert again[0].tpot_slope["kv"] == pytest.approx(old[0].tpot_slope["kv"])
    assert math.isclose(again[5].tpot_base, sens[5].tpot_base)


def test_the_comm_knob_runs_only_where_there_are_collectives(tmp_path, monkeypatch):
    """A table written before the comm knob is completed by running its multi-GPU points at
    their base and the comm variant; single-GPU points (no collective) get slope 0 without a run."""
    from servesim.validate import sensitivity as sv

    sens = _synthetic({"h200_sxm/vllm/org/A": _rel(1.0, 1.0, 0.003, 0.02)}, n_per_group=4, own_bases=True)
    layouts = [{"tp": 1}, {"tp": 4}, {"tp": 1, "ep": 2, "attention_dp": 2}, {"tp": 1, "ep": 1}]
    for s, dep in zip(sens, layouts):
        s.point.config = {"deployment": dep}
    path = tmp_path / "old.csv"
    write_sensitivities(sens, path)
    drop_columns(path, ("ttft_d_comm", "tpot_d_comm", "base_comm_time_scale"))
    old = read_sensitivities(path, [s.point for s in sens])
    assert all(s.missing_knobs == ("comm",) for s in old)
    assert all(s.base.comm_time_scale == 1.0 for s in old)  # the model's value before the knob existed
    runs: dict[str, list[str]] = {}

    def fake_run_jobs(jobs, processes, progress):  # TPOT = 5 ms + 2 ms × comm_time_scale
        out = []
        for point, variants in jobs:
            runs[point.id] = sorted(variants)
            out.append(("ok", {k: (100.0, 5.0 + 2.0 * a["comm_time_scale"], 1.0) for k, (a, _) in variants.items()}))
        return out

    monkeypatch.setattr(sv, "_run_jobs", fake_run_jobs)
    assert sv.measure_missing_knobs(old) == 2
    assert runs == {sens[1].point.id: ["base", "comm"], sens[2].point.id: ["base", "comm"]}
    assert [s.tpot_slope["comm"] for s in old] == pytest.approx([0.0, 2.0, 2.0, 0.0])
    assert all(s.missing_knobs == () for s in old)


def test_the_cli_and_the_fit_share_one_group_minimum():
    """`servesim calibrate` and fit_hierarchy's callers (benchmarks/calibration_cv.py scores the
    shipped procedure with the defaults) need groups of the same size: the benchmark once used 5
    points where the shipped files used 8."""
    import inspect

    from servesim.cli import build_parser
    from servesim.perf.calibration import MIN_GROUP_POINTS

    args = build_parser().parse_args(["calibrate", "--points", "x.csv"])
    assert args.min_group_points == MIN_GROUP_POINTS
    assert inspect.signature(fit_hierarchy).parameters["min_group_points"].default == MIN_GROUP_POINTS


def test_shared_values_alone_equal_the_full_fits():
    """groups=False (benchmarks/calibration_cv.py's 'shared only' score) stops after the shared
    fit, which the group fits never change."""
    sens = _synthetic({"h200_sxm/vllm/org/A": _rel(1.3, 1.0, 0.001, 0.05)}, n_per_group=12)
    full = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5)
    shared = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5, groups=False)
    assert full.groups and not shared.groups
    assert shared.shared == full.shared
    assert set(shared.clients) == set(full.clients) == {"inferencex"}  # the clients are still fitted


def test_gemm_bounds_follow_the_gpus_measured_ceiling():
    """A calibration may never price GEMMs above what the GPU was measured to reach, and its
    floor is the same share of that ceiling on every GPU: AMD's max-achievable FLOPs (MI300X
    bf16 0.542 of the spec peak) move both ends down; H100's ceiling (0.87) keeps 0.55-0.85."""
    from servesim.validate.groupfit import GEMM_EFF_BOUNDS, GEMM_FLOOR_OF_CEILING, gpu_bounds

    def gemm_range(gpu: str) -> tuple[float, float]:
        lo, hi = gpu_bounds(gpu)
        return math.exp(-hi[1]), math.exp(-lo[1])

    assert gemm_range("h100_sxm") == pytest.approx(GEMM_EFF_BOUNDS)
    floor, ceiling = gemm_range("mi300x")
    assert ceiling == pytest.approx(0.542)
    assert floor == pytest.approx(0.542 * GEMM_FLOOR_OF_CEILING)
    assert floor < GEMM_EFF_BOUNDS[0]


def test_amd_parts_carry_measured_or_marked_ceilings():
    """Every AMD file prices compute and HBM below the spec sheet, and each ceiling names its
    source; the unmeasured MI355X says its values are stand-ins."""
    from servesim.hardware.gpu import load_gpu

    for name in ("mi300x", "mi325x", "mi355x"):
        gpu = load_gpu(name)
        for key in ("bf16", "fp8", "hbm"):
            assert 0.3 < gpu.ceiling(key) < 0.9, (name, key)
            assert gpu.sources[f"achievable.{key}"], (name, key)
    assert all("stand-in" in s for k, v in load_gpu("mi355x").sources.items() if k.startswith("achievable.")
               for s in v)


def test_groups_on_identical_compute_share_their_gemm_efficiency():
    """H100 and H200 are one die with different memory: per engine, their groups share the
    fitted GEMM efficiency (the H200 group takes the H100 group's), as do MI300X and MI325X;
    B200 and B300 (different FP4 peaks) stay apart.  The shipped calibration says so too."""
    from servesim.perf.calibration import load_calibration
    from servesim.validate.groupfit import shared_compute_leaders

    keys = ["b200_sxm/sglang", "b300_sxm/sglang", "h100_sxm/trtllm", "h100_sxm/vllm", "h200_sxm/trtllm",
            "h200_sxm/vllm", "mi300x/sglang", "mi325x/sglang"]
    named = {keys[f]: keys[lead] for f, lead in shared_compute_leaders(keys).items()}
    assert named == {"h200_sxm/trtllm": "h100_sxm/trtllm", "h200_sxm/vllm": "h100_sxm/vllm",
                     "mi325x/sglang": "mi300x/sglang"}
    cal = load_calibration("default")
    for engine in ("sglang", "trtllm", "vllm"):
        h100, _ = cal.resolve("h100_sxm", engine, "", "bf16")
        h200, _ = cal.resolve("h200_sxm", engine, "", "bf16")
        assert h100["gemm_eff_max"] == pytest.approx(h200["gemm_eff_max"], rel=1e-6), engine
