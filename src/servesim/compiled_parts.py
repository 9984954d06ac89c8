"""The one list of servesim's compiled parts: ``setup.py`` builds these, ``compiled.py`` loads them.

Plain data with no imports, so that ``setup.py`` can read it without importing servesim.

* :data:`CORES`: Cython modules (``.pyx``) that replace a Python reference kept beside them
  (docs/architecture.md says which); each module that uses one binds it with
  ``servesim.compiled.compiled_module`` when it is imported (``compiled.py`` says the rule).
* :data:`FROM_SOURCE`: modules compiled from their own ``.py``, typed by the ``.pxd`` beside
  it; the extension shadows the source on import.
"""

CORES = ("engines._decode_core", "engines._sglang_batch_core", "engines.vllm._decode_replay",
         "kvcache._hash_core", "kvcache._lazy_heap", "kvcache._lru_core", "kvcache._segments_core", "metrics._emit_core",
         "metrics._prefix_seen_core", "perf._stretch_core", "sim._event_core", "workload._sharing_core",
         "workload._units_core", "workload.agentic._trace_ids_core")

FROM_SOURCE = ("cluster.worker", "engines.base", "engines.blockkv.manager", "engines.sglang.fast_path",
               "engines.sglang.overlap", "engines.sglang.scheduler",
               "engines.trtllm.scheduler", "engines.vllm.fast_path", "engines.vllm.scheduler",
               "kvcache.block_owner", "kvcache.hashing", "kvcache.lru_pool", "kvcache.radix_cache",
               "kvcache.token_pool", "metrics.recorder", "metrics.timeseries", "perf.analytic", "perf.frontend", "perf.plan",
               "sim.simulation", "workload.request", "workload.synthetic")
