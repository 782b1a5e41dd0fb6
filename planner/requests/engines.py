"""What each engine needs in a manifest: image, port, TP flag, P/D flags, multi-node launch, metrics dialect.

Flags as each project documents them: vLLM ``vllm serve MODEL --tensor-parallel-size N`` with the NIXL KV
connector for P/D; SGLang ``python3 -m sglang.launch_server --model-path M --tp N`` with
``--disaggregation-mode prefill|decode``; TensorRT-LLM ``trtllm-serve M --tp_size N``; Dynamo workers
``python3 -m dynamo.<backend>`` as in Dynamo's own examples (examples/backends/*/deploy/disagg.yaml).
Multi-node replicas (LeaderWorkerSet): vLLM over Ray with the image's multi-node-serving.sh, SGLang with
``--nnodes/--node-rank/--dist-init-addr``, as the LWS examples do. Images are pinned defaults to override
with the request's ``image``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from planner.types import Pool

DYNAMO_VERSION = "1.3.1"
SERVED_NAMES = {  # shipped model configs (profiles/models) -> the Hugging Face repository they come from
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
}
NIXL = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))


@dataclass(frozen=True)
class Engine:
    name: str
    image: str
    port: int  # the port the shipped PodMonitors scrape (deploy/engines/)
    dialect: str  # metrics.dialect of the policy
    dynamo_backend: str  # dynamo.<backend> and DGD backendFramework
    disaggregates: bool  # P/D without Dynamo
    multinode: bool  # one replica over several nodes (LeaderWorkerSet)


ENGINES: dict[str, Engine] = {
    "vllm": Engine("vllm", "vllm/vllm-openai:v0.11.0", 8000, "vllm", "vllm", True, True),
    "sglang": Engine("sglang", "lmsysorg/sglang:v0.5.4", 30000, "sglang", "sglang", True, True),
    "trtllm": Engine("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:1.0.0", 8000, "trtllm", "trtllm", False,
                     False),
    # Dynamo's operator runs the engine: the vLLM backend, whose workers re-expose vllm:* series.
    "dynamo": Engine("dynamo", "", 8000, "vllm", "vllm", True, True),
}
DYNAMO_RUNTIME = {"vllm": "vllm-runtime", "sglang": "sglang-runtime", "trtllm": "tensorrtllm-runtime"}


def dynamo_image(backend: str) -> str:
    return f"nvcr.io/nvidia/ai-dynamo/{DYNAMO_RUNTIME[backend]}:{DYNAMO_VERSION}"


def _pd_args(engine: str, pool: Pool) -> list[str]:
    if pool is Pool.AGGREGATED:
        return []
    if engine == "vllm":
        return ["--kv-transfer-config", NIXL]
    return ["--disaggregation-mode", pool.value, "--disaggregation-transfer-backend", "nixl"]


def serve_args(engine: str, model: str, tp: int, pool: Pool) -> tuple[list[str], list[str]]:
    """(command, args) of a single-node engine replica."""
    e = ENGINES[engine]
    port = str(e.port)
    if engine == "vllm":
        return ["vllm", "serve"], [model, "--tensor-parallel-size", str(tp), "--port", port, *_pd_args(engine, pool)]
    if engine == "sglang":
        return (["python3", "-m", "sglang.launch_server"],
                ["--model-path", model, "--tp", str(tp), "--host", "0.0.0.0", "--port", port, "--enable-metrics",
                 *_pd_args(engine, pool)])
    return ["trtllm-serve"], [model, "--tp_size", str(tp), "--host", "0.0.0.0", "--port", port]


def multinode_commands(engine: str, model: str, tp: int, pool: Pool) -> tuple[list[str], list[str]]:
    """(leader command, worker command) of a replica spread over an LWS group; $(LWS_*) come from LWS."""
    _, args = serve_args(engine, model, tp, pool)
    quoted = " ".join(_shell_quote(a) for a in args)
    if engine == "vllm":
        script = "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh"
        leader = (f"{script} leader --ray_cluster_size=$(LWS_GROUP_SIZE); "
                  f"exec vllm serve {quoted} --distributed-executor-backend ray")
        return ["sh", "-c", leader], ["sh", "-c", f"{script} worker --ray_address=$(LWS_LEADER_ADDRESS)"]
    launch = ("exec python3 -m sglang.launch_server " + quoted + " --nnodes $(LWS_GROUP_SIZE) "
              "--node-rank $(LWS_WORKER_INDEX) --dist-init-addr $(LWS_LEADER_ADDRESS):20000")
    return ["sh", "-c", launch], ["sh", "-c", launch]


def _shell_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "-_./:=@" for c in arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def dynamo_worker_args(backend: str, model: str, tp: int, pool: Pool) -> list[str]:
    """Arguments of ``python3 -m dynamo.<backend>`` for one worker service of a DynamoGraphDeployment."""
    if backend == "vllm":
        role = {Pool.PREFILL: ["--is-prefill-worker"], Pool.DECODE: ["--is-decode-worker"]}.get(pool, [])
        return ["--model", model, "--tensor-parallel-size", str(tp), *role]
    tp_flag = "--tp" if backend == "sglang" else "--tensor-parallel-size"
    role = [] if pool is Pool.AGGREGATED else ["--disaggregation-mode", pool.value]
    if backend == "sglang" and role:
        role += ["--disaggregation-transfer-backend", "nixl"]
    return ["--model-path", model, "--served-model-name", model, tp_flag, str(tp), *role]


def gpu_resource(vendor: str) -> str:
    """The device-plugin resource name for the GPU's vendor."""
    return "amd.com/gpu" if vendor.lower() == "amd" else "nvidia.com/gpu"
