"""The Prometheus config `planner up` and the tests write: every path in it absolute, since Prometheus reads a
relative one from the config file's folder (a relative file_sd path once left `planner up` with its default
`--out out/up` scraping no engine: it looked for out/up/prometheus/out/up/state/targets.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.testing.local_prometheus import LocalPrometheus


def test_file_sd_and_rule_paths_are_absolute_whatever_the_working_directory(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    prom = LocalPrometheus([], binary="/bin/true", workdir=Path("out/up/prometheus"),
                           file_sd=[Path("out/up/state/targets.json")], rule_files=[Path("rules.yml")])
    config = prom._config()
    (files,) = [job["file_sd_configs"][0]["files"] for job in config["scrape_configs"] if "file_sd_configs" in job]
    assert files == [str(tmp_path / "out/up/state/targets.json")]
    assert config["rule_files"] == [str(tmp_path / "rules.yml")]
