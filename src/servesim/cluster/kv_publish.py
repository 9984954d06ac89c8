"""Wiring a worker's KV cache to whoever consumes its events.

Consumers: the KV index of a KV-aware router (``kv_index.py``) and the run's event log
(kv_events.jsonl).  Ordinary and disaggregated deployments (``deployment.py``,
``disagg.py``) build their workers with these two functions.
"""

from __future__ import annotations

from typing import Callable

from servesim.cluster.kv_index import KVIndex
from servesim.engines.base import Engine
from servesim.kvcache.events import KVEvent


def kv_index_for(router: str, router_options: dict, delay_s: float) -> KVIndex | None:
    """The KV index the deployment's router reads, or None when no router reads one."""
    needs_index = router == "kv_aware" or router_options.get("fallback") == "kv_aware"
    return KVIndex(delay_s) if needs_index else None


def wire_kv_events(engine: Engine, worker_id: int, kv_index: KVIndex | None,
                   kv_event_log: Callable[[KVEvent], None] | None) -> None:
    """Publish the engine's KV events to ``kv_index`` and ``kv_event_log`` (either may be None)."""
    sinks = []
    if kv_index is not None:
        size = engine.kv_block_size()
        if size is not None:  # a radix cache publishes token ranges: the index keeps its size
            kv_index.hash_block_size = size
        sinks.append(kv_index.sink(worker_id))
    if kv_event_log is not None:
        sinks.append(kv_event_log)
    if sinks:
        publish_kv_events(engine, worker_id, sinks)


def publish_kv_events(engine: Engine, worker_id: int, sinks: list[Callable[[KVEvent], None]]) -> None:
    """Stamp each event of the engine's cache with the worker and virtual time, and fan it out.

    An attention-DP engine publishes every rank's cache under the worker's id (routers see
    the worker, not its ranks).
    """
    for rank in engine.engine_ranks():
        _publish_cache_events(rank.kv_cache(), worker_id, sinks)


def _publish_cache_events(cache, worker_id: int, sinks: list[Callable[[KVEvent], None]]) -> None:
    """``cache``: SGLang's radix tree, or the block pool of vLLM and TensorRT-LLM."""

    def publish(ev: KVEvent) -> None:
        stamped = ev.stamped(cache.now, worker_id)
        for sink in sinks:
            sink(stamped)

    cache.on_event = publish
