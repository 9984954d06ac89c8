"""The overload flag on a clearly overloaded and a clearly healthy run, and its rule on
hand-made queues."""

from __future__ import annotations

import numpy as np

from servesim.api import predict
from servesim.plan.overload import overload_check, pending_counts


def _run(base, rate: float, workers: int, n: int = 600):
    base["workload"].update(num_requests=n, arrival={"process": "poisson", "rate": rate})
    base["deployment"]["workers"] = workers
    return predict(base).summary["overload"]


def test_clearly_overloaded_run_is_flagged(base):
    # 1 x H100 serves ~25 of these requests/s; 120/s arrive for 5 s
    o = _run(base, rate=120.0, workers=1)
    assert o["applicable"] and o["overloaded"]
    assert o["pending_at_last_arrival"] > o["pending_at_mid"] + 50


def test_healthy_run_is_not_flagged(base):
    o = _run(base, rate=10.0, workers=2)
    assert o["applicable"] and not o["overloaded"]
    assert abs(o["pending_growth"]) < o["growth_threshold"]


def test_summary_and_console_say_it_plainly(base):
    from io import StringIO

    from rich.console import Console

    from servesim.report.console import render_summary

    base["workload"].update(num_requests=600, arrival={"process": "poisson", "rate": 120.0})
    pred = predict(base)
    buf = StringIO()
    render_summary(pred.summary, pred.header(), Console(file=buf, width=200), pred.host)
    assert "OVERLOADED" in buf.getvalue()


def test_pending_counts_and_rule_on_a_made_queue():
    arrival = np.array([0.0, 1.0, 2.0, 3.0])
    served = np.array([0.5, np.inf, 2.5, np.inf])
    assert list(pending_counts(arrival, served, np.array([0.0, 0.6, 1.0, 3.0]))) == [1, 0, 1, 2]

    class Rec:  # arrivals every 0.1 s for 100 s; served at a rate of 5/s (half of them): a growing queue
        def __init__(self, served):
            self.arrival = np.arange(1000) * 0.1
            self._served = served
            self.is_warmup = np.zeros(1000, bool)

        def column(self, name):
            return {"arrival": self.arrival, "first_token": self._served, "finish": self._served + 1}[name]

    slow = Rec(np.arange(1000) * 0.2 + 0.05)
    assert overload_check(slow)["overloaded"]
    fast = Rec(np.arange(1000) * 0.1 + 0.05)  # each served 50 ms after it came: a steady queue
    assert not overload_check(fast)["overloaded"]
    assert overload_check(slow, closed_loop=True) == {"overloaded": False, "applicable": False,
                                                      "note": "closed loop: the client keeps at most "
                                                              "`concurrency` requests out"}


def test_sessions_short_of_capacity_are_saturated_not_overloaded():
    """Multi-turn sessions on too few workers: the queue is bounded (a turn waits for the answer
    before it) but is most of the TTFT.  The default example on 1 worker: saturated, said first;
    on its own 2 workers: neither."""
    from io import StringIO

    from rich.console import Console

    from servesim.config import load_config
    from servesim.report.console import render_summary

    def run(workers: int):
        cfg = load_config(None, overrides=[f"deployment.workers={workers}", "output.dir=null"])
        return predict(cfg)

    short = run(1)
    o = short.summary["overload"]
    assert o["saturated"] and not o["overloaded"]
    assert o["median_queue_wait_s"] > 1.0 and o["queue_share_of_ttft"] > 0.5
    assert short.summary["alerts"][0].startswith("SATURATED") and "deployment.workers" in short.summary["alerts"][0]
    buf = StringIO()
    render_summary(short.summary, short.header(), Console(file=buf, width=200), short.host)
    text = buf.getvalue()
    assert "SATURATED" in text and text.index("SATURATED") < text.index("Requests (input)")
    from servesim.report.html import warning_blocks

    assert "<b>Saturated:</b> the median request waited" in warning_blocks(short.summary)
    healthy = run(2).summary
    assert not healthy["overload"]["saturated"] and healthy["alerts"] == []
    assert healthy["overload"]["median_queue_wait_s"] < 0.1


def test_alerts_carry_the_rejections_and_their_fix(base):
    """A rejection's warning, with the key that fixes it, is in the summary (so in --format json)."""
    base["deployment"]["engine"] = {"name": "trtllm", "enable_chunked_context": False, "max_num_tokens": 1024}
    summary = predict(base).summary
    assert summary["requests"]["rejected"] > 0
    assert any("rejected" in a and "enable_chunked_context" in a for a in summary["alerts"])
