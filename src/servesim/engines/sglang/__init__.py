"""SGLang as a model: its options (``options.py``), the scheduler over the radix cache
(``scheduler.py``), its running batch (``batch.py``) and its scheduler's receive interval
(``recv_interval.py``)."""
