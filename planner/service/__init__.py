"""I/O: the planner's HTTP surface (/metrics, /healthz, /readyz) and helpers to run servers."""
