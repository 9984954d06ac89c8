"""Start and stop ``servesim serve``: the fleet's clock loop and its HTTP servers on one event loop.

:class:`Server` is what the CLI runs (``run_forever``); :class:`BackgroundServer` runs the same
server on a thread of its own, for tests, benchmarks and notebooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from servesim.config import Config
from servesim.serve.app import Endpoint, build_app
from servesim.serve.fleet import LiveFleet, Stream
from servesim.serve.metrics import ServeMetrics
from servesim.serve.openai_api import OutputLengths
from servesim.serve.prompts import PromptEncoder


@dataclass
class ServeOptions:
    """``servesim serve``'s options (docs/serve.md)."""

    host: str = "127.0.0.1"
    port: int = 8000
    #: Virtual seconds per wall second.
    speed: float = 1.0
    #: One server per worker on port, port + 1, ... (no router) instead of one front door.
    per_worker: bool = False
    #: tcp://HOST:PORT to publish KV events on (worker i on PORT + i), or None.
    kv_events: str | None = None
    #: A local Hugging Face tokenizer folder; None counts characters.
    tokenizer: str | None = None
    #: Tokens per hashed prompt block (the prefix cache's matching granularity).
    block_size: int = 16
    #: Mean natural output length without ignore_eos (0: always max_tokens).
    eos_mean_tokens: float = 256.0
    #: The model name clients use; the config's model id is always accepted too.
    served_model_name: str | None = None


class _ByWorker:
    """Routes fleet events to the metrics of the worker that served the request (per-worker mode)."""

    def __init__(self, fleet_metrics: list[ServeMetrics]) -> None:
        self.per_worker = fleet_metrics
        self.fleet: LiveFleet | None = None

    def _of(self, stream: Stream) -> ServeMetrics:
        return self.per_worker[int(self.fleet.recorder.column("worker")[stream.request.index])]

    def started(self, stream: Stream) -> None:
        pass

    def tokens(self, stream: Stream, n: int, t: float) -> None:
        self._of(stream).tokens(stream, n, t)

    def ended(self, stream: Stream) -> None:
        self._of(stream).ended(stream)


class Server:
    """A simulated fleet behind OpenAI-compatible HTTP servers."""

    def __init__(self, cfg: Config, opts: ServeOptions) -> None:
        self.cfg, self.opts = cfg, opts
        dep = cfg.deployment
        engine = dep.engine.name
        model = opts.served_model_name or dep.model
        self.fleet = LiveFleet(cfg, speed=opts.speed, kv_sink=self._kv_sink())
        if opts.per_worker:
            per = [ServeMetrics(engine, model) for _ in self.fleet.workers]
            router = _ByWorker(per)
            router.fleet = self.fleet
            for i, m in enumerate(per):
                m.bind(self.fleet, only_worker=i)
            self.fleet.observer = router
            metrics_of = per
        else:
            fleet_metrics = ServeMetrics(engine, model)
            fleet_metrics.bind(self.fleet)
            self.fleet.observer = fleet_metrics
            metrics_of = [fleet_metrics]
        if self.publisher is not None:
            self.publisher.use_engine_block_sizes([w.engine for w in self.fleet.workers])
            self.fleet.after_advance.append(self.publisher.flush)
        encoder = PromptEncoder(opts.block_size, opts.tokenizer)
        lengths = OutputLengths(opts.eos_mean_tokens, cfg.seed)
        models = {model, dep.model}
        context = int(self.fleet.deployment.engine_settings.get("context_length") or 4096)
        workers = range(len(self.fleet.workers)) if opts.per_worker else [None]
        self.endpoints = [Endpoint(self.fleet, encoder, lengths, metrics_of[i or 0], models, context, worker=i)
                          for i in workers]
        self._runners: list[web.AppRunner] = []
        self._clock_task: asyncio.Task | None = None
        self.urls: list[str] = []

    def _kv_sink(self):
        self.publisher = None
        if self.opts.kv_events is None:
            return None
        from servesim.serve.kv_publisher import ZmqKVPublisher

        self.publisher = ZmqKVPublisher(self.opts.kv_events, self.cfg.deployment.workers, self.opts.block_size)
        return self.publisher

    async def start(self) -> list[str]:
        """Bind the servers and start the clock; returns their base URLs."""
        self._clock_task = asyncio.get_running_loop().create_task(self.fleet.run())
        for i, ep in enumerate(self.endpoints):
            # handler_cancellation: a client that disconnects cancels its handler at once (not at
            # its next write), which aborts its request in the simulated engine (app._generate).
            runner = web.AppRunner(build_app(ep), access_log=None, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, self.opts.host, self.opts.port + i if self.opts.port else 0)
            await site.start()
            port = runner.addresses[0][1]
            self._runners.append(runner)
            self.urls.append(f"http://{self.opts.host}:{port}")
        return self.urls

    async def stop(self) -> None:
        self.fleet.close()
        for runner in self._runners:
            await runner.cleanup()
        if self._clock_task is not None:
            await self._clock_task
        if self.publisher is not None:
            self.publisher.close()

    def run_forever(self, announce=lambda line: print(line, flush=True)) -> None:
        """Serve until interrupted (Ctrl-C)."""
        async def main() -> None:
            urls = await self.start()
            for url in urls:
                announce(f"servesim serve: {url}/v1 ({self.cfg.deployment.model} on "
                         f"{self.cfg.deployment.workers} simulated {self.cfg.deployment.engine.name} worker(s), "
                         f"speed {self.opts.speed:g}x)")
            if self.publisher is not None:
                announce("KV events: " + ", ".join(self.publisher.endpoints))
            try:
                await asyncio.Event().wait()
            finally:
                await self.stop()

        try:
            asyncio.run(main())
        except KeyboardInterrupt:
            pass


class BackgroundServer:
    """A :class:`Server` on its own thread and event loop (``with BackgroundServer(cfg, opts) as urls:``)."""

    def __init__(self, cfg: Config, opts: ServeOptions) -> None:
        self.cfg, self.opts = cfg, opts
        self.server: Server | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="servesim-serve", daemon=True)

    def __enter__(self) -> list[str]:
        self._thread.start()
        self.server = self.call(lambda: Server(self.cfg, self.opts))
        return asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=60)

    def call(self, fn):
        """Run ``fn()`` on the server's loop (the fleet is not thread-safe) and return its result."""
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=60)

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@contextlib.contextmanager
def serve_process(config_path: str | Path, *args: str, timeout_s: float = 120.0):
    """``servesim serve CONFIG --port 0 ARGS`` in a process of its own (its own interpreter, as a
    user runs it, so a client in this process does not share its interpreter lock); yields the
    server's base URL and stops the server with Ctrl-C (SIGINT) on exit."""
    proc = subprocess.Popen([sys.executable, "-m", "servesim.cli", "serve", str(config_path), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://[^ ]+)/v1", line)
        if match is None:
            proc.kill()
            raise RuntimeError(f"servesim serve did not start: {line!r} {proc.stderr.read()}")
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
