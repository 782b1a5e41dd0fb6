"""`planner init`: a profile request run locally, in one command: profile, TP per stage, replicas, advice,
policy.yaml and manifests/ written to --out."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.commands.args import int_list, parse_columns
from planner.commands.console import out_console
from planner.errors import InfeasibleError, UserError, not_utf8

# Spec field -> the flag that sets it: errors from the request name fields, the user typed flags.
FIELD_FLAGS = {
    "model.name": "--model", "model.config": "--model", "model.served_name": "--served-model-name",
    "model": "--model", "hardware.gpu": "--gpu", "hardware.gpus_per_node": "--gpus-per-node",
    "hardware.total_gpus": "--total-gpus", "workload.isl": "--isl", "workload.osl": "--osl",
    "workload.request_rate": "--rate-rps", "workload.concurrency": "--concurrency",
    "workload.trace.path": "--trace", "workload.trace.format": "--trace-format", "workload.trace": "--trace",
    "workload": "--rate-rps", "sla.ttft_ms": "--ttft-ms", "sla.itl_ms": "--itl-ms", "sla.percentile": "--percentile",
    "search": "--search", "engine": "--engine", "tp": "--tp", "endpoint": "--url",
    "deployment_template": "--template", "output": "--output", "actuator": "--actuator", "mode": "--mode",
    "name": "--name", "namespace": "--namespace", "image": "--image", "kv_link_gbps": "--kv-link-gbps",
    "scale_to_zero_after_s": "--scale-to-zero-after-s",
    "request_rate": "--rate-rps", "concurrency": "--concurrency", "total_gpus": "--total-gpus",
    "gpus_per_node": "--gpus-per-node", "served_name": "--served-model-name", "trace": "--trace",
    "workload.trace.columns": "--columns",
}
# Plain words that name a field in one field's messages only ("give exactly one of request_rate and
# concurrency"): translated there, where they cannot be ordinary words.
FIELD_WORDS = {"workload.request_rate": ("concurrency",), "search": ("endpoint",), "workload.trace": ("columns",)}
# Only names that cannot be ordinary words ("model", "endpoint" are) are translated inside a message.
_FIELD_WORD = re.compile(r"(?<![\w.-])(" + "|".join(re.escape(k) for k in sorted(FIELD_FLAGS, key=len, reverse=True)
                                                     if "." in k or "_" in k) + r")(?![\w-])")


def as_flags(text: str, field: str | None = None) -> str:
    """A request error with its field names spelled as this command's flags (and, for ``field``'s own
    messages, the plain words FIELD_WORDS names there)."""
    text = _FIELD_WORD.sub(lambda m: FIELD_FLAGS[m.group(1)], text)
    for word in FIELD_WORDS.get(field or "", ()):
        flag = FIELD_FLAGS.get(word, f"--{word}")
        text = re.sub(rf"(?<![\w.-]){word}(?![\w-])", flag, text)
    return text


def _model_ref(model: str, served: str | None) -> dict[str, Any]:
    if served is not None and not served.strip():
        raise UserError(f"--served-model-name {served!r}: must not be empty (leave the flag out for the shipped "
                        "model's default)")
    looks_like_path = model.endswith(".json") or "/" in model or Path(model).is_dir()
    ref: dict[str, Any] = {"config": model} if looks_like_path else {"name": model}
    return {**ref, **({"served_name": served} if served is not None else {})}


def _template(path: Path | None) -> str | None:
    if path is None:
        return None
    from planner.profiler.k8s_worker import is_inline, load_template

    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"--template {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(f"--template {path}", exc) from None
    try:  # the request carries the text: checked here, its errors name the file and not "the inline template"
        load_template(text if is_inline(text) else f"{text}\n")
    except UserError as exc:
        raise UserError(f"--template {path}: {str(exc).split(': ', 2)[-1]}") from None
    return text


def _trace_columns(trace: Path | None, trace_format: str, columns: str | None) -> dict[str, str] | None:
    """``--columns`` for a csv/jsonl trace (as `planner backtest` takes it; no model column: one workload)."""
    mapping = parse_columns(columns)
    missing = [k for k in ("arrival", "isl", "osl") if k not in (mapping or {})]
    if trace is not None and trace_format in ("csv", "jsonl") and missing:
        raise UserError(f"--columns: --trace-format {trace_format} needs a mapping for {', '.join(missing)}, e.g. "
                        "--columns arrival=ts,isl=prompt_tokens,osl=output_tokens[,time_unit=ms]")
    if mapping is None:
        return None
    if trace is None:
        raise UserError("--columns: only with --trace (it maps a csv/jsonl trace's columns)")
    if "model" in mapping:
        raise UserError("--columns model=...: not with init (one trace is one workload)")
    return mapping


def _workload(isl: int | None, osl: int | None, rate_rps: float | None, concurrency: int | None,
              trace: Path | None, trace_format: str, columns: dict[str, str] | None = None) -> dict[str, Any]:
    if trace is not None:
        return {"trace": {"path": str(trace), "format": trace_format,
                          **({"columns": columns} if columns is not None else {})},
                **{k: v for k, v in (("isl", isl), ("osl", osl), ("request_rate", rate_rps),
                                     ("concurrency", concurrency)) if v is not None}}
    return {k: v for k, v in (("isl", isl), ("osl", osl), ("request_rate", rate_rps), ("concurrency", concurrency))
            if v is not None}


def _fail(reason: str, message: str, closest: dict | None, console: Console) -> None:
    from planner.requests.report import render_closest
    from planner.requests.status import FailReason

    if reason in (FailReason.SLA_INFEASIBLE, FailReason.OVER_BUDGET):
        render_closest(closest, console)
        raise InfeasibleError(as_flags(message))
    if reason in (FailReason.INVALID_SPEC, FailReason.UNSUPPORTED, FailReason.BACKEND_UNAVAILABLE):
        field = next((f for f in FIELD_WORDS if message.startswith(f"{FIELD_FLAGS[f]}:") or
                      message.startswith(f"{f}:")), None)
        raise UserError(as_flags(message, field))
    Console(stderr=True).print(f"[bold red]failed ({reason}):[/] {message}", soft_wrap=True)
    raise typer.Exit(1)


class _StepPrinter:
    def __init__(self, console: Console) -> None:
        self.console = console

    def step(self, step: Any, message: str) -> None:
        self.console.print(f"[dim]{step.value}: {message}[/]")

    def progress(self, fraction: float, message: str) -> None:
        pass


def run_init(spec_data: dict[str, Any], out: Path, json_out: bool, console: Console) -> None:
    from planner.requests import artifacts, pipeline
    from planner.requests.checks import check
    from planner.requests.report import render_result
    from planner.requests.spec import RequestInvalid, parse_spec
    from planner.requests.sweep import RequestFailed

    try:
        resolved = check(parse_spec(spec_data))
    except RequestInvalid as exc:
        first = exc.errors[0]
        raise UserError(f"{FIELD_FLAGS.get(first.field, first.field)}: {as_flags(first.message, first.field)}"
                        ) from None
    try:
        outcome = pipeline.run(resolved, _StepPrinter(Console(stderr=True)))
    except RequestFailed as exc:
        _fail(exc.reason, exc.message, exc.closest, console)
        return
    try:
        artifacts.commit(out, outcome.rendered.files)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    if json_out:
        print(json.dumps(outcome.result.model_dump(mode="json"), indent=1))
        return
    render_result(resolved, outcome.result, console)
    manifests = ", ".join(n.removeprefix("manifests/") for n in outcome.rendered.files if n.startswith("manifests/"))
    console.print(f"wrote {out}/profile.json, {out}/policy.yaml, {out}/result.json, {out}/manifests/ ({manifests})")
    console.print(f"next: kubectl apply -k {out}/manifests   and   planner run --policy {out}/policy.yaml")


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init_cmd(
        model: Annotated[str, typer.Option(help="shipped model name (e.g. qwen3-32b) or path to a config.json")],
        out: Annotated[Path, typer.Option(help="folder for profile.json, policy.yaml, result.json, manifests/")],
        ttft_ms: Annotated[float, typer.Option("--ttft-ms", help="TTFT target (ms)")],
        itl_ms: Annotated[float, typer.Option("--itl-ms", help="ITL target (ms)")],
        isl: Annotated[int | None, typer.Option(help="mean input length (tokens)")] = None,
        osl: Annotated[int | None, typer.Option(help="mean output length (tokens)")] = None,
        rate_rps: Annotated[float | None, typer.Option("--rate-rps", help="request rate (req/s)")] = None,
        concurrency: Annotated[int | None, typer.Option(help="requests in flight (instead of --rate-rps)")] = None,
        trace: Annotated[Path | None, typer.Option(help="derive ISL, OSL and rate from a trace")] = None,
        trace_format: Annotated[str, typer.Option("--trace-format", help="azure | mooncake | csv | jsonl | "
                                                  "servegen")] = "azure",
        columns: Annotated[str | None, typer.Option(help="csv/jsonl trace column mapping, e.g. "
                                                    "arrival=ts,isl=in,osl=out,time_unit=ms")] = None,
        percentile: Annotated[float, typer.Option(help="SLA percentile")] = 95.0,
        gpu: Annotated[str, typer.Option(help="GPU from profiles/hardware.yaml")] = "h200",
        gpus_per_node: Annotated[int, typer.Option("--gpus-per-node")] = 8,
        total_gpus: Annotated[int | None, typer.Option("--total-gpus", help="GPU budget (default: none)")] = None,
        search: Annotated[str, typer.Option(help="rapid (analytical) | thorough (measured)")] = "rapid",
        url: Annotated[str | None, typer.Option(help="thorough: the OpenAI-compatible endpoint to measure")] = None,
        template: Annotated[Path | None, typer.Option(help="thorough: a manifest deployed at each TP")] = None,
        engine: Annotated[str, typer.Option(help="vllm | sglang | trtllm | dynamo")] = "vllm",
        tp: Annotated[str | None, typer.Option(help="TP candidates, e.g. 1,2,4,8")] = None,
        output: Annotated[str, typer.Option(help="deployments | dynamo-graph | lws")] = "deployments",
        actuator: Annotated[str, typer.Option(help="keda | hpa | kubernetes | dry-run")] = "keda",
        mode: Annotated[str, typer.Option(help="auto | aggregated | disaggregated")] = "auto",
        name: Annotated[str | None, typer.Option(help="base name of the objects (default: the model's)")] = None,
        namespace: Annotated[str, typer.Option(help="namespace of the objects")] = "default",
        image: Annotated[str | None, typer.Option(help="engine image (default: pinned per engine)")] = None,
        served_model_name: Annotated[str | None, typer.Option("--served-model-name", help="the model the engines "
                                                              "load (default for shipped models)")] = None,
        kv_link_gbps: Annotated[float | None, typer.Option("--kv-link-gbps", help="P->D KV link, Gb/s")] = None,
        scale_to_zero_after_s: Annotated[float | None, typer.Option(
            "--scale-to-zero-after-s", help="the pools go to zero after this long without a request (min_replicas "
            "0; KEDA: minReplicaCount 0, woken by the desired replicas)")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    ) -> None:
        """Profile a model for an SLA and write what to deploy: profile, policy and manifests."""
        data: dict[str, Any] = {
            "model": _model_ref(model, served_model_name), "sla": {"ttft_ms": ttft_ms, "itl_ms": itl_ms,
                                                                    "percentile": percentile},
            "hardware": {"gpu": gpu, "gpus_per_node": gpus_per_node, "total_gpus": total_gpus},
            "workload": _workload(isl, osl, rate_rps, concurrency, trace, trace_format,
                                  _trace_columns(trace, trace_format, columns)),
            "search": search, "engine": engine, "tp": list(int_list("--tp", tp) or []) or None, "endpoint": url,
            "deployment_template": _template(template), "output": output, "actuator": actuator, "mode": mode,
            "name": name, "namespace": namespace, "image": image, "kv_link_gbps": kv_link_gbps,
            **({"scale_to_zero_after_s": scale_to_zero_after_s} if scale_to_zero_after_s is not None else {}),
        }
        run_init(data, out, json_out, out_console())
