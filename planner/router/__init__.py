"""I/O: the OpenAI-compatible router in front of the process actuator's replicas (`planner route`).

It routes to exactly the replicas listed in the actuator's targets.json (backends.py), least outstanding
requests first, with the two-step prefill-then-decode route for disaggregated pools (proxy.py).
"""
