"""``servesim serve``: an OpenAI-compatible endpoint whose timing comes from the engine models.

:mod:`~servesim.serve.fleet` runs the simulated fleet on the wall clock,
:mod:`~servesim.serve.prompts` turns a request's prompt into a token count and block ids,
:mod:`~servesim.serve.app` speaks HTTP (aiohttp, the ``serve`` extra),
:mod:`~servesim.serve.metrics` exposes Prometheus metrics under the engine's own names and
:mod:`~servesim.serve.kv_publisher` publishes KV events over ZMQ as vLLM and SGLang do.
"""
