"""Baseline scaling policies the backtest compares the planner with, each a Controller (one file each).

``registry.py`` lists them by the name ``planner backtest --baselines`` takes; adding one is its file plus
one line there (CONTRIBUTING.md).
"""

from planner.sim.evaluate.baselines.common import budget_clamp, clamp_pool, gpus_per_replica, make_decision
from planner.sim.evaluate.baselines.dynamo_load import DynamoLoadController
from planner.sim.evaluate.baselines.dynamo_throughput import DynamoThroughputController
from planner.sim.evaluate.baselines.reactive import ReactiveController
from planner.sim.evaluate.baselines.static import StaticController

__all__ = ["DynamoLoadController", "DynamoThroughputController", "ReactiveController", "StaticController",
           "budget_clamp", "clamp_pool", "gpus_per_replica", "make_decision"]
