"""The simulator, in three parts that import downwards only (tests/test_layout.py):

- ``traces/``: request traces: file loaders, synthetic generators, per-step series. Imports neither of the others.
- ``cluster/``: the discrete-event cluster (fleet, prefill, KV link, decode, aggregated) and the MetricSource
  and Actuator a controller sees it through. Imports traces/.
- ``evaluate/``: replaying controllers through the cluster and judging them: scoring, baselines, the lower
  bound and offline schedule, frontiers, reports. Imports both.
"""
