"""Mean TTFT of the SGLang-modelled rows of calibration.csv: predicted against measured.

``servesim validate`` scores every engine together; this script takes only the rows that the
SGLang engine model simulates (backend ``sglang``, and ``atom``, which runs on it), samples a
few deterministically, and prints for each point the measured and predicted mean TTFT (and
TPOT), then MAPE and signed bias.  Three views of the same points:

* ``--view calibrated``: the shipped calibration, analytic and frontend values (what
  ``servesim validate`` shows);
* ``--view engine``: the calibration's analytic (step-time) values, frontend off: the TTFT the
  engine and the GPU alone produce, without the fitted first-token overhead, tokenizer and
  streaming costs that may absorb what the engine model lacks;
* ``--view physics``: no calibration at all (analytic defaults, frontend off).

Run it before and after an engine change on the same sample::

    PYTHONPATH=src python benchmarks/sglang_ttft.py --sample 24 --view engine --out /tmp/after.csv

(``--points`` defaults to ../shared/data/measured/calibration.csv relative to the repository.)
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

from servesim.errors import ServesimError
from servesim.perf.calibration import load_calibration
from servesim.validate.points import point_config, read_points, sample_rows
from servesim.validate.run import check_point
from servesim.validate.simulate import simulate_point

SGLANG_BACKENDS = ("sglang", "atom")
#: Where the measured data sits beside a checkout (a worktree one level deeper finds it too).
DEFAULT_POINTS = next((p for p in (Path(__file__).resolve().parents[i] / "shared" / "data" / "measured" /
                                   "calibration.csv" for i in (2, 3)) if p.exists()),
                      Path(__file__).resolve().parents[2] / "shared" / "data" / "measured" / "calibration.csv")


def sglang_rows(path: Path, sample: int | None, seed: int) -> list[dict[str, str]]:
    rows = [r for r in read_points(path) if (r.get("backend") or "").strip().lower() in SGLANG_BACKENDS]
    return sample_rows(rows, sample, seed)


def predict(row: dict[str, str], view: str, calibration: str | None) -> tuple[float, float, str]:
    """(predicted mean TTFT ms, mean TPOT ms, status) of one row in one view."""
    p = check_point(point_config(row))
    if p.status != "ok":
        return math.nan, math.nan, p.status
    if view == "physics":
        analytic, frontend = {}, None
    else:
        analytic, frontend = p.calibration_values(load_calibration(calibration))
        if view == "engine":
            frontend = None
    try:
        res = simulate_point(p.config, analytic, frontend)
    except ServesimError as e:
        return math.nan, math.nan, f"error: {e}"
    return res.ttft_ms, res.tpot_ms, "ok" if res.completed else "error: nothing completed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=Path, default=DEFAULT_POINTS)
    ap.add_argument("--sample", type=int, default=24, help="rows to simulate (seeded pick; default 24)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--view", choices=("calibrated", "engine", "physics"), default="engine")
    ap.add_argument("--calibration", help="calibration file or bundled name (default: the bundled default)")
    ap.add_argument("--out", help="write one row per point to this CSV")
    args = ap.parse_args(argv)
    rows = sglang_rows(args.points, args.sample, args.seed)
    out = []
    t0 = time.perf_counter()
    for r in rows:
        ttft, tpot, status = predict(r, args.view, args.calibration)
        m_ttft, m_tpot = float(r["measured_mean_ttft_ms"]), float(r["measured_mean_tpot_ms"])
        out.append({"id": r["id"], "backend": r["backend"], "system": r["system"], "model": r["model"],
                    "concurrency": r["concurrency"], "isl": r["isl"], "osl": r["osl"],
                    "measured_ttft_ms": m_ttft, "predicted_ttft_ms": ttft,
                    "measured_tpot_ms": m_tpot, "predicted_tpot_ms": tpot, "status": status})
        print(f"{r['id'][:60]:60s} c={r['concurrency']:>4s} ttft {m_ttft:9.1f} -> {ttft:9.1f}  "
              f"tpot {m_tpot:7.2f} -> {tpot:7.2f}  {status if status != 'ok' else ''}", flush=True)
    ok = [o for o in out if o["status"] == "ok"]
    for metric in ("ttft", "tpot"):
        errs = [(o[f"predicted_{metric}_ms"] - o[f"measured_{metric}_ms"]) / o[f"measured_{metric}_ms"] for o in ok]
        if errs:
            mape = 100 * sum(abs(e) for e in errs) / len(errs)
            bias = 100 * sum(errs) / len(errs)
            print(f"{metric.upper()}: MAPE {mape:.1f}%  bias {bias:+.1f}%  ({len(errs)} of {len(out)} points)")
    print(f"view {args.view}; {time.perf_counter() - t0:.0f} s")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
