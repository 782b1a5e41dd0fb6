"""Benchmark harnesses behind `planner bench ...`: each module's ``run`` prints measured figures.

The commands in planner/commands/bench.py only parse their flags and call these.
"""
