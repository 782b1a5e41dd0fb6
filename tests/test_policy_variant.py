"""A policy with fields set from the command line (planner/policy_variant.py)."""

from __future__ import annotations

import pytest

from planner.errors import UserError
from planner.policy_variant import PolicySource, parse_assignments, set_dotted, variant_label
from tests.support.decide_support import REPO

EXAMPLE = REPO / "policies" / "example.yaml"


@pytest.mark.parametrize("text, expected", [
    ("behavior.tolerance=0.1", ((("behavior", "tolerance"), 0.1),)),
    ("forecast.model=ewma", ((("forecast", "model"), "ewma"),)),
    ("behavior.steady=null", ((("behavior", "steady"), None),)),
    ("behavior.steady=", ((("behavior", "steady"), None),)),
    (" sla.percentile = 99 ; sla.window_s=86400 ", ((("sla", "percentile"), 99), (("sla", "window_s"), 86400))),
    ("behavior.scale_down.policies=[{type: pods, value: 2, period_s: 60}]",
     ((("behavior", "scale_down", "policies"), [{"type": "pods", "value": 2, "period_s": 60}]),)),
    ("sla.budget_control=false", ((("sla", "budget_control"), False),)),
], ids=["number", "string", "null", "empty-is-null", "two-and-spaces", "flow-list", "boolean"])
def test_assignments_are_dotted_keys_and_yaml_values(text, expected) -> None:
    assert parse_assignments(text) == expected


def test_set_dotted_creates_the_mappings_the_file_left_out() -> None:
    data = {"sla": {"ttft_ms": 1000}}
    set_dotted(data, ("sla", "itl_ms"), 40)
    set_dotted(data, ("budget", "max_gpus"), 8)
    assert data == {"sla": {"ttft_ms": 1000, "itl_ms": 40}, "budget": {"max_gpus": 8}}
    with pytest.raises(UserError, match="sla.ttft_ms is 1000 in the policy, not a mapping"):
        set_dotted(data, ("sla", "ttft_ms", "x"), 1)


def test_a_variant_is_the_reference_with_only_those_fields_changed() -> None:
    shipped = PolicySource(None).load(EXAMPLE, "example")
    source = PolicySource(None, parse_assignments("behavior.tolerance=0.1;forecast.model=ewma"))
    varied = source.load(EXAMPLE, variant_label("example", "behavior.tolerance=0.1;forecast.model=ewma"))
    assert varied.behavior.tolerance == 0.1 and varied.forecast.model == "ewma"
    assert shipped.behavior.tolerance == 0.0 and shipped.forecast.model == "auto"
    # Everything else as shipped, the profile resolved against the reference file's folder as for the file itself.
    rest = {"behavior": {"tolerance"}, "forecast": {"model"}}
    assert varied.model_dump(exclude=rest) == shipped.model_dump(exclude=rest)
    assert varied.profile == shipped.profile


def test_the_label_names_the_reference_and_what_was_set() -> None:
    assert variant_label("policies/example.yaml", "a.b=1; c=2 ;") == "policies/example.yaml [a.b=1; c=2]"
