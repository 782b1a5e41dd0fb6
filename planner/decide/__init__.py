"""PURE decision core: demand, calibration, capacity (queueing, Little), behaviour, budget, the decider."""

from planner.decide.decider import decide
from planner.decide.spec import DeciderSpec
from planner.decide.state import PlannerState

__all__ = ["DeciderSpec", "PlannerState", "decide"]
