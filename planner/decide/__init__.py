"""PURE decision core: capacity (queueing, Little), calibration, behaviour, budget, the decider."""

from planner.decide.decider import decide
from planner.decide.state import PlannerState

__all__ = ["PlannerState", "decide"]
