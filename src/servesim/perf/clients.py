"""Client profiles: what a benchmark client and the API server add to the engine's times.

A measured TTFT is the engine's first token plus what stands between it and the client: the
HTTP request's parse and hand-off, the API server's serial tokenizer, detokenization and the
SSE stream, and the client's own handling of every running stream.  Those costs belong to the
client and the server front end, not to the GPU or the engine's kernels (DESIGN.md, "What a
measured number contains"), so they are a *profile chosen in the config* (``client:``), never
part of a GPU/engine calibration group: switching GPU or engine keeps them, and a calibration
group's values never set them.

Each profile sets the five client-side fields of
:class:`~servesim.perf.frontend.FrontendParams` (:data:`CLIENT_FIELDS`); the engine-side
fields (the scheduler's CPU time per pass and per request, async scheduling) stay with the
engine's calibration group.  Profiles come from two places:

- **fitted** (``inferencex``, ``nvidia``): the clients behind calibration.csv.  Their values are
  fitted on that client's rows only (``servesim calibrate`` writes them in the calibration
  file's ``clients:`` section); the built-in values below are the shipped fit's, used when the
  chosen calibration file has no such section (``perf.calibration: null``, an older file).
- **from the source** (``none``, ``api-server``, ``vllm-bench``, ``aiperf``, ``inference-perf``):
  not fitted on end-to-end data; what each stage costs is derived from what the server and
  client do per request and per token (docs/validation.md, "Client profiles", gives the
  derivation and what each client measures).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servesim.errors import ConfigError

#: FrontendParams fields a client profile sets (the rest belong to the engine's group).
CLIENT_FIELDS = ("request_overhead_s", "tokenize_base_s", "tokenize_per_token_s", "first_token_overhead_s",
                 "stream_per_running_s")
#: FrontendParams fields of the engine (its scheduler's CPU time): calibration groups set them.
ENGINE_FIELDS = ("scheduler_pass_s", "scheduler_per_request_s", "async_scheduling")

#: The profile a config without ``client:`` uses: the engine alone.
DEFAULT_CLIENT = "none"


@dataclass(frozen=True)
class ClientProfile:
    name: str
    #: what the client measures and how it drives the server (one line for reports)
    description: str
    #: "fitted" (on calibration.csv rows of this client only) or "source" (derived, not fitted)
    origin: str
    values: dict[str, float] = field(default_factory=dict)

    def frontend(self) -> dict[str, float]:
        """The five client-side FrontendParams values (every one set: unset ones are 0)."""
        return {k: float(self.values.get(k, 0.0)) for k in CLIENT_FIELDS}


#: The OpenAI-compatible API server in front of vLLM, SGLang or TensorRT-LLM (trtllm-serve), with
#: a client that costs nothing: an HTTP parse and hand-off to the engine process (~1 ms: a FastAPI
#: request with JSON validation and an IPC send), the prompt tokenized in the server process with a
#: Rust fast tokenizer (~0.5 ms call overhead, ~1.5 µs per token: ~0.7 M tokens/s on one core,
#: the rate the InferenceX fit also settles at), and on every streamed token an incremental
#: detokenization, an SSE frame and a loopback TCP hop (~2 ms to the client's first byte); the
#: server's output loop handles a pass's requests one after another (~50 µs each: detokenize,
#: build the chunk, write it), so a request that comes out of a pass of N decoding requests
#: waits ~N × 50 µs.
_API_SERVER = {"request_overhead_s": 1e-3, "tokenize_base_s": 0.5e-3, "tokenize_per_token_s": 1.5e-6,
               "first_token_overhead_s": 2e-3, "stream_per_running_s": 50e-6}

BUILTIN_PROFILES: dict[str, ClientProfile] = {p.name: p for p in (
    ClientProfile("none", "the engine alone: no API server, no client (token times as the engine emits them)",
                  "source", {}),
    ClientProfile("api-server", "the OpenAI-compatible API server with a client that adds nothing of its own",
                  "source", _API_SERVER),
    ClientProfile("vllm-bench", "vllm bench serve: one asyncio process streams every request (aiohttp); TTFT = "
                                "send to first content chunk, TPOT = (e2e - TTFT)/(output - 1)", "source",
                  _API_SERVER | {"stream_per_running_s": 80e-6}),
    ClientProfile("aiperf", "NVIDIA AIPerf: worker processes share the streams, so the client's parse cost per "
                            "running request is small; TTFT = send to first content token", "source",
                  _API_SERVER | {"stream_per_running_s": 55e-6}),
    ClientProfile("inference-perf", "Kubernetes inference-perf: asyncio load generator (aiohttp), streaming; "
                                    "TTFT = send to first content chunk", "source",
                  _API_SERVER | {"stream_per_running_s": 80e-6}),
    # The clients behind calibration.csv: fitted on their own rows (these are the shipped fit's
    # values; a calibration file's ``clients:`` section overrides them).
    ClientProfile("inferencex", "InferenceX's benchmark_serving.py (vLLM's benchmark client, closed loop at a "
                                "max concurrency, random prompts, EOS ignored)", "fitted",
                  {"request_overhead_s": 2e-3, "tokenize_base_s": 1e-3, "tokenize_per_token_s": 1.5e-6,
                   "first_token_overhead_s": 0.0170806, "stream_per_running_s": 0.000291948}),
    ClientProfile("nvidia", "NVIDIA's measurements in AIConfigurator's silicon sample (client settings "
                            "undocumented; AIConfigurator's benchmark template drives AIPerf)", "fitted",
                  {"request_overhead_s": 2e-3, "tokenize_base_s": 1e-3, "tokenize_per_token_s": 1.5e-6,
                   "first_token_overhead_s": 0.0509908, "stream_per_running_s": 0.000320776}),
)}

#: calibration.csv ``source`` → the client profile its rows were measured with.
SOURCE_CLIENT = {"aic_silicon_sample/inferencex": "inferencex", "inferencex_fixture": "inferencex",
                 "aic_silicon_sample/nvidia": "nvidia"}


def client_for_source(source: str) -> str:
    """The profile of a calibration.csv row's ``source`` (unknown sources: ``api-server``)."""
    return SOURCE_CLIENT.get((source or "").strip(), "api-server")


def profile_names(fitted: dict[str, Any] | None = None) -> list[str]:
    return sorted(set(BUILTIN_PROFILES) | set(fitted or {}))


def resolve_client(name: str | None, fitted: dict[str, dict[str, Any]] | None = None) -> ClientProfile:
    """The profile called ``name``: a calibration file's fitted one (``fitted``: its ``clients:``
    section) over the built-in one of that name.  Unknown names are a ConfigError listing them."""
    name = DEFAULT_CLIENT if name is None else str(name)
    base = BUILTIN_PROFILES.get(name)
    own = (fitted or {}).get(name)
    if base is None and own is None:
        raise ConfigError(f"client: unknown profile {name!r}; expected one of {', '.join(profile_names(fitted))}")
    if own is None:
        return base
    values = dict(base.values if base else {}) | dict(own.get("frontend", {}))
    bad = set(values) - set(CLIENT_FIELDS)
    if bad:
        raise ConfigError(f"calibration clients.{name}: {sorted(bad)} are not client fields; expected "
                          f"{', '.join(CLIENT_FIELDS)}")
    desc = own.get("description") or (base.description if base else name)
    return ClientProfile(name, desc, "fitted", values)
