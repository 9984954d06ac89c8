"""Fit each GPU's NCCL collective timing law from aiconfigurator-core's measured ``nccl_perf`` tables.

Run: PYTHONPATH=src python benchmarks/fit_collectives.py [--gpus h100_sxm,b200_sxm]

NCCL moves a collective's data in chunks through a pipeline of ``steps`` hops (a ring's
``r − 1`` per phase, two phases for an all-reduce).  Each hop costs a fixed latency; the
data moves at the links' bus bandwidth.  A pipeline whose chunk size is chosen well takes

    t = (√(V / (B · bus_eff)) + √(startup + steps · step))²

where ``V`` is the bytes each GPU sends (``(r − 1)/r · S`` for an all-gather, reduce-scatter
or all-to-all of ``S`` bytes, twice that for an all-reduce), ``B`` the GPU's scale-up link
bandwidth (``GPUSpec.scale_up``), ``startup`` the launch and synchronisation cost and ``step``
the latency of one hop: small messages pay ``startup + steps·step``, large ones ``V / (B ·
bus_eff)``, and the middle sizes the pipeline's fill, which a sum of the two misses (it was
half the measured time there).  This script fits ``startup_us``, ``step_us`` and ``bus_eff``
per GPU and collective (robust least squares on log(predicted / measured)) and prints them as
the ``nccl:`` block of the GPU's file (``hardware/gpus/<gpu>.yaml``), with each fit's median
error.  These are per-kernel measurements (physics), not end-to-end results.

PCIe parts (L40S) are fitted and printed but do not follow this law (median error ~45%: the
tables' PCIe collectives cross the host); their files keep no ``nccl:`` block, and no
``custom_all_reduce:`` line either (42% median error).

The serving engines' own custom all-reduce (the pass's tensor-parallel all-reduce under CUDA
graphs: SGLang's, vLLM's and TensorRT-LLM's ``custom_allreduce_perf`` tables, each precision
from each engine's newest version measuring it, pooled per GPU) is fitted to the same law with
one hop per doubling of ranks (``steps = log2(r)``: the one-/two-shot kernels signal every peer
at once) and printed as the
``custom_all_reduce:`` line of the GPU's file (``OpModel.all_reduce``).  Only the ranks of one
host are fitted (4 GPUs on a GB200/GB300 compute tray, 8 on an HGX board): beyond them the
SGLang and vLLM kernels fall back to other paths (the GB300 tables' 8- and 16-GPU rows take
27-50 us at the smallest sizes, against 4 us within a tray).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import NCCL_BYTES, SYSTEMS, table_frames  # noqa: E402

from servesim.hardware import load_gpu  # noqa: E402
from servesim.hardware.gpu import NCCL_OPS  # noqa: E402
from servesim.perf.collective_laws import collective_steps, collective_volume  # noqa: E402

LOSS_SCALE = 0.1


#: GPUs of one host (one compute tray of a GB200/GB300 NVL72 rack holds 4; an HGX board 8):
#: the custom all-reduce rows fitted.
HOST_GPUS = {"gb200": 4, "gb300": 4}


def _tables(system: str, table: str):
    """``table`` of each framework of ``system``, each precision from the newest version that
    measured it (bench_kernels.table_frames; one DataFrame with a ``backend`` column)."""
    import pandas as pd
    from aiconfigurator_core.sdk import perf_database

    root = Path(perf_database.get_systems_paths()[0]) / "data"
    out = [df.assign(backend=backend) for backend, _, df in table_frames(root, system, (table,))]
    return pd.concat(out, ignore_index=True) if out else None


def nccl_table(system: str):
    """The first framework's ``nccl_perf`` table of ``system`` (a DataFrame), or None."""
    df = _tables(system, "nccl_perf")
    return None if df is None else df[df.backend == df.backend.iloc[0]]


def custom_allreduce_table(system: str):
    """Every framework's custom all-reduce table of ``system``, CUDA-graph rows only, or None."""
    df = _tables(system, "custom_allreduce_perf")
    if df is None:
        return None
    return df[~df.kernel_source.astype(str).str.contains("eager", case=False)]


def fit_law(vol, steps, t, link_bps: float) -> tuple[dict, np.ndarray]:
    """(law, relative errors) of ``(√(V / (B · bus_eff)) + √(startup + steps · step))²`` fitted
    to measured seconds ``t`` (robust least squares on the log of predicted / measured)."""

    def pred(x):
        startup, step, eff = np.exp(x)
        return (np.sqrt(vol / (link_bps * eff)) + np.sqrt(startup + steps * step)) ** 2

    def err(x):
        return np.log(pred(x) / t)

    fit = least_squares(err, np.log([5e-6, 1e-6, 0.8]), loss="soft_l1", f_scale=LOSS_SCALE,
                        bounds=(np.log([1e-8, 1e-9, 0.05]), np.log([1e-3, 1e-4, 1.0])))
    startup, step, eff = np.exp(fit.x)
    law = {"startup_us": round(startup * 1e6, 2), "step_us": round(step * 1e6, 3), "bus_eff": round(eff, 3)}
    return law, np.exp(err(fit.x)) - 1


def fit_op(g, link_bps: float, domain: int) -> tuple[dict, float, int]:
    """(law, median |error|, rows) for one NCCL collective's rows within the scale-up domain."""
    g = g[g.num_gpus <= domain]
    r = g.num_gpus.values.astype(float)
    op = g.op_name.iloc[0]
    nbytes = g.message_size.values * g.nccl_dtype.map(NCCL_BYTES).fillna(2.0).values
    law, e = fit_law(collective_volume(op, nbytes, r), collective_steps(op, r), g.latency.values * 1e-3, link_bps)
    return law, float(np.median(np.abs(e))), len(g)


def fit_custom(g, link_bps: float, ranks: int) -> tuple[dict, np.ndarray, object]:
    """(law, relative errors, rows fitted) of the custom all-reduce rows of at most ``ranks`` GPUs
    (bf16 messages of ``message_size`` elements)."""
    g = g[g.num_gpus <= ranks]
    r = g.num_gpus.values.astype(float)
    nbytes = g.message_size.values * 2.0
    law, e = fit_law(collective_volume("all_reduce", nbytes, r), np.log2(r), g.latency.values * 1e-3, link_bps)
    return law, e, g


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", help="aiconfigurator systems (default: every one servesim knows)")
    args = ap.parse_args(argv)
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("aiconfigurator-core is not installed (pip install 'servesim[aic]')", file=sys.stderr)
        return 2
    systems = args.gpus.split(",") if args.gpus else list(SYSTEMS)
    for system in systems:
        gpu = load_gpu(SYSTEMS[system])
        link = gpu.scale_up.bandwidth_gbs * 1e9
        print(f"# {system} ({SYSTEMS[system]}, {gpu.scale_up.kind} {gpu.scale_up.bandwidth_gbs:g} GB/s)")
        df = nccl_table(system)
        if df is None:
            print(f"# {system}: no nccl_perf table")
        else:
            print("nccl:")
            for op in NCCL_OPS:
                g = df[df.op_name == op]
                if not len(g):
                    continue
                law, med, n = fit_op(g, link, gpu.scale_up.domain_size)
                print(f"  {op}: {{startup_us: {law['startup_us']}, step_us: {law['step_us']}, "
                      f"bus_eff: {law['bus_eff']}}}  # {n} rows, median |error| {med:.1%}")
        custom = custom_allreduce_table(system)
        if custom is None:
            print(f"# {system}: no custom_allreduce_perf table")
            continue
        ranks = min(gpu.scale_up.domain_size, HOST_GPUS.get(system, 8))
        law, e, g = fit_custom(custom, link, ranks)
        mid = (g.message_size.values * 2.0 >= 2e6) & (g.message_size.values * 2.0 <= 70e6)
        print(f"custom_all_reduce: {{startup_us: {law['startup_us']}, step_us: {law['step_us']}, "
              f"bus_eff: {law['bus_eff']}}}  # {len(g)} rows ({', '.join(sorted(set(g.backend)))}), "
              f"median |error| {np.median(np.abs(e)):.1%}, bias {np.median(e):+.1%}, "
              f"2-70 MB bias {np.median(e[mid]):+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
