"""vLLM-named metrics with vLLM V1 semantics (vllm/v1/metrics/loggers.py), on a private registry.

Names, types, labels (``model_name``, ``engine``) and bucket boundaries follow vLLM so that dashboards,
the Prometheus source and PromQL written for vLLM work against the emulator unchanged. Counters are
declared without ``_total``; prometheus_client adds it, as it does for vLLM.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                             120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
FINISH_REASONS = ("stop", "length", "abort")


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[float] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class VllmMetrics:
    def __init__(self, model_name: str, max_model_len: int, engine: str = "0",
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        names = ["model_name", "engine"]
        labels = {"model_name": model_name, "engine": engine}
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, names, registry=r).labels(**labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=r).labels(**labels)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=r).labels(**labels)

        token_buckets = buckets_1_2_5(max_model_len)
        self.num_requests_running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.num_requests_waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage_perc = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.num_preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          [*names, "finished_reason"], registry=r)
        self.request_success = {reason: success.labels(**labels, finished_reason=reason)
                                for reason in FINISH_REASONS}
        self.request_prompt_tokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                          token_buckets)
        self.request_generation_tokens = hist("vllm:request_generation_tokens",
                                              "Number of generation tokens processed.", token_buckets)
        self.request_params_max_tokens = hist("vllm:request_params_max_tokens",
                                              "Histogram of the max_tokens request parameter.", token_buckets)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                     ITERATION_TOKEN_BUCKETS)
        self.time_to_first_token = hist("vllm:time_to_first_token_seconds",
                                        "Histogram of time to first token in seconds.", TTFT_BUCKETS_S)
        self.inter_token_latency = hist("vllm:inter_token_latency_seconds",
                                        "Histogram of inter-token latency in seconds.", ITL_BUCKETS_S)
        self.request_time_per_output_token = hist("vllm:request_time_per_output_token_seconds",
                                                  "Histogram of time_per_output_token_seconds per request.",
                                                  ITL_BUCKETS_S)
        self.e2e_request_latency = hist("vllm:e2e_request_latency_seconds",
                                        "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS_S)
        self.request_queue_time = hist("vllm:request_queue_time_seconds",
                                       "Histogram of time spent in WAITING phase for request.",
                                       REQUEST_LATENCY_BUCKETS_S)
        self.request_inference_time = hist("vllm:request_inference_time_seconds",
                                           "Histogram of time spent in RUNNING phase for request.",
                                           REQUEST_LATENCY_BUCKETS_S)
        self.request_prefill_time = hist("vllm:request_prefill_time_seconds",
                                         "Histogram of time spent in PREFILL phase for request.",
                                         REQUEST_LATENCY_BUCKETS_S)
        self.request_decode_time = hist("vllm:request_decode_time_seconds",
                                        "Histogram of time spent in DECODE phase for request.",
                                        REQUEST_LATENCY_BUCKETS_S)
