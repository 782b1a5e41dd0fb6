"""What-if sizing (planner/decide/whatif.py): a steady load, no history, behaviour rules switched off."""

from __future__ import annotations

from planner.decide.whatif import flat_forecast, plan, what_if_policy
from planner.types import QUANTILES, Reason
from tests.support.decide_support import PROFILE, policy


def test_flat_forecast_is_certain() -> None:
    f = flat_forecast(12.5, 150.0)
    assert (f.mean, f.horizon_s, f.model) == (12.5, 150.0, "given")
    assert all(f.at(q) == 12.5 for q in QUANTILES)


def test_behaviour_rules_do_not_shape_a_what_if() -> None:
    slow = policy(behavior={"scale_up": {"policies": [{"type": "pods", "value": 1, "period_s": 600}]},
                            "tolerance": 0.5})
    free = policy(behavior={"tolerance": 0.0, "scale_up": {"policies": []},
                            "scale_down": {"stabilization_window_s": 0, "policies": []}})
    assert what_if_policy(slow).behavior == what_if_policy(policy()).behavior
    d = plan(slow, PROFILE, 200.0, 1155, 211)
    assert d == plan(free, PROFILE, 200.0, 1155, 211)
    assert Reason.SCALE_UP_LIMIT not in d.reasons  # from no replicas to 200 req/s in one step


def test_more_load_never_means_fewer_gpus() -> None:
    gpus = [plan(policy(), PROFILE, rate, 1155, 211).gpus for rate in (0.0, 1.0, 10.0, 50.0, 200.0)]
    assert gpus == sorted(gpus) and gpus[-1] > gpus[0]


def test_the_given_load_is_what_is_sized_for() -> None:
    d = plan(policy(), PROFILE, 42.0, 1155, 211)
    assert d.detail["rate_rps"] == 42.0 and d.at_s == 0.0
