"""I/O: read what the serving system is doing from Prometheus (metric dialects are data in dialects.py)."""
