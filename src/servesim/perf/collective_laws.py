"""How much each GPU sends, and over how many hops, in an NCCL ring collective.

The op model (:mod:`servesim.perf.kernels`) prices a collective from these two counts and the
GPU's measured per-hop and per-byte laws; ``benchmarks/fit_collectives.py`` fits those laws on
the same counts.
"""

from __future__ import annotations

import numpy as np


def collective_volume(op: str, nbytes, ranks):
    """Bytes each GPU sends in NCCL collective ``op`` of ``nbytes`` over ``ranks`` GPUs:
    ``(r − 1)/r`` of the message for an all-gather, reduce-scatter or all-to-all (``nbytes``
    the full result, resp. what each GPU holds), twice that for an all-reduce (ring:
    reduce-scatter then all-gather)."""
    r = np.asarray(ranks, float)
    share = (r - 1.0) / r * np.asarray(nbytes, float)
    return 2.0 * share if op == "all_reduce" else share


def collective_steps(op: str, ranks):
    """Pipeline hops of NCCL collective ``op`` over ``ranks`` GPUs: ``r − 1`` per ring phase,
    two phases for an all-reduce (an all-to-all's ``r − 1`` peer sends overlap: their
    measured hop cost is near zero)."""
    r = np.asarray(ranks, float)
    return 2.0 * (r - 1.0) if op == "all_reduce" else r - 1.0
