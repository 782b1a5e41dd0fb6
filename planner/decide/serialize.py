"""Decision -> plain dict (JSON, logs, the API): one place so every surface shows the same fields."""

from __future__ import annotations

from typing import Any

from planner.types import Decision


def decision_dict(decision: Decision) -> dict[str, Any]:
    return {
        "at_s": decision.at_s,
        "gpus": decision.gpus,
        "predicted_ttft_ms": decision.predicted_ttft_ms,
        "predicted_itl_ms": decision.predicted_itl_ms,
        "reasons": [r.value for r in decision.reasons],
        "pools": {
            name: {
                "replicas": p.replicas,
                "gpus_per_replica": p.gpus_per_replica,
                "gpus": p.gpus,
                "desired_unclamped": p.desired_unclamped,
                "predicted_ttft_ms": p.predicted_ttft_ms,
                "predicted_itl_ms": p.predicted_itl_ms,
                "reasons": [r.value for r in p.reasons],
            }
            for name, p in decision.pools.items()
        },
        "detail": dict(decision.detail),
    }
