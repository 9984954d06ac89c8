"""TensorRT-LLM as a model: its options (``options.py``), how a deployment's memory and
options become engines (``planner.py``) and the in-flight batching scheduler over the shared
block-KV manager (``scheduler.py``)."""
