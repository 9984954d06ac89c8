"""SGLang decode stretches through passes that evict cache equal pass-by-pass simulation.

A stretch may run past the point where the free KV runs out while unlocked cache remains:
each pass that then finds fewer free tokens than it needs evicts that many tokens of cache
first (``SGLangEngine._decode_plan``), and the stretch's commit replays those evictions in
order (``_alloc_evicting``).  Here the cache holds hundreds of three-token leaves and the
decode batch needs eight tokens a pass, so each eviction takes three leaves and any other
amount or moment leaves a different tree.  One engine commits stretches as long as
``decode_stretch_limit`` allows, the other the same passes one by one; after every stretch
both must hold the same free tokens, the same cache and the same requests' progress.
"""

from __future__ import annotations

import numpy as np

from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.metrics.recorder import RequestRecorder
from simharness import make_request

STEP = 0.01


def _tree(eng: SGLangEngine) -> list:
    """Every node of the radix tree: (uid, tokens, lock count), in uid order."""
    out, stack = [], [eng.tree.root]
    while stack:
        node = stack.pop()
        out.append((node.uid, node.ntok, node.lock_ref))
        stack.extend(node.children.values())
    return sorted(out)


def _state(eng: SGLangEngine) -> tuple:
    """Free and evictable KV, the tree, and the running batch's progress (read from its
    columns, which hold it between write-backs)."""
    comp, gen, _max_new, _prefix = eng.batch.columns()
    progress = list(zip(eng.batch.indices().tolist(), comp.tolist(), gen.tolist()))
    return eng.free, eng.evictable, _tree(eng), progress


class _CountingEngine(SGLangEngine):
    """Records the passes of each stretch commit that replays evictions."""

    evicting: list[int]

    def _alloc_evicting(self, n: int, passes: int) -> None:
        self.evicting.append(passes)
        super()._alloc_evicting(n, passes)


def _engine(counting: bool = False) -> tuple[SGLangEngine, RequestRecorder]:
    rec = RequestRecorder()
    cls = _CountingEngine if counting else SGLangEngine
    return cls(0, rec, EngineLimits(6000, 4096), SGLangOptions(page_size=1), None), rec


def _submit(pairs, reqs, now: float) -> None:
    for eng, rec in pairs:
        for r in reqs:
            rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
            rec.arrived(r.index, now)
            eng.add_request(r, now)


def test_stretch_that_evicts_equals_pass_by_pass():
    (fast, fast_rec), (step, step_rec) = pairs = [_engine(counting=True), _engine()]
    # 200 prompts of three tokens, one output token each: they end at their prefill and stay
    # cached as 200 leaves of three tokens.
    _submit(pairs, [make_request(i, 0.0, 3, 1, hash_ids=(5000 + i,), block_size=4) for i in range(200)], 0.0)
    now = 0.0
    while fast.has_work():
        for eng in (fast, step):
            eng.complete(eng.schedule(now), now + STEP)
        now += STEP
    assert _state(fast) == _state(step) and fast.evictable == 600
    # Eight long requests (ending a few passes apart): decoding needs up to 8 tokens a pass,
    # and in all some 500 more than the free KV holds.
    _submit(pairs, [make_request(200 + j, now, 100, 610 + 5 * j) for j in range(8)], now)
    evicting = fast.evicting = []
    while fast.has_work():
        plan = fast.schedule(now)
        k = fast.decode_stretch_limit() if plan.is_decode_only else 1
        if k == 1:
            fast.complete(plan, now + STEP)
        else:
            fast.complete_stretch(plan, now + STEP * (1 + np.arange(k)))
        for _ in range(k):
            step.complete(step.schedule(now), now + STEP)
            now += STEP
        assert _state(fast) == _state(step)
    assert len(evicting) > 1  # stretches whose passes evicted
    assert fast.retractions == step.retractions == 0
    for name in ("first_token", "last_token", "finish", "generated"):  # times summed differently: 1e-9
        np.testing.assert_allclose(fast_rec.column(name), step_rec.column(name), rtol=1e-9, err_msg=name)
