"""vLLM v1 as a model: its options and defaults (``options.py``), how a deployment's memory
and options become engines (``planner.py``) and the scheduler over the shared block-KV
manager (``scheduler.py``, with its decode fast path)."""
