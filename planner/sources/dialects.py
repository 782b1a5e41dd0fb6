"""Engine metric dialects as data: which series answer which question, per serving engine.

Names come from INTEGRATION.md §1 (vLLM V1 loggers.py, SGLang collector.py, Dynamo prometheus_names.rs,
TensorRT-LLM collector.py). The PromQL is built from these records by ``promql.py``; nothing here knows
how to query.

Requests *started* (the offered load) matter more than requests completed: counting completions lags by a
whole request's lifetime and under-scales exactly when load rises. None of the four engines exposes an
arrival counter that is independent of TTFT (vLLM observes ``request_prompt_tokens`` and
``request_success_total`` at completion; TTFT's count lags by queue + prefill; Dynamo's
``requests_total`` is bumped when the handler ends). So every dialect uses the conservation identity

    started(t-W, t] = completed(t-W, t] + in_system(t) - in_system(t-W)

with ``completed`` a counter of finished requests (any finish reason, aborts included) and ``in_system``
the sum of gauges that together hold every admitted, unfinished request (vLLM: running + waiting). It is
exact at scrape resolution when the gauges and the counter come from the same scrape, which they do for
one target. Its bias: requests still inside the HTTP front end (tokenising) before the engine's waiting
queue are counted a few milliseconds late, and an engine that dies mid-window loses its in-flight
requests from both terms.

Ready replicas are the distinct values of ``replica_label`` (default ``instance``: the scrape target,
host:port, which Prometheus puts on every scraped series) among the fresh presence series - not the number
of series, which over-counts whenever one replica exports several. What each dialect allows:

- vllm: one series per engine and served model. A server with data parallelism exports ``engine="0"``,
  ``"1"``, ... on one /metrics, and a pod serving several models one series per ``model_name``; both
  are one replica, one scrape target. A multi-node replica (LeaderWorkerSet, Ray) exports from its leader
  only: one replica. Several API server processes (``--api-server-count``) share one port: one target.
- sglang: one series per model (with DP attention, per ``dp_rank`` in some versions): counted by target
  as for vLLM.
- dynamo: the presence gauge is the *frontend's*; distinct instances are frontends, which tell nothing
  about the workers behind them. Read worker pools with their engine's dialect (Dynamo's vLLM and SGLang
  workers export ``vllm:*`` / ``sglang:*``) when the replica count matters.
- trtllm: one series per server: counted by target.

A replica whose pod exposes metrics on two ports (two targets) counts twice; a Dialect whose
``replica_label`` names the pod (e.g. ``pod`` from Kubernetes service discovery) counts it once.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import UserError


@dataclass(frozen=True)
class Ratio:
    """Mean of a per-request quantity: increase(numerator) / increase(denominator) over the window.

    For a histogram ``h`` this is ``h_sum / h_count``; for engines without a per-request histogram it is
    a token counter over a request counter.
    """

    numerator: str
    denominator: str

    @classmethod
    def histogram(cls, name: str) -> Ratio:
        return cls(f"{name}_sum", f"{name}_count")

    @property
    def histogram_name(self) -> str | None:
        """The histogram's base name when this ratio is one's _sum/_count (its buckets give the distribution)."""
        base = self.numerator.removesuffix("_sum")
        return base if self.numerator.endswith("_sum") and self.denominator == f"{base}_count" else None


@dataclass(frozen=True)
class Dialect:
    name: str
    presence_gauge: str  # one series per live engine: its fresh series are the ready replicas
    running_gauge: str
    queue_gauge: str
    in_system_gauges: tuple[str, ...]  # their sum holds every admitted, unfinished request
    completed_counter: str  # finished requests, any reason (as scraped, with its _total suffix)
    isl: Ratio
    osl: Ratio
    ttft_histogram: str  # seconds; base name, _bucket/_sum/_count appended
    itl_histogram: str  # seconds
    kv_usage_gauge: str | None = None  # None: the dialect has no KV signal (kv_usage stays None)
    kv_usage_scale: float = 1.0  # multiplies the gauge into 0..1
    itl_note: str = ""
    # The label that tells replicas apart: ready replicas are its distinct values among fresh presence
    # series. ``instance`` (the scrape target, host:port) is on every scraped series; see REPLICAS.
    replica_label: str = "instance"


VLLM = Dialect(
    name="vllm",
    presence_gauge="vllm:num_requests_running",
    running_gauge="vllm:num_requests_running",
    queue_gauge="vllm:num_requests_waiting",
    in_system_gauges=("vllm:num_requests_running", "vllm:num_requests_waiting"),
    completed_counter="vllm:request_success_total",
    isl=Ratio.histogram("vllm:request_prompt_tokens"),
    osl=Ratio.histogram("vllm:request_generation_tokens"),
    ttft_histogram="vllm:time_to_first_token_seconds",
    # Token-weighted (one observation per token gap), the quantity an ITL SLA is written against.
    itl_histogram="vllm:inter_token_latency_seconds",
    kv_usage_gauge="vllm:kv_cache_usage_perc",
)

SGLANG = Dialect(
    name="sglang",
    presence_gauge="sglang:num_running_reqs",
    running_gauge="sglang:num_running_reqs",
    queue_gauge="sglang:num_queue_reqs",
    in_system_gauges=("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    completed_counter="sglang:num_requests_total",
    # The per-request token histograms exist only with --collect-tokens-histogram; the counters always do.
    isl=Ratio("sglang:prompt_tokens_total", "sglang:num_requests_total"),
    osl=Ratio("sglang:generation_tokens_total", "sglang:num_requests_total"),
    ttft_histogram="sglang:time_to_first_token_seconds",
    itl_histogram="sglang:inter_token_latency_seconds",
    kv_usage_gauge="sglang:token_usage",
)

DYNAMO = Dialect(
    name="dynamo",
    # The frontend's inflight gauge spans handler start to last token, so it alone is in_system; its
    # queued gauge runs until the first token and therefore includes prefill.
    presence_gauge="dynamo_frontend_inflight_requests",
    running_gauge="dynamo_frontend_inflight_requests",
    queue_gauge="dynamo_frontend_queued_requests",
    in_system_gauges=("dynamo_frontend_inflight_requests",),
    completed_counter="dynamo_frontend_requests_total",
    isl=Ratio.histogram("dynamo_frontend_input_sequence_tokens"),
    osl=Ratio.histogram("dynamo_frontend_output_sequence_tokens"),
    ttft_histogram="dynamo_frontend_time_to_first_token_seconds",
    itl_histogram="dynamo_frontend_inter_token_latency_seconds",
    kv_usage_gauge=None,  # the frontend has no KV view; read the workers' engine dialect for it
)

TRTLLM = Dialect(
    name="trtllm",
    presence_gauge="trtllm_num_requests_running",
    running_gauge="trtllm_num_requests_running",
    queue_gauge="trtllm_num_requests_waiting",
    in_system_gauges=("trtllm_num_requests_running", "trtllm_num_requests_waiting"),
    completed_counter="trtllm_request_success_total",
    isl=Ratio("trtllm_prompt_tokens_total", "trtllm_request_success_total"),
    osl=Ratio("trtllm_generation_tokens_total", "trtllm_request_success_total"),
    ttft_histogram="trtllm_time_to_first_token_seconds",
    itl_histogram="trtllm_time_per_output_token_seconds",
    kv_usage_gauge="trtllm_kv_cache_utilization",
    itl_note="TRT-LLM has no ITL histogram: TPOT (one observation per request) stands in, request-weighted",
)

# The one list of engine dialects: `--dialect`, a policy's ``metrics.dialect`` and the docs offer these.
DIALECTS: dict[str, Dialect] = {d.name: d for d in (VLLM, SGLANG, DYNAMO, TRTLLM)}


def dialect_names() -> tuple[str, ...]:
    """Every dialect name, in the order the help text lists them."""
    return tuple(DIALECTS)


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        allowed = ", ".join(dialect_names())
        raise UserError(f"dialect {name!r}: unknown; allowed: {allowed}", key="dialect") from None
