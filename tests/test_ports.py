"""Test ports come from below the kernel's ephemeral range, once each, and are bindable when handed out."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from planner.testing import ports


@pytest.mark.parametrize("text, expected", [("32768\t60999\n", 32768), ("1024 65535", 1024), ("", None),
                                            ("junk", None)])
def test_the_ephemeral_range_is_read_or_reported_unknown(tmp_path: Path, text: str, expected: int | None) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ports.ephemeral_low(path) == expected


def test_a_missing_range_file_is_unknown(tmp_path: Path) -> None:
    assert ports.ephemeral_low(tmp_path / "absent") is None


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 32768)
    picked = [ports.free_port() for _ in range(50)]
    assert len(set(picked)) == len(picked)
    assert all(ports.LOWEST_PORT <= p < 32768 for p in picked)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", picked[-1]))  # raises if it was not free


def test_a_port_taken_by_someone_else_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        if not ports._bindable("127.0.0.1", taken - 1):
            pytest.skip(f"port {taken - 1} is in use by another process here")
        monkeypatch.setattr(ports, "ephemeral_low", lambda: taken + 1)
        monkeypatch.setattr(ports, "LOWEST_PORT", taken - 1)  # two candidates: taken - 1 and the held one
        monkeypatch.setattr(ports, "_given", set())
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # the whole two-port range, not a worker's share
        assert ports.free_port() == taken - 1


@pytest.mark.parametrize("low", [None, ports.LOWEST_PORT])
def test_without_room_below_the_range_the_kernel_picks(monkeypatch: pytest.MonkeyPatch, low: int | None) -> None:
    monkeypatch.setattr(ports, "ephemeral_low", lambda: low)
    port = ports.free_port()
    assert port >= 1024
    assert port in ports._given


@pytest.mark.parametrize("count", [2, 3, 4])
def test_xdist_workers_draw_from_disjoint_shares_of_the_range(count: int) -> None:
    from planner.testing.ports import worker_share

    shares = [worker_share(20000, 32767, {"PYTEST_XDIST_WORKER": f"gw{i}", "PYTEST_XDIST_WORKER_COUNT": str(count)})
              for i in range(count)]
    assert all(20000 <= lo < hi <= 32767 for lo, hi in shares)
    assert all(a[1] < b[0] for a, b in zip(shares, shares[1:], strict=False))  # in order, none overlapping
    assert shares[-1][1] - shares[0][0] >= 32767 - 20000 - count  # the whole range is used
    assert worker_share(20000, 32767, {}) == (20000, 32767)  # not under xdist: all of it
    assert worker_share(20000, 32767, {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "1"}) == (20000, 32767)
    two = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2"}
    assert worker_share(20000, 20100, two) == (20000, 20100)  # too narrow to split
