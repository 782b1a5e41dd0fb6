"""`planner up`: the whole closed loop on loopback - emulated (or real vLLM) engines under the process actuator,
the router, a Prometheus scraping them, the controller, a trace-replaying load - with a live view."""
