"""KV events over ZMQ, in the wire format of vLLM's (and SGLang's) KV event publisher.

A KV-aware router (NVIDIA Dynamo's KV router, the llm-d scheduler, SGLang's router) subscribes
to each engine's ZMQ PUB socket and keeps an index of which worker holds which blocks.  The
format, as vLLM's ``vllm/distributed/kv_events.py`` defines it: a three-part message
``[topic, sequence number (8 bytes, big-endian), payload]``; the payload is a msgpack array
``[timestamp, [event, ...], data_parallel_rank]`` and each event a tagged array,
``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]``,
``["BlockRemoved", block_hashes, medium]`` or ``["AllBlocksCleared"]``.  SGLang publishes the
same structures.

What servesim fills in: ``block_hashes`` are the simulated cache's block hashes (vLLM and
TensorRT-LLM models: the chained hashes of full blocks; SGLang's radix cache: the prompt's
block ids), ``block_size`` the tokens each hash covers (the engine's own KV block size —
vLLM's ``block_size``, TensorRT-LLM's ``tokens_per_block`` — for the block-pool engines; for
the radix cache, whose events name prompt blocks, the prompt block size), ``token_ids`` is empty (the simulation has no tokens), ``parent_block_hash`` is
None, ``medium`` is ``"GPU"`` or ``"CPU"`` (the host tier).  Worker ``i`` publishes on the
endpoint's port + ``i``, with ``data_parallel_rank`` = ``i``; the timestamp is virtual seconds.
Needs ``pyzmq`` (the ``serve`` extra).
"""

from __future__ import annotations

from typing import Any

import msgspec

from servesim.kvcache.events import KVEvent


class _Event(msgspec.Struct, array_like=True, tag=True):
    """A tagged KV event (its class name is the tag, as in the engines' format)."""


class BlockStored(_Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(_Event):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(_Event):
    pass


class EventBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None


_MEDIUM = {"gpu": "GPU", "host": "CPU"}


def to_wire(ev: KVEvent, block_size: int) -> BlockStored | BlockRemoved:
    """One simulated KV event as the engines' event structure."""
    medium = _MEDIUM.get(ev.tier, ev.tier.upper())
    if ev.kind == "stored":
        return BlockStored(list(ev.block_hashes), None, [], block_size, None, medium)
    return BlockRemoved(list(ev.block_hashes), medium)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``tcp://host:port`` → (``tcp://host``, port)."""
    head, sep, port = endpoint.rpartition(":")
    if not endpoint.startswith("tcp://") or not sep or not port.isdigit():
        raise ValueError(f"--kv-events: expected tcp://HOST:PORT, got {endpoint!r}")
    return head, int(port)


class ZmqKVPublisher:
    """One PUB socket per worker; events are collected as the simulation emits them and sent
    in one batch per worker at each :meth:`flush` (after every advance of the clock)."""

    def __init__(self, endpoint: str, workers: int, block_size: int, topic: str = "") -> None:
        import zmq  # the serve extra

        host, port = parse_endpoint(endpoint)
        #: Tokens per hash in each worker's events: ``block_size`` (the prompt block size) until
        #: :meth:`use_engine_block_sizes` reads the engines' own.
        self.block_sizes = [block_size] * workers
        self.topic = topic.encode()
        self._ctx = zmq.Context.instance()
        self.sockets = []
        for i in range(workers):
            sock = self._ctx.socket(zmq.PUB)
            sock.bind(f"{host}:{port + i}")
            self.sockets.append(sock)
        self.endpoints = [f"{host}:{port + i}" for i in range(workers)]
        self._pending: list[list[Any]] = [[] for _ in range(workers)]
        self._last_t = [0.0] * workers
        self._seq = [0] * workers
        self._encoder = msgspec.msgpack.Encoder()

    def use_engine_block_sizes(self, engines) -> None:
        """Each worker's events carry its engine's KV block size (a block-pool engine's blocks
        are what its hashes cover; a radix cache, which has none, keeps the prompt block size)."""
        for w, engine in enumerate(engines):
            bs = engine.kv_block_size()
            if bs is not None:
                self.block_sizes[w] = int(bs)

    def __call__(self, ev: KVEvent) -> None:
        """The simulation's KV event sink."""
        w = ev.worker or 0
        self._pending[w].append(to_wire(ev, self.block_sizes[w]))
        self._last_t[w] = ev.time or 0.0

    def flush(self) -> None:
        for w, events in enumerate(self._pending):
            if not events:
                continue
            payload = self._encoder.encode(EventBatch(self._last_t[w], events, w))
            self.sockets[w].send_multipart([self.topic, self._seq[w].to_bytes(8, "big"), payload])
            self._seq[w] += 1
            self._pending[w] = []

    def close(self) -> None:
        for sock in self.sockets:
            sock.close(linger=0)
