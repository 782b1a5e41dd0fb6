"""The endpoint backend against a real vLLM server (the CPU build, a tiny random-weight model): it finds
what the server exposes (version, max_model_len, KV capacity, token-id prompts, usage on every chunk), and
its curves are monotone and plausible; a context beyond max_model_len is skipped and noted, not invented.

Uses the harness of planner/testing/vllm_cpu.py (its ``vllm_engine`` fixture lives in tests/conftest.py);
where that harness is not in the tree yet, the module is skipped.
"""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("planner.testing.vllm_cpu", reason="the vLLM CPU harness (planner/testing/vllm_cpu.py) "
                    "is not in this tree")

from planner.bench.machine_share import OthersCpu  # noqa: E402
from planner.catalog import load_hardware, load_model  # noqa: E402
from planner.profile import Profile  # noqa: E402
from planner.profiler.backends import get_backend  # noqa: E402
from planner.profiler.grids import SweepRequest  # noqa: E402
from planner.testing.vllm_cpu import VLLM_CPU_VERSION, VllmServer  # noqa: E402

pytestmark = pytest.mark.engine
MAX_MODEL_LEN = 4096  # VllmServer's DEFAULT_ARGS
# Other jobs' (or the hypervisor's) share of the CPU over the profile above which its timings measure them,
# as in tests/test_engine_fidelity.py.
QUIET_SHARE = 0.15
ISL_GRID = (64, 512, 2048)
BATCH_GRID = (1, 4, 16)
CONTEXT_GRID = (256, 1024, MAX_MODEL_LEN)  # the last cannot fit a decode run: skipped, not invented
NEIGHBOUR_STEP_FLOOR = 0.6  # a batch's step over the next smaller batch's, at least (see _check_curves)


@pytest.fixture(scope="module")
def server(shared_vllm) -> VllmServer:
    """The session's shared server (conftest.py orders this module after the ones that check its cumulative
    counters against their ledger). Its two point checks failed there in two fresh-clone runs (2026-12-01):
    the notes check read a string as a list, so any noted skip failed it, and the curve checks asked for points
    a busy machine had made the backend skip; both are fixed below, and a server of its own cost ~40 s of CI."""
    return shared_vllm.get()


@pytest.fixture(scope="module")
def measured(server: VllmServer, vllm_engine) -> tuple[Profile, OthersCpu]:
    """The profile, and how much of the machine other jobs and the hypervisor took while it was measured."""
    model = str(vllm_engine.model_dir / "config.json")
    req = SweepRequest(model=model, gpu="h200", tp=(1,), isl=512, osl=64, ttft_ms=5000, itl_ms=500,
                       isl_grid=ISL_GRID, batch_grid=BATCH_GRID, context_grid=CONTEXT_GRID, url=server.url,
                       served_model="tiny", warmup=1, iters=5, decode_tokens=16)
    with OthersCpu() as cpu:
        profile = get_backend("endpoint")(load_model(model), load_hardware("h200"), req)
    return profile, cpu


@pytest.fixture(scope="module")
def profile(measured: tuple[Profile, OthersCpu]) -> Profile:
    return measured[0]


def _shared(cpu: OthersCpu) -> str | None:
    """Why the machine did not belong to the profile while it was measured (None: it did, or /proc is unread)."""
    taken = {"other jobs": cpu.share, "hypervisor steal": cpu.steal}
    over = {k: v for k, v in taken.items() if v is not None and v > QUIET_SHARE}
    return f"machine shared during the profile: {over} of the CPU (above {QUIET_SHARE:g})" if over else None


def test_provenance_is_what_the_server_exposes(profile: Profile, server: VllmServer) -> None:
    sw = profile.provenance.software
    assert (sw["server_version"], sw["served_model"], sw["max_model_len"]) == (VLLM_CPU_VERSION, "tiny", "4096")
    assert sw["prompts"] == "token-ids" and sw["token_counts"] == "usage on every chunk"
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    blocks, block = int(sw["vllm.cache.num_gpu_blocks"]), int(sw["vllm.cache.block_size"])
    assert f'num_gpu_blocks="{blocks}"' in metrics
    assert profile.decode[0].kv_capacity_tokens == blocks * block
    assert profile.provenance.backend == "endpoint" and profile.prefill[0].tp == 1


def test_every_point_that_fits_is_measured_and_the_rest_noted(profile: Profile) -> None:
    assert [p.isl for p in profile.prefill[0].points] == list(ISL_GRID)
    measured = {(p.batch, p.context_tokens) for p in profile.decode[0].points}
    fits = {(b, c) for b in BATCH_GRID for c in CONTEXT_GRID if c < MAX_MODEL_LEN}
    notes = profile.provenance.notes
    # A point that fits is measured, or skipped with the backend's own reason, as it is when the machine
    # starves the API server or the client (chunks merged: a reading it refuses to record; a batch never all
    # running at once, and larger batches at that context not tried). Never lost without a word.
    skips = [n for n in notes.split("; ") if n.startswith("skipped decode batch ")]
    for batch, ctx in fits - measured:
        assert any(n.startswith(f"skipped decode batch {batch} context {ctx}: ") for n in skips), notes
    assert measured <= fits and len(measured) >= len(fits) // 2, notes  # the backend does measure vLLM
    for batch in BATCH_GRID:
        assert (f"skipped decode batch {batch} context {MAX_MODEL_LEN}: context + 16 tokens is above the server's "
                f"max_model_len {MAX_MODEL_LEN}") in profile.provenance.notes


def test_curves_are_monotone_and_plausible(measured: tuple[Profile, OthersCpu]) -> None:
    # Tolerances are for a 2-core machine shared with other work: each point is the median of 5 passes,
    # but a busy spell can still cost one point a fifth of its speed. A spell that cost more (a fresh-clone CI
    # run of 2026-12-02: at context 1024 a larger batch measured over 20 % faster per step than a smaller one,
    # and the module passed on a re-run) is judged by what the machine gave the profile: the checks below
    # fail on a quiet machine and are skipped, with the figures, on a shared one.
    profile, cpu = measured
    try:
        _check_curves(profile)
    except AssertionError as exc:
        why = _shared(cpu)
        if why is None:
            raise
        pytest.skip(f"{why}; the curve check it would have failed: {exc}")


def _check_curves(profile: Profile) -> None:
    ttft = [p.ttft_ms for p in profile.prefill[0].points]
    assert all(0 < t < 60_000 for t in ttft)
    # A longer prompt does not prefill faster (at 64 and 512 tokens the tiny model's TTFT is mostly fixed
    # per-request cost), and 32x the prompt shows.
    assert all(b >= 0.8 * a for a, b in zip(ttft, ttft[1:], strict=False)), ttft
    assert ttft[-1] > 1.3 * ttft[0], ttft
    itl = {(p.batch, p.context_tokens): p.itl_ms for p in profile.decode[0].points}
    rate = {(p.batch, p.context_tokens): p.tokens_per_s_per_gpu for p in profile.decode[0].points}
    assert all(0 < i < 10_000 for i in itl.values()), itl
    for ctx in CONTEXT_GRID[:-1]:
        # A bigger batch is not faster per step (over the points measured: see the test above). On the tiny
        # model a step is mostly fixed cost, so batch 4's step is only 3-37 % above batch 1's, while one point's
        # five passes spread over 2.0-5.1 ms on a quiet 2-core machine (four profiles in a row, 2026-12-06):
        # the medians' ratio fell to 0.79 on a quiet CI run (cd38a11). So neighbours are held to what a
        # backend that divided the step by the batch (a ratio of 0.25 or less) could not pass, and the ends of
        # the grid, 16x apart (1.3-2.2x the step in those runs), to the order itself.
        batches = [b for b in BATCH_GRID if (b, ctx) in itl]
        steps = [itl[(b, ctx)] for b in batches]
        assert all(b >= NEIGHBOUR_STEP_FLOOR * a for a, b in zip(steps, steps[1:], strict=False)), (ctx, itl)
        assert steps[-1] >= steps[0], (ctx, itl)
        # ... and batching pays: some batch decodes well over one stream's tokens/s. (Not every larger
        # batch: on one CPU core a step's compute grows with the batch, and throughput flattens.)
        if (1, ctx) in rate and len(batches) > 1:
            assert max(rate[(b, ctx)] for b in batches) > 1.5 * rate[(1, ctx)], (ctx, rate)
    assert profile.selection is not None


@pytest.mark.parametrize("share, steal, outcome", [
    pytest.param(0.05, 0.02, "fails", id="quiet"),
    pytest.param(0.30, 0.02, "skips", id="other-jobs"),
    pytest.param(0.05, 0.20, "skips", id="hypervisor-steal"),
    pytest.param(None, None, "fails", id="proc-unread"),
])
def test_a_failed_curve_check_is_skipped_only_on_a_shared_machine(share, steal, outcome, monkeypatch) -> None:
    def broken(profile: Profile) -> None:
        raise AssertionError("(1024, {(1, 1024): 4.4, (4, 1024): 3.2})")

    monkeypatch.setitem(globals(), "_check_curves", broken)
    cpu = OthersCpu()
    cpu.share, cpu.steal = share, steal
    if outcome == "fails":
        with pytest.raises(AssertionError, match="1024"):
            test_curves_are_monotone_and_plausible((None, cpu))  # type: ignore[arg-type]
    else:
        with pytest.raises(pytest.skip.Exception, match=r"machine shared during the profile.*\(1024"):
            test_curves_are_monotone_and_plausible((None, cpu))  # type: ignore[arg-type]
