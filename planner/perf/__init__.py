"""PURE performance math: model shapes, roofline, curves, capacity, KV transfer. No I/O, no clock."""
