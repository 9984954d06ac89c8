"""The block-KV manager shared by the vLLM and TensorRT-LLM engines (``manager.py``) and the
per-pass block arithmetic of their decode stretches (``arithmetic.py``)."""
