"""I/O side of profiling: sweeps and backends (analytical, endpoint, torch, kubernetes)."""
