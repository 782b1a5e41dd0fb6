"""One registry each for forecasters and engine dialects: names, errors and CLI help come from it."""

from __future__ import annotations

import pytest

from planner.cli import run
from planner.errors import UserError
from planner.forecast import make_forecaster, names
from planner.forecast.registry import DEFAULT_EVAL_MODELS, REGISTRY
from planner.sources.dialects import DIALECTS, dialect_names, get_dialect


def test_forecaster_names_are_the_registry_sorted() -> None:
    assert names() == tuple(sorted(REGISTRY)) and "last-value" in names()
    assert set(DEFAULT_EVAL_MODELS) <= set(names())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_name_builds_its_forecaster(name: str) -> None:
    assert callable(make_forecaster(name).fit)


def test_unknown_forecaster_is_a_value_error_naming_every_allowed_model() -> None:
    with pytest.raises(ValueError, match="prophet") as info:
        make_forecaster("prophet")
    assert all(name in str(info.value) for name in names())


def test_cli_models_allowed_list_comes_from_the_registry(capsys) -> None:
    assert run(["bench", "forecast", "--models", "prophet"]) == 2
    assert f"allowed: {', '.join(names())}" in capsys.readouterr().err


def test_dialect_names_are_the_registry() -> None:
    assert dialect_names() == tuple(DIALECTS) == ("vllm", "sglang", "dynamo", "trtllm")


def test_unknown_dialect_names_the_key_and_the_allowed_ones() -> None:
    with pytest.raises(UserError) as info:
        get_dialect("tgi")
    assert info.value.key == "dialect"
    assert str(info.value) == f"dialect 'tgi': unknown; allowed: {', '.join(dialect_names())}"


def test_observe_help_lists_the_dialects(capsys) -> None:
    assert run(["observe", "--help"]) == 0
    assert " | ".join(dialect_names()) in capsys.readouterr().out
