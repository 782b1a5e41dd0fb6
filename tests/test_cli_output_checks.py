"""An output path a command cannot write fails before any work, as one line naming the flag (issue 29:
`planner backtest --out UNWRITABLE` used to simulate for 27 s first). Made with real unwritable places: as root
``os.access`` says yes to everything, so the check creates and removes a probe entry instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli import run
from planner.commands.guards import check_writable
from planner.errors import UserError

REPO = Path(__file__).resolve().parent.parent
TRACE = REPO / "profiles" / "traces" / "azure2023" / "AzureLLMInferenceTrace_conv.csv"
BACKTEST = ["backtest", "--trace", str(TRACE), "--profile", str(REPO / "profiles/h200/qwen3-32b.json"),
            "--policy", str(REPO / "policies/example.yaml")]


@pytest.mark.parametrize(("out", "shown"), [
    ("/proc/planner-out/run", "--out /proc/planner-out/run: cannot write: /proc is not writable"),
    ("/sys/planner-out", "--out /sys/planner-out: cannot write: /sys is not writable"),
    ("{tmp}/a-file/out", "--out {tmp}/a-file/out: cannot write: {tmp}/a-file is not a directory"),
], ids=["under-proc", "read-only-sysfs", "under-a-file"])
def test_backtest_out_unwritable_fails_before_simulating(out: str, shown: str, tmp_path: Path, capsys) -> None:
    (tmp_path / "a-file").write_text("x")
    out = out.replace("{tmp}", str(tmp_path))
    rc = run([*BACKTEST, "--out", out])
    printed, err = capsys.readouterr()
    assert rc == 2, err
    assert err.startswith("error: " + shown.replace("{tmp}", str(tmp_path))), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert printed == ""  # not even the trace's description: nothing was loaded or simulated


def test_writable_paths_pass_and_the_probe_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "existing").mkdir()
    (tmp_path / "report.json").write_text("kept")
    for path in (tmp_path / "existing", tmp_path / "new" / "deeper", tmp_path / "report.json"):
        check_writable("--out", path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing", "report.json"]
    assert list((tmp_path / "existing").iterdir()) == [] and (tmp_path / "report.json").read_text() == "kept"


def test_an_existing_file_that_takes_no_write_is_named() -> None:
    with pytest.raises(UserError, match=r"^--out /proc/version: cannot write: "):
        check_writable("--out", Path("/proc/version"))


@pytest.mark.parametrize("out", ["/proc/planner-init", "/sys/planner-init"], ids=["under-proc", "read-only-sysfs"])
def test_init_names_an_unwritable_out_before_any_progress_line(out: str, capsys) -> None:
    """The sweep's step lines (stderr) used to come first, then the write failed; now the error is all there is."""
    rc = run(["init", "--model", "qwen3-32b", "--ttft-ms", "500", "--itl-ms", "30", "--isl", "3000", "--osl", "300",
              "--rate-rps", "10", "--out", out])
    printed, err = capsys.readouterr()
    assert rc == 2 and printed == "", (printed, err)
    assert len(err.splitlines()) == 1, err  # no "SweepingPrefill: ..." step line before it
    assert err.startswith(f"error: --out {out}: cannot write: {Path(out).parent} is not writable ("), err
