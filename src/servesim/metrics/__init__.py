"""Per-request columns, latency statistics and per-worker time series."""
