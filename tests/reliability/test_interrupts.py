"""Ctrl-C (SIGINT) and SIGKILL at any moment of `servesim predict` leave the output folder
holding either the previous run's files, untouched, or a complete new set — never a mix, and
never a prediction.json that does not vouch for its files."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = {
    "seed": 3,
    "workload": {"kind": "synthetic", "num_requests": 400, "arrival": {"process": "poisson", "rate": 40.0},
                 "input": {"dist": "uniform", "low": 100, "high": 2000}, "output": {"dist": "uniform", "low": 10, "high": 300}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2},
    "output": {"kv_events": True},
}
PREVIOUS = '{"complete": true, "previous": true}\n'

#: A child that runs `servesim predict` and signals itself at one point of the write:
#: after a named file is written into the temporary folder, or inside the commit.
CHILD = r"""
import os, signal, sys, threading
# Python's own Ctrl-C handler, whatever this process inherited: a parent that ignores SIGINT
# (an earlier test in the same pytest run, a nohup) passes SIG_IGN on to its children, and a
# Python started with SIGINT ignored keeps ignoring it
signal.signal(signal.SIGINT, signal.default_int_handler)
import servesim.report.files as files
sig, point = int(sys.argv[1]), sys.argv[2]
def hit():
    # to the main thread itself: a signal sent to the process may be taken by another thread
    # (pyarrow's pool), and under load reach the main thread only after the commit
    signal.pthread_kill(threading.main_thread().ident, sig)
def wrap(fn, name):
    def inner(*a, **k):
        out = fn(*a, **k)
        if point == name:
            hit()
        return out
    return inner
files.write_requests = wrap(files.write_requests, "requests")
files.write_parquet = wrap(files.write_parquet, "timeseries")
files.write_json = wrap(files.write_json, "prediction")
real_rename = os.rename
def rename(a, b):
    real_rename(a, b)
    if point == "rename":
        hit()
os.rename = rename
real_rmtree = files.shutil.rmtree
def rmtree(p, *a, **k):
    if point == "rmtree" and ".servesim-old-" in str(p):
        hit()
    return real_rmtree(p, *a, **k)
files.shutil.rmtree = rmtree
from servesim.cli import main
sys.exit(main(["predict", sys.argv[3], "--out", sys.argv[4], "--quiet"]))
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "out"
    out.mkdir()
    (out / "prediction.json").write_text(PREVIOUS)
    (out / "requests.parquet").write_bytes(b"previous")
    return cfg, out


def _check(out: Path) -> str:
    """'previous' or 'new'; fails on anything else (a mix, a partial set)."""
    names = sorted(p.name for p in out.iterdir())
    text = (out / "prediction.json").read_text() if (out / "prediction.json").exists() else None
    if text == PREVIOUS:
        assert names == ["prediction.json", "requests.parquet"]
        assert (out / "requests.parquet").read_bytes() == b"previous"
        return "previous"
    assert text is not None, f"no prediction.json, only {names}"
    doc = json.loads(text)
    assert doc["complete"] is True
    assert names == ["kv_events.jsonl", "prediction.json", "requests.parquet", "timeseries.parquet"]
    assert pq.read_metadata(out / "requests.parquet").num_rows == doc["summary"]["requests"]["total"] == 400
    pq.read_metadata(out / "timeseries.parquet")
    return "new"


def _leftovers(tmp_path: Path) -> list[str]:
    return [p.name for p in tmp_path.iterdir() if ".servesim-" in p.name]


@pytest.mark.parametrize("sig,point", [
    (signal.SIGINT, "requests"), (signal.SIGINT, "prediction"), (signal.SIGINT, "rename"),
    (signal.SIGKILL, "timeseries"), (signal.SIGKILL, "prediction"), (signal.SIGKILL, "rmtree"),
], ids=lambda v: v.name if isinstance(v, signal.Signals) else v)
def test_signal_during_the_write(tmp_path, sig, point):
    cfg, out = _setup(tmp_path)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(int(sig)), point, str(cfg), str(out)],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    state = _check(out)
    # before the folder is exchanged: the previous files; from the exchange on: the new set
    assert state == ("new" if point in ("rename", "rmtree") else "previous"), \
        (proc.returncode, signal.getsignal(signal.SIGINT), proc.stderr[-500:])
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted" in proc.stderr
        assert _leftovers(tmp_path) == []  # Ctrl-C cleans up on the way out
        return
    assert proc.returncode == -signal.SIGKILL
    # a killed run's leftovers are removed by the next run into the same folder
    done = subprocess.run([sys.executable, "-m", "servesim.cli", "predict", str(cfg), "--out", str(out), "--quiet"],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _check(out) == "new" and _leftovers(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_signal_at_random_moments(tmp_path, sig):
    """Signals at random instants of whole runs (start-up, simulation, write)."""
    cfg, out = _setup(tmp_path)
    rng = random.Random(40 + int(sig))
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-m", "servesim.cli", "predict", str(cfg), "--out", str(out),
                                 "--quiet"], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.2, 3.0))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        # (a SIGINT inside the interpreter's own start-up prints Python's traceback: not checked here)
        assert proc.returncode in (0, 130, -signal.SIGKILL, -signal.SIGINT), err
        _check(out)
        if sig == signal.SIGINT:
            assert _leftovers(tmp_path) == []


def _signal_self_inside_native_code(args) -> int:
    """What pydantic-core does with a Ctrl-C while it builds a schema: the KeyboardInterrupt
    comes out as another exception type."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)  # the handler runs here
    except KeyboardInterrupt as exc:
        raise RuntimeError(f"Error building validator: {exc!r}") from None
    raise AssertionError("SIGINT did not arrive")


def test_ctrl_c_turned_into_another_error_still_exits_130(monkeypatch, capsys):
    import servesim.cli as cli

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(cli, "cmd_gpus", _signal_self_inside_native_code)
        assert cli.main(["gpus"]) == 130
        assert "interrupted" in capsys.readouterr().err
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handed back

        # without a Ctrl-C the same error is a bug of ours and keeps its traceback
        def broken(args) -> int:
            raise RuntimeError("not an interrupt")

        monkeypatch.setattr(cli, "cmd_gpus", broken)
        with pytest.raises(RuntimeError, match="not an interrupt"):
            cli.main(["gpus"])
    finally:
        signal.signal(signal.SIGINT, previous)
