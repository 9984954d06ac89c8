"""servesim validate: one row per point, benchmark-style TPOT, frontend in the loop, CLI."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from servesim.api import predict
from servesim.cli import main
from servesim.perf.frontend import FrontendParams
from servesim.validate.points import point_config
from servesim.validate.run import COLUMNS
from servesim.validate.simulate import simulate_point
from tests.validate.test_validate_points import BASE, row

from sens_tables import drop_columns

SMALL = dict(model="meta-llama/Llama-3.1-8B-Instruct", system="h100_sxm", precision="", gpus=1, attention_tp=1,
             moe_tp=1, moe_ep=1, concurrency=8, isl=512, osl=32, num_prompts=32)


def _config():
    return point_config(row(**SMALL)).config


def test_zero_frontend_equals_predict():
    cfg = _config()
    r = simulate_point(cfg, {}, FrontendParams.zero())
    s = predict(cfg | {"perf": {"calibration": None}}).summary["latency"]
    assert r.ttft_ms == pytest.approx(s["ttft_ms"]["mean"], rel=1e-9)
    assert r.tpot_ms == pytest.approx(s["tpot_ms"]["mean"], rel=1e-9)


def test_validate_and_predict_share_one_path():
    """predict with the default calibration = simulate_point with the group's resolved values."""
    from servesim.perf.calibration import load_calibration

    point = point_config(row(**SMALL, source="aic_silicon_sample/inferencex"))
    cfg = point.config
    cal = load_calibration(None)
    # the point's weights are bf16 (empty precision): its model group, if the file has one
    key = ("h100_sxm", "sglang", "meta-llama/Llama-3.1-8B-Instruct", "bf16")
    analytic, frontend = point.calibration_values(cal)  # the group's engine values + the row's client
    assert point.client == "inferencex"
    r = simulate_point(cfg, analytic, FrontendParams.model_validate(frontend))
    pred = predict(cfg | {"client": point.client})
    s = pred.summary["latency"]
    assert r.ttft_ms == pytest.approx(s["ttft_ms"]["mean"], rel=1e-9)
    assert r.tpot_ms == pytest.approx(s["tpot_ms"]["mean"], rel=1e-9)
    perf = pred.to_json()["deployment_resolved"]["perf"]
    assert perf["calibration"] == "default.yaml" and perf["calibration_group"] == cal.group_of(*key)
    assert perf["frontend"] == FrontendParams.model_validate(frontend).model_dump()
    assert perf["client"] == "inferencex"


def test_frontend_queue_and_stream_latency_raise_ttft_not_tpot():
    cfg = _config()
    # one measured wave (as many prompts as the concurrency): sent together once every warm-up
    # has ended, into an idle engine, so stream latency adds exactly itself
    base = simulate_point(cfg, {}, FrontendParams.zero(), num_prompts=8)
    lat = simulate_point(cfg, {}, FrontendParams.zero().model_copy(update={"first_token_overhead_s": 0.05}),
                         num_prompts=8)
    assert lat.ttft_ms == pytest.approx(base.ttft_ms + 50, rel=1e-9)
    assert lat.tpot_ms == pytest.approx(base.tpot_ms, rel=1e-9)
    # a slow serial tokenizer: the 8 measured requests are sent at once and queue (mean wait
    # about 4.5 tokenizations), so TTFT grows by much more than one tokenization
    fe = FrontendParams.zero().model_copy(update={"tokenize_per_token_s": 2e-4})
    base8 = simulate_point(cfg, {}, FrontendParams.zero(), num_prompts=8)
    slow8 = simulate_point(cfg, {}, fe, num_prompts=8)
    one = 2e-4 * 0.9 * 512 * 1e3  # ms, longer than a prefill pass
    assert slow8.ttft_ms > base8.ttft_ms + 3 * one


def test_scheduler_overhead_raises_tpot():
    sched = FrontendParams.zero().model_copy(update={"scheduler_pass_s": 0.002})
    serial = point_config(row(**{**SMALL, "backend": "vllm"})).config
    base = simulate_point(serial, {}, FrontendParams.zero())
    slow = simulate_point(serial, {}, sched)
    # every pass pays it; prefill passes that interrupt decoding add a little more
    assert base.tpot_ms + 2.0 - 1e-9 <= slow.tpot_ms < base.tpot_ms + 2.0 * 1.3  # (float rounding)
    # SGLang's overlap loop runs it while the GPU runs the pass before: hidden behind longer passes
    overlapped = _config()
    base = simulate_point(overlapped, {}, FrontendParams.zero())
    assert base.tpot_ms > 2.0
    assert simulate_point(overlapped, {}, sched).tpot_ms == pytest.approx(base.tpot_ms, rel=1e-9)


def _write(path, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(BASE))
        w.writeheader()
        for r in rows:
            w.writerow(r)


def test_cli_validate_writes_every_point(tmp_path, capsys):
    pts = tmp_path / "points.csv"
    rows = [row(id="ok1", **SMALL), row(id="ok2", **{**SMALL, "concurrency": 2}),
            row(id="atom1", backend="atom"), row(id="dp1", attention_tp=1, attention_dp=8),
            row(id="bad1", **{**SMALL, "gpus": 3, "attention_tp": 3})]
    _write(pts, rows)
    out = tmp_path / "res.csv"
    assert main(["validate", "--points", str(pts), "--out", str(out), "--quiet"]) == 0
    with out.open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        got = list(reader)
    assert [g["id"] for g in got] == ["ok1", "ok2", "atom1", "dp1", "bad1"]
    st = {g["id"]: g["status"] for g in got}
    assert st["ok1"] == st["ok2"] == "ok"
    assert st["atom1"] == "ok" and st["dp1"] == "ok"  # atom → sglang model; attention DP modelled
    assert st["bad1"].startswith("unsupported: ") and "tp" in st["bad1"]  # the refusal is the reason
    ok = got[0]
    assert float(ok["predicted_mean_ttft_ms"]) > 0 and float(ok["predicted_mean_tpot_ms"]) > 0
    assert float(ok["predicted_tput_per_gpu"]) > 0
    text = capsys.readouterr().out
    assert "Coverage: 4 of 5" in text and "overall" in text and "MAPE" in text
    assert "/ atom" in text  # atom rows are scored as their own group


def test_cli_sample_and_bad_points_file(tmp_path, capsys):
    pts = tmp_path / "points.csv"
    _write(pts, [row(id=f"p{i}", **{**SMALL, "concurrency": 1 + i % 3}) for i in range(6)])
    assert main(["validate", "--points", str(pts), "--sample", "2", "--quiet"]) == 0
    assert "Coverage: 2 of 2" in capsys.readouterr().out
    assert main(["validate", "--points", str(tmp_path / "nope.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_processes_give_the_same_rows_in_order(tmp_path):
    from servesim.validate.points import load_points
    from servesim.validate.run import validate_points

    pts = tmp_path / "points.csv"
    _write(pts, [row(id=f"p{i}", **{**SMALL, "concurrency": 1 + i, "num_prompts": 8}) for i in range(3)])
    one = [r.as_dict() for r in validate_points(load_points(pts))]
    two = [r.as_dict() for r in validate_points(load_points(pts), processes=2)]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "host_seconds"} for r in rows]  # noqa: E731
    assert strip(one) == strip(two) and [r["id"] for r in two] == ["p0", "p1", "p2"]


def test_tpot_is_benchmark_per_request_mean():
    from servesim.metrics.summary import request_latencies
    from servesim.validate.simulate import score

    res = predict(_config())
    rec = res.recorder
    lat = request_latencies(rec)
    done = ~rec.is_warmup
    e2e, ttft, out = lat["e2e"][done], lat["ttft"][done], rec.column("generated")[done]
    bench = np.mean((e2e - ttft) / (out - 1)) * 1e3
    assert score(rec, 1).tpot_ms == pytest.approx(bench, rel=1e-9)


def test_validate_with_the_measured_tables(tmp_path):
    """--perf-model aic: covered points simulate with the tables (and differ from analytic);
    a layout the tables cannot price is reported as unsupported, not as an error."""
    pytest.importorskip("aiconfigurator_core")
    from servesim.validate.points import load_points
    from servesim.validate.run import validate_points

    pts = tmp_path / "points.csv"
    _write(pts, [row(id="covered", **{**SMALL, "num_prompts": 8}),
                 row(id="dp", system="h200_sxm", gpus=8, attention_tp=1, attention_dp=8, moe_ep=8,
                     concurrency=8, num_prompts=16)])
    aic = validate_points(load_points(pts), perf_model="aic")
    ana = validate_points(load_points(pts))
    assert aic[0].status == "ok" and aic[0].pred_tpot > 0
    assert aic[0].pred_tpot != pytest.approx(ana[0].pred_tpot, rel=1e-6)
    assert aic[1].status.startswith("unsupported: aic:") and "attention_dp" in aic[1].status


def test_cli_calibrate_refuses_flags_its_method_ignores(tmp_path, capsys):
    pts = tmp_path / "points.csv"
    _write(pts, [row(id="p0", **SMALL)])
    out = tmp_path / "cal.yaml"
    # the direct method's tuning flags under the default (sensitivity) method
    assert main(["calibrate", "--points", str(pts), "--out", str(out), "--sample", "6", "--max-evals", "2"]) == 2
    err = capsys.readouterr().err
    assert "--sample, --max-evals only apply to --method direct" in err
    # and the sensitivity method's under direct
    assert main(["calibrate", "--points", str(pts), "--method", "direct", "--sensitivities", "s.csv"]) == 2
    assert "--sensitivities only apply to --method sensitivity" in capsys.readouterr().err
    assert not out.exists()


def test_cli_calibrate_without_scipy_says_which_extra_to_install(tmp_path, capsys, monkeypatch):
    """scipy is the optional ``calibrate`` extra: without it the command stops with the install
    line before any simulation, for both methods."""
    import sys

    pts = tmp_path / "points.csv"
    _write(pts, [row(id="p0", **SMALL)])
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # makes the import fail
    for method in ("sensitivity", "direct"):
        assert main(["calibrate", "--points", str(pts), "--method", method, "--out", str(tmp_path / "c.yaml")]) == 2
        assert "pip install 'servesim[calibrate]'" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists()


def test_cli_calibrate_fills_each_methods_defaults():
    from servesim.cli import build_parser
    from servesim.validate.cli import DIRECT_ONLY, SENSITIVITY_ONLY, _check_method_flags

    args = build_parser().parse_args(["calibrate", "--points", "x.csv", "--method", "direct"])
    _check_method_flags(args)
    assert {k: getattr(args, k) for k in DIRECT_ONLY} == DIRECT_ONLY
    args = build_parser().parse_args(["calibrate", "--points", "x.csv", "--min-model-points", "5"])
    _check_method_flags(args)
    assert args.min_model_points == 5 and args.sensitivities is None
    assert {k: getattr(args, k) for k in DIRECT_ONLY} == dict.fromkeys(DIRECT_ONLY)  # untouched
    assert set(SENSITIVITY_ONLY) == {"sensitivities", "base_calibration", "min_model_points"}


def test_cli_validate_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    pts = tmp_path / "points.csv"
    _write(pts, [row(id="p0", **SMALL), row(id="p1", **{**SMALL, "concurrency": 2})])
    out, png = tmp_path / "res.csv", tmp_path / "fig" / "res.png"
    assert main(["validate", "--points", str(pts), "--out", str(out), "--plot", str(png), "--quiet"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"figure in {png}" in capsys.readouterr().out
    assert main(["validate", "--points", str(pts), "--plot", str(png)]) == 2
    assert "give --out results.csv too" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", ""])
def test_cli_validate_refuses_a_measured_value_that_is_not_positive(tmp_path, capsys, value):
    """Errors are relative to the measured means: a zero once divided by zero mid-report."""
    pts = tmp_path / "points.csv"
    _write(pts, [row(id="p0", **SMALL), {**row(id="p1", **SMALL), "measured_mean_tpot_ms": value}])
    assert main(["validate", "--points", str(pts), "--quiet"]) == 2
    assert f"line 3: column measured_mean_tpot_ms must be a number > 0 (found {value!r})" in capsys.readouterr().err


def test_cli_calibrate_then_validate_with_the_result(tmp_path, capsys):
    """The user's loop: fit a calibration on measured points, then score with it."""
    pts = tmp_path / "points.csv"
    _write(pts, [row(id=f"p{i}", **{**SMALL, "concurrency": c, "measured_mean_ttft_ms": 50 + 10 * c,
                                    "measured_mean_tpot_ms": 8 + 0.2 * c})
                 for i, c in enumerate([1, 2, 4, 8, 16, 4])])
    cal, sens = tmp_path / "cal.yaml", tmp_path / "sens.csv"
    args = ["calibrate", "--points", str(pts), "--out", str(cal), "--sensitivities", str(sens),
            "--min-group-points", "2", "--quiet"]
    assert main(args) == 0 and cal.exists() and sens.exists()
    first = cal.read_text()
    assert main(args) == 0  # the second run reads the sensitivities instead of simulating
    assert cal.read_text() == first
    capsys.readouterr()

    def overall(calibration: str) -> list[str]:
        assert main(["validate", "--points", str(pts), "--calibration", calibration, "--quiet"]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("overall"))
        return line.split()

    fitted, default = overall(str(cal)), overall("default")
    ttft_mape = 2  # column of the overall row: group, n, TTFT MAPE, ...
    assert float(fitted[ttft_mape].rstrip("%")) < float(default[ttft_mape].rstrip("%"))  # fitted on these points


def test_atom_rows_take_the_atom_groups_values_and_sglang_rows_do_not():
    """Calibration groups follow the measured server: an ATOM row resolves ``mi355x/atom``, an
    SGLang row on the same GPU ``mi355x/sglang`` (one shared group mixed two servers)."""
    from servesim.perf.calibration import Calibration
    from servesim.validate.run import validate_points

    # the scheduler CPU time marks the group; it applies to a measured deployment (its model's group)
    cal = Calibration(groups={"mi355x/atom": {"frontend": {"scheduler_pass_s": 2.0}},
                              "mi355x/atom/deepseek-ai/DeepSeek-V3": {"analytic": {}},
                              "mi355x/sglang/deepseek-ai/DeepSeek-V3": {"analytic": {}}})
    small = dict(system="mi355x", concurrency=2, num_prompts=4, isl=128, osl=8)
    atom, sglang = (point_config(row(backend=b, **small)) for b in ("atom", "sglang"))
    r_atom, r_sglang = validate_points([atom, sglang], cal)
    assert r_atom.status == r_sglang.status == "ok"
    assert r_atom.pred_ttft >= 2000.0 > r_sglang.pred_ttft


def test_sensitivity_rounds_measure_atom_rows_around_the_atom_group():
    from servesim.perf.calibration import Calibration
    from servesim.validate.sensitivity import BaseParams

    cal = Calibration(groups={"mi355x/atom": {"analytic": {"mem_eff": 0.33}}})
    atom, sglang = (point_config(row(backend=b, system="mi355x")) for b in ("atom", "sglang"))
    assert BaseParams.for_point(cal, atom).mem_eff == 0.33
    assert BaseParams.for_point(cal, sglang).mem_eff != 0.33


def test_cli_calibrate_completes_a_table_written_before_the_kv_knob(tmp_path, capsys):
    """A sensitivities table without the kv columns is completed in place (a base run and a kv run
    per point) and fits to the same calibration as the table measured whole."""
    pts = tmp_path / "points.csv"
    _write(pts, [row(id=f"p{c}", **{**SMALL, "concurrency": c}) for c in (1, 4, 8)])
    table, first, second = tmp_path / "s.csv", tmp_path / "a.yaml", tmp_path / "b.yaml"
    common = ["calibrate", "--points", str(pts), "--sensitivities", str(table), "--min-group-points", "1"]
    assert main(common + ["--out", str(first), "--quiet"]) == 0
    whole = drop_columns(table, ("ttft_d_kv", "tpot_d_kv"))
    assert main(common + ["--out", str(second)]) == 0
    assert "no slopes for the kv knob" in capsys.readouterr().err
    # the same runs, so the same slopes up to float rounding (a run's sums may be ordered differently)
    completed = list(csv.DictReader(table.open()))
    for want, got in zip(csv.DictReader(whole), completed):
        for k, v in want.items():
            if k in ("ttft_d_kv", "tpot_d_kv"):
                assert float(got[k]) == pytest.approx(float(v), rel=1e-9, abs=1e-9), (want["id"], k)
            else:
                assert got[k] == v, (want["id"], k)
    assert [line.split(":")[0] for line in second.read_text().splitlines()] == \
        [line.split(":")[0] for line in first.read_text().splitlines()]
    import yaml

    a, b = yaml.safe_load(first.read_text()), yaml.safe_load(second.read_text())
    for key, group in a["groups"].items():
        for part in ("analytic", "frontend"):
            for name, value in group[part].items():
                # the optimizer stops within its tolerance: slopes equal to 1e-9 give values equal to ~1e-4 near a bound
                # (and per-layer seconds near their bound of 0 to a tenth of a microsecond)
                assert b["groups"][key][part][name] == pytest.approx(value, rel=1e-3, abs=1e-7), (key, name)


def test_a_layout_that_cannot_hold_the_model_is_unsupported_with_its_reason():
    """A row whose stated GPUs cannot hold the model's weights is unsupported, and says why
    (before, any refusal naming deployment.engine read "engine ... not available in this build")."""
    from servesim.validate.run import check_point

    big = dict(SMALL, model="Qwen/Qwen3-235B-A22B-FP8", precision="fp8", backend="vllm")
    p = check_point(point_config(row(**big)))
    assert p.status.startswith("unsupported: ") and "does not fit" in p.status and "this build" not in p.status
    assert p.config is None
    assert check_point(point_config(row(**SMALL))).status == "ok"


def test_cli_cross_validation_simulated_for_real(tmp_path, capsys):
    """``validate --cv split --simulate``: the held-out rows simulated under the calibration fitted
    on the fit rows, exactly what ``validate`` gives those rows with that calibration."""
    from servesim.validate.crossval import fold_of, read_tables
    from servesim.validate.groupfit import fit_shipped
    from servesim.validate.points import load_points
    from servesim.validate.run import validate_points

    pts = tmp_path / "points.csv"
    _write(pts, [row(id=f"q{i}", **{**SMALL, "concurrency": c, "measured_mean_ttft_ms": 50 + 10 * c,
                                    "measured_mean_tpot_ms": 8 + 0.2 * c})
                 for i, c in enumerate([1, 2, 4, 8, 16, 4, 2, 1])])
    sens = tmp_path / "sens.csv"
    assert main(["calibrate", "--points", str(pts), "--out", str(tmp_path / "cal.yaml"), "--sensitivities",
                 str(sens), "--min-group-points", "2", "--no-intervals", "--quiet"]) == 0
    table = [s for s in read_tables(str(sens), load_points(pts)) if s.status == "ok"]
    held = [s for s in table if fold_of(s, "split") == "holdout"]
    assert 0 < len(held) < len(table)  # the ids give both parts
    out = tmp_path / "cv.csv"
    capsys.readouterr()
    assert main(["validate", "--points", str(pts), "--cv", "split", "--sensitivities", str(sens), "--simulate",
                 "--out", str(out), "--quiet"]) == 0
    assert f"(simulated; {len(held)} held-out points)" in capsys.readouterr().out
    with out.open() as f:
        got = {r["id"]: (float(r["ttft_ms"]), float(r["tpot_ms"])) for r in csv.DictReader(f)}
    cal = fit_shipped([s for s in table if fold_of(s, "split") != "holdout"])
    want = {s.point.id: (r.pred_ttft, r.pred_tpot)
            for s, r in zip(held, validate_points([s.point for s in held], cal))}
    assert got.keys() == want.keys()
    for k in got:
        assert got[k] == pytest.approx(want[k], rel=1e-5)  # the CSV keeps 6 significant digits
    # without --cv it has nothing to change
    assert main(["validate", "--points", str(pts), "--simulate", "--quiet"]) == 2
    assert "--simulate only applies with --cv" in capsys.readouterr().err
