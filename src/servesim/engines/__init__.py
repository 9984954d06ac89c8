"""Engine models: the SGLang, vLLM and TensorRT-LLM schedulers and KV caches (docs/engines.md)."""
