"""``/metrics``: the simulated fleet's state in the Prometheus names the real engines use.

A dashboard, autoscaler or router built against a real engine's metrics reads the same names
here.  Sources of the names: vLLM's ``vllm/v1/metrics/loggers.py`` (``vllm:`` prefix, labels
``model_name`` and ``engine``), SGLang's ``python/sglang/srt/metrics/collector.py`` and its
production-metrics page (``sglang:`` prefix, label ``model_name``), TensorRT-LLM's
``trtllm-serve`` metrics collector (request-level histograms; the ``trtllm_`` prefix is the one
NVIDIA Dynamo gives them).  Every family also carries servesim's ``worker`` (SGLang,
TensorRT-LLM) or vLLM's own ``engine`` label with the simulated worker's index, so one
front door exposes every worker as a data-parallel vLLM deployment does.

Latencies are in virtual seconds: the simulated engine's times, which equal wall seconds at
``--speed 1``.  Gauges (running, waiting, KV usage) are read from the engines when scraped.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servesim.serve.fleet import LiveFleet, Stream

#: Histogram buckets (seconds) for first-token, inter-token and end-to-end latency.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2,
               0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0)


@dataclass(frozen=True)
class MetricNames:
    """One engine's names for the families servesim exposes (None: the engine has none)."""

    prefix: str
    worker_label: str
    running: str
    waiting: str
    kv_usage: tuple[str, ...]
    prompt_tokens: str
    generation_tokens: str
    finished: str
    ttft: str
    itl: str
    e2e: str
    cache_queries: str | None = None
    cache_hits: str | None = None
    cache_hit_rate: str | None = None


ENGINE_METRICS = {
    "vllm": MetricNames(
        prefix="vllm:", worker_label="engine", running="num_requests_running", waiting="num_requests_waiting",
        kv_usage=("kv_cache_usage_perc", "gpu_cache_usage_perc"), prompt_tokens="prompt_tokens",
        generation_tokens="generation_tokens", finished="request_success", ttft="time_to_first_token_seconds",
        itl="inter_token_latency_seconds", e2e="e2e_request_latency_seconds",
        cache_queries="prefix_cache_queries", cache_hits="prefix_cache_hits"),
    "sglang": MetricNames(
        prefix="sglang:", worker_label="worker", running="num_running_reqs", waiting="num_queue_reqs",
        kv_usage=("token_usage",), prompt_tokens="prompt_tokens", generation_tokens="generation_tokens",
        finished="num_requests", ttft="time_to_first_token_seconds", itl="inter_token_latency_seconds",
        e2e="e2e_request_latency_seconds", cache_hit_rate="cache_hit_rate"),
    "trtllm": MetricNames(
        prefix="trtllm_", worker_label="worker", running="num_requests_running", waiting="num_requests_waiting",
        kv_usage=("kv_cache_utilization",), prompt_tokens="prompt_tokens", generation_tokens="generation_tokens",
        finished="request_success", ttft="time_to_first_token_seconds", itl="time_per_output_token_seconds",
        e2e="e2e_request_latency_seconds", cache_hit_rate="kv_cache_hit_rate"),
}


class ServeMetrics:
    """The Prometheus families of one served fleet (an observer of :class:`LiveFleet`)."""

    def __init__(self, engine: str, model: str) -> None:
        self.names = names = ENGINE_METRICS[engine]
        self.model = model
        self.registry = CollectorRegistry()
        labels = ("model_name", names.worker_label)
        p, r = names.prefix, self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(p + name, doc, labels, registry=r)

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(p + name, doc, labels + extra, registry=r)

        self.running = gauge(names.running, "Requests in the running batch.")
        self.waiting = gauge(names.waiting, "Requests waiting to be scheduled.")
        self.kv_usage = [gauge(n, "KV cache usage (1 = full).") for n in names.kv_usage]
        self.prompt_tokens = counter(names.prompt_tokens, "Prompt tokens of requests that started generating.")
        self.generation_tokens = counter(names.generation_tokens, "Generated tokens.")
        self.finished = counter(names.finished, "Requests that ended.", ("finished_reason",))
        self.ttft = Histogram(p + names.ttft, "Time to first token (s).", labels, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram(p + names.itl, "Time between output tokens (s).", labels, buckets=ITL_BUCKETS,
                             registry=r)
        self.e2e = Histogram(p + names.e2e, "End-to-end request latency (s).", labels, buckets=E2E_BUCKETS,
                             registry=r)
        self.cache_queries = counter(names.cache_queries, "Prompt tokens looked up in the prefix cache.") \
            if names.cache_queries else None
        self.cache_hits = counter(names.cache_hits, "Prompt tokens found in the prefix cache.") \
            if names.cache_hits else None
        self.cache_hit_rate = gauge(names.cache_hit_rate, "Share of prompt tokens found in the prefix cache.") \
            if names.cache_hit_rate else None
        self._fleet: LiveFleet | None = None
        self._only_worker: int | None = None
        self._last_token_t: dict[int, float] = {}
        self._queried: dict[str, int] = {}
        self._hit: dict[str, int] = {}

    def bind(self, fleet: LiveFleet, only_worker: int | None = None) -> None:
        """The fleet whose gauges :meth:`render` reads (``only_worker``: that worker's alone,
        for a worker's own endpoint)."""
        self._fleet = fleet
        self._only_worker = only_worker

    def _labels(self, stream: Stream) -> tuple[str, str]:
        worker = int(self._fleet.recorder.column("worker")[stream.request.index]) if self._fleet else 0
        return self.model, str(worker)

    # -- FleetObserver ------------------------------------------------------------------
    def started(self, stream: Stream) -> None:
        """Nothing to count until the request is scheduled."""

    def tokens(self, stream: Stream, n: int, t: float) -> None:
        labels = self._labels(stream)
        req = stream.request
        self.generation_tokens.labels(*labels).inc(n)
        last = self._last_token_t.get(req.index)
        if last is None:
            self.ttft.labels(*labels).observe(t - req.arrival)
            self.prompt_tokens.labels(*labels).inc(req.input_length)
            cached = int(self._fleet.recorder.column("cached_tokens")[req.index]) if self._fleet else 0
            self._count_cache(labels, req.input_length, cached)
        else:
            self.itl.labels(*labels).observe(t - last)
        self._last_token_t[req.index] = t

    def _count_cache(self, labels: tuple[str, str], queried: int, hit: int) -> None:
        if self.cache_queries is not None:
            self.cache_queries.labels(*labels).inc(queried)
            self.cache_hits.labels(*labels).inc(hit)
        if self.cache_hit_rate is not None:
            worker = labels[1]
            self._queried[worker] = self._queried.get(worker, 0) + queried
            self._hit[worker] = self._hit.get(worker, 0) + hit
            self.cache_hit_rate.labels(*labels).set(self._hit[worker] / self._queried[worker])

    def ended(self, stream: Stream) -> None:
        labels = self._labels(stream)
        self._last_token_t.pop(stream.request.index, None)
        reason = stream.finish_reason if stream.status == "completed" else "abort"
        self.finished.labels(*labels, reason).inc()
        if stream.status == "completed":
            self.e2e.labels(*labels).observe(stream.end_t - stream.request.arrival)

    # -- exposition ---------------------------------------------------------------------
    def render(self) -> bytes:
        """The text exposition, gauges read from the engines now."""
        if self._fleet is not None:
            for wid, snap in enumerate(self._fleet.snapshots()):
                if self._only_worker is not None and wid != self._only_worker:
                    continue
                labels = (self.model, str(wid))
                self.running.labels(*labels).set(snap.running)
                self.waiting.labels(*labels).set(snap.waiting)
                usage = snap.kv_used_tokens / snap.kv_capacity_tokens if snap.kv_capacity_tokens else 0.0
                for g in self.kv_usage:
                    g.labels(*labels).set(usage)
        return generate_latest(self.registry)
