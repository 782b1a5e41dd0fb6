"""Files a user hands the CLI that are wrong in ways a parser lets through: bytes that are not UTF-8, a key given
twice, ``true`` where a number goes, a token count past int64. Each is one line
naming the file (and line or key) and exit 2, never a traceback and never a silent choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.cli import run

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "policies" / "example.yaml"
PROFILE = REPO / "profiles" / "h200" / "qwen3-32b.json"
AZURE_HEADER = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = b"2023-11-16 18:15:46.68,100,44\n"
PLAN = ["--rate-rps", "5", "--isl", "1000", "--osl", "200"]


def _policy(tmp: Path, edit: dict[tuple[str, ...], object]) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["profile"] = str(PROFILE)
    for path, value in edit.items():
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    out = tmp / "policy.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, after checking it exited 2 (bad input)."""
    rc = run(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    return err


def _bad_utf8_files(tmp: Path) -> dict[str, Path]:
    files = {"bin": tmp / "bin.yaml", "trace": tmp / "trace.csv", "series": tmp / "series.csv"}
    files["bin"].write_bytes(b"name: x\nsla: {ttft_ms: 1000}\n\xff\xfe\n")
    files["trace"].write_bytes(AZURE_HEADER + ROW + b"2023-11-16 18:15:47.68,\xff100,44\n")
    files["series"].write_bytes(b"time_s,rate\n0,1\n30,\xff2\n")
    return files


NOT_UTF8 = [  # (id, argv with {bin}/{trace}/{series} for the bad files, the file the message must name)
    ("policy", ["plan", "--policy", "{bin}", *PLAN], "bin"),
    ("fleet", ["plan", "--fleet", "{bin}", *PLAN], "bin"),
    ("profile", ["emulate", "--profile", "{bin}", "--role", "decode"], "bin"),
    ("model-config", ["profile", "--model", "{bin}", "--out", "{out}"], "bin"),
    ("trace-streamed", ["backtest", "--trace", "{trace}", "--profile", str(PROFILE), "--policy", str(EXAMPLE),
                        "--baselines", "", "--out", "{out}"], "trace"),
    ("series", ["forecast", "eval", "--series", "{series}", "--format", "csv"], "series"),
]


@pytest.mark.parametrize("argv,named", [c[1:] for c in NOT_UTF8], ids=[c[0] for c in NOT_UTF8])
def test_a_file_that_is_not_utf8_is_one_line_naming_it(argv: list[str], named: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    files = _bad_utf8_files(tmp_path)
    args = [a.format(**files, out=tmp_path / "out") for a in argv]
    rc = run(args)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(files[named]) in lines[0] and "not UTF-8 text (byte 0xff" in lines[0], lines[0]


def test_the_line_of_a_whole_file_read_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _bad_utf8_files(tmp_path)
    assert run(["plan", "--policy", str(files["bin"]), *PLAN]) == 2
    assert "(byte 0xff on line 3)" in capsys.readouterr().err


@pytest.mark.parametrize("row,words", [
    (b"2023-11-16 18:15:46.68,99999999999999999999,44\n", "more tokens than any model's context; at most 10,000,000"),
    (b"2023-11-16 18:15:46.68,100,10000001\n", "'GeneratedTokens' value '10000001' is more tokens"),
], ids=["past-int64", "past-the-bound"])
def test_a_token_count_past_any_context_names_its_row(row: bytes, words: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_bytes(AZURE_HEADER + ROW + row)
    rc = run(["backtest", "--trace", str(trace), "--profile", str(PROFILE), "--policy", str(EXAMPLE),
              "--baselines", "", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{trace}:3: column" in err and words in err and "Traceback" not in err, err


def test_an_unsorted_trace_names_its_row_in_plain_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("t,i,o\n0,100,10\n5.5,100,10\n2.25,100,10\n")
    rc = run(["backtest", "--trace", str(trace), "--format", "csv", "--columns", "arrival=t,isl=i,osl=o",
              "--profile", str(PROFILE), "--policy", str(EXAMPLE), "--baselines", "", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{trace}:4: arrival time 2.25 is earlier than the previous row's 5.5" in err, err
    assert "np.float64" not in err


@pytest.mark.parametrize("text,words", [
    ("name: a\ninterval_s: 30\ninterval_s: 60\n", "(line 3, column 1): found the key 'interval_s' twice (first on "
                                                  "line 2)"),
    ("name: a\nsla:\n  ttft_ms: 1000\n  itl_ms: 40\n  ttft_ms: 500\n", "found the key 'ttft_ms' twice"),
], ids=["top-level", "nested"])
def test_a_key_given_twice_in_a_policy_is_an_error_not_the_last_one(text: str, words: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "policy.yaml").write_text(text)
    err = _refused(["plan", "--policy", str(tmp_path / "policy.yaml"), *PLAN], capsys)
    assert f"{tmp_path / 'policy.yaml'}: not valid YAML" in err and words in err, err


def test_a_key_given_twice_in_a_fleet_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"budget: {{max_gpus: 48}}\nbudget: {{max_gpus: 4}}\npolicies:\n  - {{policy: {EXAMPLE}}}\n")
    assert run(["plan", "--fleet", str(fleet), *PLAN]) == 2
    assert "found the key 'budget' twice (first on line 1)" in capsys.readouterr().err


@pytest.mark.parametrize("edit,key", [
    ({("sla", "ttft_ms"): True}, "sla.ttft_ms"),  # lax pydantic: a 1 ms target
    ({("pools", "prefill", "min_replicas"): True}, "pools.prefill.min_replicas"),  # a floor of one
    ({("interval_s",): False}, "interval_s"),
], ids=["ttft", "floor", "interval"])
def test_true_or_false_where_a_number_goes_is_refused(edit: dict, key: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--policy", str(_policy(tmp_path, edit)), *PLAN]) == 2
    err = capsys.readouterr().err
    assert f"key '{key}'" in err and "is a boolean, not a number" in err, err


@pytest.mark.parametrize("edit,words", [
    ({("sla", "ttft_ms"): float("nan")}, "key 'sla.ttft_ms' = nan: must be a finite number"),
    ({("metrics", "window_s"): 1e308}, "key 'metrics.window_s' = 1e+308: Input should be less than or equal to 2592000"),
], ids=["nan", "window-past-30-days"])
def test_a_number_no_run_could_use_is_refused_at_load(edit: dict, words: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--policy", str(_policy(tmp_path, edit)), *PLAN]) == 2
    assert words in capsys.readouterr().err


def test_true_in_a_mapping_of_numbers_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(f"budget: {{max_gpus: 48, gpu_cost_per_hour: {{h200: true}}}}\npolicies:\n  - {{policy: {EXAMPLE}}}\n")
    assert run(["plan", "--fleet", str(fleet), *PLAN]) == 2
    assert "h200: true is a boolean, not a number" in capsys.readouterr().err  # it was priced at 1 per GPU-hour


@pytest.mark.parametrize("manifest,words", [
    ("apiVersion: v1\nkind: Service\n", "expected one Deployment (kind: Deployment), found 0"),
    ("a: [1,", "not valid YAML"),
], ids=["no-deployment", "broken-yaml"])
def test_init_names_the_template_file_it_could_not_deploy(manifest: str, words: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "engine.yaml"
    path.write_text(manifest)
    err = _refused(["init", "--model", "qwen3-32b", "--isl", "1000", "--osl", "200", "--rate-rps", "5", "--ttft-ms",
                    "1000", "--itl-ms", "40", "--search", "thorough", "--template", str(path), "--out",
                    str(tmp_path / "out")], capsys)
    assert f"--template {path}: {words}" in err and "inline" not in err, err


def test_a_boolean_field_still_takes_a_boolean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = _policy(tmp_path, {("sla", "budget_control"): False, ("sla", "lean_decode"): True})
    assert run(["plan", "--policy", str(policy), *PLAN]) == 0, capsys.readouterr().err
