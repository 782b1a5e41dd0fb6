"""A user's mistake at the command line is one line and an exit code, never a traceback (README: exit codes).

The same cases run through the three ways in: ``planner.cli.run`` (what ``main`` calls), typer's CliRunner on
the app, and a real ``python -m planner.cli`` subprocess.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from planner.cli import OUTPUT_PARAMS, app, click_kind, run

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "policies" / "example.yaml"
PROFILE = REPO / "profiles" / "h200" / "qwen3-32b.json"


@pytest.fixture(scope="module")
def live_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example policy with the pool selectors `planner run` needs (the example sets none)."""
    text = EXAMPLE.read_text().replace("selectors: {}", "selectors: {prefill: '{pool=\"prefill\"}', "
                                       "decode: '{pool=\"decode\"}'}").replace(
        "profiles/h200/qwen3-32b.json", str(PROFILE))
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(text)
    return path

USAGE_ERRORS = [
    ("unknown-command", ["nosuch"], "nosuch"),
    ("unknown-flag", ["plan", "--nosuch", "1"], "--nosuch"),
    ("bad-value", ["plan", "--policy", str(EXAMPLE), "--rate-rps", "abc", "--isl", "1", "--osl", "1"], "--rate-rps"),
    ("missing-option", ["plan", "--rate-rps", "1"], "--policy"),
    ("unknown-subcommand", ["bench", "nosuch"], "nosuch"),
    ("bad-int", ["bench", "decide", "--ticks", "many"], "--ticks"),
]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _via_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = run(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _via_runner(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, argv)
    return result.exit_code, result.stdout, result.stderr


def _via_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "planner.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=120, cwd=REPO)
    return proc.returncode, proc.stdout, proc.stderr


WAYS = [pytest.param(_via_run, id="run"), pytest.param(_via_runner, id="cli-runner"),
        pytest.param(_via_process, id="subprocess")]


@pytest.mark.parametrize("call", WAYS)
@pytest.mark.parametrize(("argv", "names"), [c[1:] for c in USAGE_ERRORS], ids=[c[0] for c in USAGE_ERRORS])
def test_usage_error_is_one_line_and_exit_2(call, argv: list[str], names: str, capsys) -> None:
    rc, out, err = call(argv, capsys)
    assert rc == 2, (out, err)
    assert len(_lines(err)) == 1 and names in err, err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("call", WAYS)
@pytest.mark.parametrize("argv", [[], ["bench"], ["forecast"]], ids=["planner", "bench", "forecast"])
def test_no_arguments_shows_the_help(call, argv: list[str], capsys) -> None:
    rc, out, err = call(argv, capsys)
    assert rc in (0, 2)
    assert "Usage" in out + err and "Traceback" not in out + err


def _leaves(command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if hasattr(command, "commands"):
        yield path
        for name, sub in command.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path


COMMANDS = list(_leaves(typer.main.get_command(app)))


def test_the_walk_finds_every_command() -> None:  # the walk below must not silently cover nothing
    assert {("plan",), ("run",), ("bench", "decide"), ("forecast", "eval"), ()} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "planner" for p in COMMANDS])
def test_every_command_rejects_a_bad_flag_with_exit_2(path: tuple[str, ...], capsys) -> None:
    rc, out, err = _via_run([*path, "--no-such-flag"], capsys)
    assert rc == 2 and len(_lines(err)) == 1 and "--no-such-flag" in err, err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) or "planner" for p in COMMANDS])
def test_help_shows_no_bool_metavar(path: tuple[str, ...], capsys) -> None:
    """A flag takes no value: its help row names no type (typer showed `<bool>` for --quick, --dry-run, --help)."""
    rc, out, err = _via_run([*path, "--help"], capsys)
    assert rc == 0 and "Usage" in out, out + err
    assert "<bool>" not in out and "--help" in out, out


def _click_classes() -> list:
    params = []
    for home in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(home)
        except ImportError:
            continue
        for name, kind in [("UsageError", "ClickException"), ("BadParameter", "ClickException"),
                           ("NoArgsIsHelpError", "NoArgsIsHelpError"), ("Exit", "Exit"), ("Abort", "Abort"),
                           ("FileError", "ClickException")]:
            if hasattr(mod, name):
                params.append(pytest.param(getattr(mod, name), kind, id=f"{home.split('.')[0]}-{name}"))
    return params


@pytest.mark.parametrize(("cls", "kind"), _click_classes())
def test_click_exceptions_are_recognised_from_either_click(cls, kind: str) -> None:
    exc = cls.__new__(cls)  # the kind depends on the class only
    assert click_kind(exc) == kind


@pytest.mark.parametrize("exc", [ValueError("x"), OSError(2, "nope"), KeyError("k")],
                         ids=["value-error", "os-error", "key-error"])
def test_other_exceptions_are_not_click(exc: BaseException) -> None:
    assert click_kind(exc) is None


# Minimal arguments that get each command with an output past click's parsing to its callback.
OUT_ARGS = {
    ("init",): ["--model", "qwen3-32b", "--ttft-ms", "1000", "--itl-ms", "40"],
    ("profile",): ["--model", "qwen3-32b", "--gpu", "h200"],
    ("backtest",): ["--trace", "t.csv", "--profile", str(PROFILE), "--policy", str(EXAMPLE)],
    ("demo",): [],
    ("up",): [],
    ("forecast", "eval"): ["--series", "s.csv"],
    ("bench", "forecast"): ["--held-out"],
    ("bench", "suite"): ["--quick"],
    ("bench", "fleet"): ["--quick"],
    ("bench", "seeds"): ["--seeds", "1"],
    ("bench", "hours"): ["--quick"],
    ("bench", "fidelity"): ["--modes", "aggregated"],
    ("bench", "prefill"): [],
}


def _commands_with_outputs() -> list[tuple[tuple[str, ...], str]]:
    root = typer.main.get_command(app)
    found = []
    for path in COMMANDS:
        command = root
        for name in path:
            command = command.commands[name]  # type: ignore[attr-defined]
        found += [(path, p.opts[0]) for p in command.params if p.name in OUTPUT_PARAMS]
    return found


OUTPUTS = _commands_with_outputs()


def test_every_command_with_an_output_is_in_the_table() -> None:
    assert {path for path, _ in OUTPUTS} == set(OUT_ARGS) and len(OUTPUTS) >= 6


@pytest.mark.parametrize(("path", "flag"), OUTPUTS, ids=[f"{' '.join(p)} {f}" for p, f in OUTPUTS])
def test_unwritable_output_is_exit_2_naming_the_path(path, flag: str, tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "sub" / "out.json"  # under a regular file: unwritable even for root
    extra = [] if flag == "--out" else ["--out", str(tmp_path / "ok.json")]
    rc, out, err = _via_run([*path, *OUT_ARGS[path], *extra, flag, str(target)], capsys)
    assert rc == 2 and f"{flag} {target}" in err and "not a directory" in err, err
    assert len(_lines(err)) == 1 and "Traceback" not in out + err


def test_output_that_fails_while_written_is_exit_2(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "taken"
    folder.mkdir()  # `profile --out` writes a file: a folder of that name passes the check, fails the write
    rc, out, err = _via_run(["profile", "--model", "qwen3-32b", "--gpu", "h200", "--out", str(folder)], capsys)
    assert rc == 2 and f"--out {folder}" in err and "Traceback" not in out + err


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


PORT_COMMANDS = [
    ("run", ["run", "--policy", "LIVE", "--dry-run", "--grpc-port", "0", "--port"], "--port"),
    ("run-grpc", ["run", "--policy", "LIVE", "--dry-run", "--port", "0", "--grpc-port"], "--grpc-port"),
    ("serve", ["serve", "--port"], "--port"),
    ("route", ["route", "--policy", str(REPO / "policies" / "workstation.yaml"), "--port"], "--port"),
    ("emulate", ["emulate", "--profile", str(PROFILE), "--port"], "--port"),
]


@pytest.mark.parametrize(("argv", "flag"), [c[1:] for c in PORT_COMMANDS], ids=[c[0] for c in PORT_COMMANDS])
def test_port_in_use_is_exit_2_naming_the_port(argv: list[str], flag: str, busy_port: int, live_policy: Path,
                                               capsys) -> None:
    argv = [str(live_policy) if a == "LIVE" else a for a in argv]
    rc, out, err = _via_run([*argv, str(busy_port), "--host", "127.0.0.1"], capsys)
    assert rc == 2 and f"{flag} {busy_port}: already in use" in err, err
    assert "Traceback" not in out + err


def test_run_rejects_one_port_for_both_servers(capsys) -> None:
    rc, _, err = _via_run(["run", "--policy", str(EXAMPLE), "--port", "18080", "--grpc-port", "18080"], capsys)
    assert rc == 2 and "--grpc-port 18080: the same port as --port" in err


@pytest.mark.parametrize("url", ["prometheus:9090", "", "ftp://prometheus:9090"], ids=["no-scheme", "empty", "ftp"])
def test_run_metrics_url_gets_the_check_metrics_url_gets(url: str, tmp_path: Path, capsys) -> None:
    """--metrics-url overrides metrics.url, so it is held to the same rule: an http(s) URL, said in one line."""
    rc, out, err = _via_run(["run", "--policy", str(EXAMPLE), "--dry-run", "--once", "--metrics-url", url], capsys)
    assert rc == 2 and out == "", (out, err)
    assert err.strip() == f"error: --metrics-url {url!r}: expected an http:// or https:// URL (a path after the " \
                          "host is kept)", err
    bad_policy = tmp_path / "p.yaml"
    bad_policy.write_text(EXAMPLE.read_text().replace("url: http://prometheus:9090", f"url: {url!r}"))
    rc, _, err = _via_run(["run", "--policy", str(bad_policy), "--dry-run", "--once"], capsys)
    assert rc == 2 and "metrics.url" in err and "expected an http:// or https:// URL" in err, err


def test_run_once_without_data_exits_3_like_observe(live_policy: Path, capsys) -> None:
    with socket.socket() as closed:  # bound, never listening: connection refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        rc, out, err = _via_run(["run", "--once", "--dry-run", "--policy", str(live_policy), "--metrics-url", url],
                                capsys)
        observe_rc, _, _ = _via_run(["observe", "--policy", str(live_policy), "--prometheus", url], capsys)
    assert rc == 3 == observe_rc
    assert "no data: unreachable" in err and "Traceback" not in out + err


def _shell_lines(markdown: str) -> Iterator[str]:
    """The commands of a page: lines of fenced blocks and inline code spans."""
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            yield line
        else:
            yield from re.findall(r"`([^`]+)`", line)


DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), REPO / "deploy" / "README.md"]


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_documented_commands_work_as_root_without_sudo(page: Path) -> None:
    """Containers run as root and have no sudo: a command may use it only where it is optional."""
    optional = re.compile(r"\$\(command -v sudo\)|\$S\b|S=\$\(command -v sudo\)")
    required = [line for line in _shell_lines(page.read_text())
                if re.search(r"(^|[;&|(]\s*)sudo\s", optional.sub("", line))]
    assert required == []


# Bad values a user can type, each one line and exit 2 naming the flag, before any work starts (never a numpy or
# pydantic traceback, never a silent default). Placeholders: SMALL (200 Azure requests), ONE (one request),
# SERIES (a csv series), OUT (a fresh folder), FILE (a regular file).
AZURE = REPO / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
BACKTEST = ["backtest", "--trace", "SMALL", "--profile", str(PROFILE), "--policy", str(EXAMPLE), "--baselines", "",
            "--out", "OUT"]
FORECAST = ["forecast", "eval", "--series", "SERIES", "--format", "csv"]
INIT = ["init", "--model", "qwen3-32b", "--ttft-ms", "1000", "--itl-ms", "40", "--out", "OUT"]
INIT_LOAD = [*INIT, "--isl", "100", "--osl", "10", "--rate-rps", "5"]
RUN_LEADER = ["run", "--once", "--dry-run", "--leader-elect", "--policy", str(EXAMPLE)]
BAD_VALUES = [
    ("backtest-seed", [*BACKTEST, "--seed", "-1"], "--seed: -1 must be >= 0"),
    ("prefill-seed", ["bench", "prefill", "--seed", "-1"], "--seed: -1 must be >= 0"),
    ("fleet-seed", ["bench", "fleet", "--quick", "--seed", "-1", "--out", "OUT"], "--seed: -1 must be >= 0"),
    ("plan-rate-huge", ["plan", "--policy", str(EXAMPLE), "--rate-rps", "1e308", "--isl", "1000", "--osl", "200"],
     "--rate-rps: 1e+308 must be a finite number >= 0 and <= 1e+06 req/s"),
    ("plan-load-huge", ["plan", "--fleet", str(REPO / "fleets" / "example.yaml"), "--rate-rps", "1", "--isl", "100",
                        "--osl", "100", "--load", "qwen3-32b-chat=1e308,100,100"], "--load qwen3-32b-chat rate: 1e+308"),
    ("observe-window-huge", ["observe", "--prometheus", "http://127.0.0.1:9", "--policy", str(EXAMPLE),
                             "--window-s", "1e308"], "--window-s: 1e+308 must be a finite number of seconds > 0"),
    ("bench-observe-window-nan", ["bench", "observe", "--prometheus", "http://127.0.0.1:9", "--window-s", "nan"],
     "--window-s: nan must be"),
    ("forecast-warmup-nan", [*FORECAST, "--warmup-s", "nan"], "--warmup-s: nan must be"),
    ("forecast-warmup-negative", [*FORECAST, "--warmup-s", "-1"], "--warmup-s: -1 must be"),
    ("forecast-horizon-huge", [*FORECAST, "--horizon-s", "1e308"], "--horizon-s: 1e+308 must be"),
    ("forecast-step-tiny", ["forecast", "eval", "--series", "SMALL", "--step-s", "1e-300"],
     "--step-s: 1e-300 must be a finite number of seconds >= 0.1"),
    ("profile-grid-huge", ["profile", "--model", "qwen3-32b", "--isl-grid", "99999999999999999999", "--out", "OUT"],
     "--isl-grid: 99999999999999999999 must be <= 10000000"),
    ("backtest-duration-nan", [*BACKTEST, "--duration-s", "nan"], "--duration-s: nan must be"),
    ("backtest-duration-zero", [*BACKTEST, "--duration-s", "0"], "--duration-s: 0 must be"),
    ("backtest-duration-negative", [*BACKTEST, "--duration-s", "-5"], "--duration-s: -5 must be"),
    ("backtest-rate-scale-huge", [*BACKTEST, "--rate-scale", "1e9"], "--rate-scale: 1e+09 must be a finite number > 0 "
     "and <= 1000"),
    ("bench-forecast-horizon-negative", ["bench", "forecast", "--horizon-s", "-1"], "--horizon-s: -1 must be"),
    ("fidelity-start-negative", ["bench", "fidelity", "--start-s", "-1"], "--start-s: -1 must be"),
    ("fidelity-max-isl", ["bench", "fidelity", "--max-isl", "0"], "--max-isl: 0 must be >= 1"),
    ("fidelity-rate", ["bench", "fidelity", "--rate", "0"], "--rate: 0 must be a finite number of req/s > 0"),
    ("bench-sim-repeat-zero", ["bench", "sim", "--repeat", "0"], "--repeat: 0 must be >= 1"),
    ("bench-sim-repeat-negative", ["bench", "sim", "--repeat", "-1"], "--repeat: -1 must be >= 1"),
    ("bench-profile-repeat-zero", ["bench", "profile", "--repeat", "0"], "--repeat: 0 must be >= 1"),
    ("bench-profile-measurements", ["bench", "profile", "--measurements", "OUT/none.json"], "--measurements: "),
    ("suite-empty-scenarios", ["bench", "suite", "--quick", "--scenarios", "", "--out", "OUT"], "--scenarios '': "),
    ("profile-empty-tp", ["profile", "--model", "qwen3-32b", "--tp", "", "--out", "OUT/p.json"], "--tp '': "),
    ("init-empty-served-name", [*INIT_LOAD, "--served-model-name", ""], "--served-model-name '': must not be empty"),
    ("init-csv-needs-columns", [*INIT, "--trace", "SMALL", "--trace-format", "csv"],
     "--columns: --trace-format csv needs a mapping for arrival, isl, osl"),
    ("backtest-one-request", [*BACKTEST[:2], "ONE", *BACKTEST[3:]], "--trace: ONE: 1 request(s) spanning 0 s: too short"),
    ("backtest-peak-window", [*BACKTEST, "--peak-window-s", "0"], "error: --peak-window-s: 0 must be"),
    ("seeds-search-huge", ["bench", "seeds", "--search", "501", "--out", "OUT/s.json"], "--search: 501 must be in "
     "0..500"),
    ("seeds-search-seed", ["bench", "seeds", "--search", "1", "--search-seed", "-1", "--out", "OUT/s.json"],
     "--search-seed: -1 must be >= 0"),
    ("seeds-grid-missing", ["bench", "seeds", "--search", "1", "--grid", "OUT/none.yaml", "--out", "OUT/s.json"],
     "--grid: OUT/none.yaml: no such file"),
    ("backtest-oversized-mode", [*BACKTEST, "--oversized", "skip"], "--oversized: 'skip'; allowed: error, drop, "
     "truncate"),
    ("backtest-oversized-scenario", ["backtest", "--scenario", "azure-conv", "--oversized", "drop", "--out", "OUT"],
     "--oversized: not with --scenario"),
    ("run-lease-short", [*RUN_LEADER, "--lease-duration-s", "1"], "--lease-duration-s 1: too short for the policy's "
     "interval_s 30"),
    ("run-lease-inf", [*RUN_LEADER, "--lease-duration-s", "inf"], "--lease-duration-s inf: must be > 0 and finite"),
    ("run-leader-no-kubeconfig", RUN_LEADER, "--leader-elect: the Lease is held in the Kubernetes API"),
    ("serve-watch-no-kubeconfig", ["serve", "--port", "0", "--watch-namespace", "x", "--results-dir", "OUT"],
     "--watch-namespace x: watching ProfileRequest objects needs the Kubernetes API"),
    ("init-rate-and-concurrency", [*INIT_LOAD, "--concurrency", "4"], "give exactly one of --rate-rps and --concurrency"),
    ("init-thorough", [*INIT_LOAD, "--search", "thorough"], "give exactly one of --url (a running server) and "
     "--template"),
    ("serve-results-dir-file", ["serve", "--port", "0", "--results-dir", "FILE"], "--results-dir FILE: not a directory"),
]


@pytest.fixture
def bad_value_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # and not in a cluster: no credentials
    lines = AZURE.read_text().splitlines()
    files = {"SMALL": tmp_path / "small.csv", "ONE": tmp_path / "one.csv", "SERIES": tmp_path / "series.csv",
             "FILE": tmp_path / "a-file"}
    files["SMALL"].write_text("\n".join(lines[:200]) + "\n")
    files["ONE"].write_text("\n".join(lines[:2]) + "\n")
    files["SERIES"].write_text("t,y\n" + "".join(f"{i * 60},{10 + i % 7}\n" for i in range(400)))
    files["FILE"].write_text("x")
    return {**{k: str(v) for k, v in files.items()}, "OUT": str(tmp_path / "out")}


def _filled(text: str, files: dict[str, str]) -> str:
    return re.sub(r"\b(SMALL|ONE|SERIES|OUT|FILE)\b", lambda m: files[m.group(1)], text)


@pytest.mark.parametrize(("argv", "message"), [c[1:] for c in BAD_VALUES], ids=[c[0] for c in BAD_VALUES])
def test_bad_value_is_one_line_naming_the_flag(argv: list[str], message: str, bad_value_files: dict[str, str],
                                               capsys) -> None:
    rc, out, err = _via_run([_filled(a, bad_value_files) for a in argv], capsys)
    assert rc == 2, (out, err)
    assert _filled(message, bad_value_files) in err and len(_lines(err)) == 1, err
    assert "Traceback" not in out + err and "dry_run" not in err and "or use --dry-run" not in err, err
    flag = message.removeprefix("error: ").split(":")[0].split(" ")[0]
    assert not flag.startswith("--") or err.count(f"{flag}:") <= 1, err  # named once, not "--x: --x: ..."


def test_bad_typer_bound_is_one_line(capsys) -> None:
    rc, _, err = _via_run(["bench", "fleet", "--seeds", "0"], capsys)
    assert rc == 2 and len(_lines(err)) == 1 and "--seeds" in err and "Traceback" not in err, err


def test_init_takes_columns_for_a_csv_trace(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("ts,in,out\n0,100,10\n1,200,20\n2,300,30\n")
    rc, _, err = _via_run([*INIT[:-1], str(tmp_path / "out"), "--trace", str(trace), "--trace-format", "csv",
                           "--columns", "arrival=ts,isl=in,osl=out"], capsys)
    assert rc == 0 and (tmp_path / "out" / "policy.yaml").is_file(), err
