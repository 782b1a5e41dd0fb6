"""The error-key mechanism (planner/errors.py): library errors name keys, the CLI shows the command's flags."""

from __future__ import annotations

import pickle

import pytest

from planner.cli import app, flag_table, run
from planner.errors import UserError

FLAGS = {"warmup_s": "--warmup-s", "start_s": "--start-s", "duration_s": "--duration-s", "device": "--device"}

CASES = [
    ("leading-key", UserError("warmup_s: -1 must be >= 0", key="warmup_s"), "--warmup-s: -1 must be >= 0"),
    ("key-prepended", UserError("-1 must be >= 0", key="warmup_s"), "--warmup-s: -1 must be >= 0"),
    ("only-the-leading-key", UserError("device 'tpu': no device here", key="device"),
     "--device 'tpu': no device here"),
    ("mentions", UserError("x.csv: too long; cut it with start_s/duration_s", mentions=("start_s", "duration_s")),
     "x.csv: too long; cut it with --start-s/--duration-s"),
    ("key-and-mention", UserError("device cuda: none; use device cpu", key="device", mentions=("device",)),
     "--device cuda: none; use --device cpu"),
    ("no-flag-for-key", UserError("format: 'x' unknown", key="format"), "format: 'x' unknown"),
    ("whole-words-only", UserError("start_s_max: 3; restart_s 4", mentions=("start_s",)),
     "start_s_max: 3; restart_s 4"),
    ("no-key", UserError("plain message"), "plain message"),
]


@pytest.mark.parametrize(("error", "shown"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_for_flags_spells_keys_as_flags(error: UserError, shown: str) -> None:
    assert str(error.for_flags(FLAGS)) == shown


def test_library_text_names_the_key() -> None:
    assert str(UserError("-1 must be >= 0", key="warmup_s")) == "warmup_s: -1 must be >= 0"


def test_keys_survive_pickling() -> None:  # errors come back from worker processes
    again = pickle.loads(pickle.dumps(UserError("warmup_s: bad", key="warmup_s", mentions=("start_s",))))
    assert (str(again), again.key, again.mentions) == ("warmup_s: bad", "warmup_s", ("start_s",))


def test_flag_table_maps_parameter_names_and_flag_spellings() -> None:
    import typer

    command = typer.main.get_command(app).commands["forecast"].commands["eval"]  # type: ignore[attr-defined]
    table = flag_table(command)
    assert table["fmt"] == table["format"] == "--format"  # parameter `fmt`, flag --format
    assert table["step_s"] == "--step-s" and table["series"] == "--series"


@pytest.mark.parametrize(("argv", "shown"), [
    (["profile", "--model", "qwen3-32b", "--gpu", "tpu-v9"], "--gpu 'tpu-v9': unknown GPU"),
    (["forecast", "eval", "--series", "/nonexistent.csv", "--format", "csv"], "--series: /nonexistent.csv not found"),
    (["forecast", "eval", "--series", "x.csv", "--format", "parquet"], "--format: 'parquet'; allowed"),
], ids=["catalog", "series-path", "series-format"])
def test_cli_shows_the_flag_of_the_command_run(argv: list[str], shown: str, capsys, tmp_path) -> None:
    assert run([*argv, "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert shown in err and "Traceback" not in err
