"""vLLM-named metrics with vLLM V1 semantics (vllm/v1/metrics/loggers.py, vLLM 0.32), on a private registry.

Every ``vllm:*`` family a single aggregated vLLM 0.32 server exports, with its name, type, labels
(``model_name``, ``engine`` and the family's own), bucket boundaries and help text, plus the Python
process families (``process_*``, ``python_*``) that vLLM's global registry carries; the HTTP families are
added by the app (prometheus-fastapi-instrumentator, as vLLM's front end). tests/test_engine_vllm_api.py
diffs the family set against a real server. Counters are declared without ``_total``; prometheus_client
adds it, as it does for vLLM.

What the emulator does not model stays at its idle value, as on a vLLM server that never uses it: no
prefix cache (queries count, hits stay 0), no preemption, no KV transfer, no multi-modal cache, no
admission limits, never asleep, and no FLOP/byte estimates (vLLM's CPU build exports those at 0 too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from planner.types import buckets_1_2_5  # vLLM's build_1_2_5_buckets (request token histograms)

EMULATED_VLLM_VERSION = "0.32.0"  # /version answers this: the API and metrics copied here are 0.32's
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                             120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
REQUEST_PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
PROMPT_TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
# vllm:cache_config_info's labels (CacheConfig.metrics_info() of vLLM 0.32, values as its CPU build
# shows them); cache_info() fills in what the emulator knows.
CACHE_CONFIG_LABELS: dict[str, str] = {
    "_block_size_resolved": "True", "block_size": "16", "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None", "effective_attention_block_size": "16",
    "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "False",
    "gpu_memory_utilization": "0.92", "hash_block_size": "None", "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": "0", "kv_offloading_backend": "native",
    "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
    "mamba_cache_dtype": "auto", "mamba_cache_mode": "none", "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None", "num_gpu_blocks": "0",
    "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None", "replayssm_buffer_len": "16",
    "skip_page_size_padded": "None", "sliding_window": "None", "swa_bounded_replay": "True",
    "use_kda_recoverssm": "False", "use_replayssm": "False", "user_specified_block_size": "False",
}
_WAITING_DOC = ("Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
                "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
                "status). Sum of all reasons equals vllm:num_requests_waiting.")
_SLEEP_DOC = ("Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
              "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.")
_CACHED_BY_SOURCE_DOC = ("Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
                         "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
                         "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
                         "vllm:external_prefix_cache_hits.")
_M = TypeVar("_M", Gauge, Counter)
_MFU = "(for Model Flops Utilization calculations)."


def cache_info(kv_capacity_tokens: int, max_concurrency: float | None = None) -> dict[str, str]:
    """vllm:cache_config_info's labels for an engine with ``kv_capacity_tokens`` of KV (16-token blocks)."""
    block = int(CACHE_CONFIG_LABELS["block_size"])
    tokens = max(0, int(kv_capacity_tokens))
    return {**CACHE_CONFIG_LABELS, "num_gpu_blocks": str(tokens // block), "kv_cache_size_tokens": str(tokens),
            "kv_cache_max_concurrency": "None" if max_concurrency is None else f"{max_concurrency:.1f}"}


def add_process_collectors(registry: CollectorRegistry) -> None:
    """process_*, python_gc_* and python_info, which vLLM's /metrics carries from the default registry."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class VllmMetrics:
    def __init__(self, model_name: str, max_model_len: int, engine: str = "0",
                 registry: CollectorRegistry | None = None, cache_labels: Mapping[str, str] | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._names = ["model_name", "engine"]
        self._labels = {"model_name": model_name, "engine": engine}
        add_process_collectors(self.registry)
        self._scheduler_families()
        self._counter_families(model_name)
        self._histogram_families(buckets_1_2_5(max_model_len))
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     [*(cache_labels or CACHE_CONFIG_LABELS), "engine"], registry=self.registry)
        info.labels(**(cache_labels or CACHE_CONFIG_LABELS), engine=engine).set(1)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, self._names, registry=self.registry).labels(**self._labels)

    def _counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, self._names, registry=self.registry).labels(**self._labels)

    def _by(self, kind: type[_M], name: str, doc: str, label: str, values: tuple[str, ...]) -> dict[str, _M]:
        family = kind(name, doc, [*self._names, label], registry=self.registry)
        return {v: family.labels(**self._labels, **{label: v}) for v in values}

    def _hist(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, self._names, buckets=buckets, registry=self.registry).labels(**self._labels)

    def _scheduler_families(self) -> None:
        self.num_requests_running = self._gauge("vllm:num_requests_running",
                                                "Number of requests in model execution batches.")
        self.num_requests_waiting = self._gauge("vllm:num_requests_waiting",
                                                "Number of requests waiting to be processed.")
        self.num_requests_waiting_by_reason = self._by(Gauge, "vllm:num_requests_waiting_by_reason", _WAITING_DOC,
                                                       "reason", WAITING_REASONS)
        sleep = self._by(Gauge, "vllm:engine_sleep_state", _SLEEP_DOC, "sleep_state", SLEEP_STATES)
        sleep["awake"].set(1)
        self.kv_cache_usage_perc = self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")

    def _counter_families(self, model_name: str) -> None:
        c = self._counter
        for what, doc in (("flops", "floating point operations"), ("read_bytes", "bytes read from memory"),
                          ("write_bytes", "bytes written to memory")):
            c(f"vllm:estimated_{what}_per_gpu", f"Estimated number of {doc} per GPU {_MFU}")
        self.prefix_cache_queries = c("vllm:prefix_cache_queries",
                                      "Prefix cache queries, in terms of number of queried tokens.")
        self.prefix_cache_hits = c("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        for kind in ("queries", "hits"):
            unit = "queried" if kind == "queries" else "cached"
            c(f"vllm:external_prefix_cache_{kind}", f"External prefix cache {kind} from KV connector cross-instance "
              f"cache sharing, in terms of number of {unit} tokens.")
            c(f"vllm:mm_cache_{kind}", f"Multi-modal cache {kind}, in terms of number of {unit} items.")
        self.num_preemptions = c("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = c("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_tokens_by_source = self._by(Counter, "vllm:prompt_tokens_by_source",
                                                "Number of prompt tokens by source.", "source", PROMPT_TOKEN_SOURCES)
        self.prompt_tokens_cached = c("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        self._by(Counter, "vllm:prompt_tokens_cached_by_source", _CACHED_BY_SOURCE_DOC, "source", CACHE_HIT_SOURCES)
        self.generation_tokens = c("vllm:generation_tokens", "Number of generation tokens processed.")
        self.request_success = self._by(Counter, "vllm:request_success", "Count of successfully processed requests.",
                                        "finished_reason", FINISH_REASONS)
        rejections = Counter("vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, "
                             "by reason.", ["model_name", "reason"], registry=self.registry)
        for reason in ADMISSION_REASONS:
            rejections.labels(model_name=model_name, reason=reason)

    def _histogram_families(self, tokens: tuple[float, ...]) -> None:
        h, lat = self._hist, REQUEST_LATENCY_BUCKETS_S
        self.request_prompt_tokens = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.request_generation_tokens = h("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                           tokens)
        self.iteration_tokens = h("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                  ITERATION_TOKEN_BUCKETS)
        self.request_max_num_generation_tokens = h("vllm:request_max_num_generation_tokens",
                                                   "Histogram of maximum number of requested generation tokens.", tokens)
        self.request_params_n = h("vllm:request_params_n", "Histogram of the n request parameter.",
                                  REQUEST_PARAMS_N_BUCKETS)
        self.request_params_max_tokens = h("vllm:request_params_max_tokens",
                                           "Histogram of the max_tokens request parameter.", tokens)
        self.time_to_first_token = h("vllm:time_to_first_token_seconds",
                                     "Histogram of time to first token in seconds.", TTFT_BUCKETS_S)
        self.inter_token_latency = h("vllm:inter_token_latency_seconds",
                                     "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S)
        self.request_time_per_output_token = h("vllm:request_time_per_output_token_seconds",
                                               "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S)
        self.e2e_request_latency = h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                                     lat)
        self.request_queue_time = h("vllm:request_queue_time_seconds",
                                    "Histogram of time spent in WAITING phase for request.", lat)
        self.request_inference_time = h("vllm:request_inference_time_seconds",
                                        "Histogram of time spent in RUNNING phase for request.", lat)
        self.request_prefill_time = h("vllm:request_prefill_time_seconds",
                                      "Histogram of time spent in PREFILL phase for request.", lat)
        self.request_decode_time = h("vllm:request_decode_time_seconds",
                                     "Histogram of time spent in DECODE phase for request.", lat)
        self.request_num_preemptions = h("vllm:request_num_preemptions",
                                         "Histogram of the number of times a request was preempted.",
                                         REQUEST_NUM_PREEMPTIONS_BUCKETS)
        self.request_prefill_kv_computed_tokens = h("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV "
                                                    "tokens computed during prefill (excluding cached tokens).", tokens)
