"""The sizing model: what one replica of each pool can do, at the profile's TP and the policy's SLA and link.

Built once per (policy, profile) by the caller (``DeciderSpec.build``) and passed into every ``decide`` call,
as Knative builds its DeciderSpec once and hands it to the decider: nothing in the pure core keeps a cache
of its own keyed by object identity.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from planner.config import Policy
from planner.perf.engine import EngineModel
from planner.perf.kv import gbps_to_bytes_per_s
from planner.profile import Profile
from planner.types import Pool

CTX_QUANTUM = 16  # tokens; decode contexts are rounded up to this for the lookup tables
_TABLE_LIMIT = 200_000  # entries before a table starts over (bounded memory in a long-running controller)


class CurveTables:
    """Lookup tables over the engine curves, filled on first use.

    decide() runs every tick and must stay well under 1 ms, and its searches evaluate the same
    (batch, context) points many times. Every entry is a pure function of its key, so the tables change
    how fast an answer comes, never what it is: a fresh table, a full one or one that started over give
    the same results. They belong to the SizingModel that owns the engines they tabulate.
    """

    def __init__(self) -> None:
        self._itl_ms: dict[tuple[int, int, int], float] = {}
        self._prefill_s: dict[tuple[int, int], float] = {}

    def itl_ms(self, engine_id: int, engine: EngineModel, batch: int, ctx_quanta: int) -> float:
        key = (engine_id, batch, ctx_quanta)
        value = self._itl_ms.get(key)
        if value is None:
            if len(self._itl_ms) > _TABLE_LIMIT:
                self._itl_ms.clear()
            value = self._itl_ms[key] = engine.decode.itl_ms(batch, ctx_quanta * CTX_QUANTUM).value
        return value

    def prefill_s(self, engine_id: int, engine: EngineModel, isl_tokens: int) -> float:
        key = (engine_id, isl_tokens)
        value = self._prefill_s.get(key)
        if value is None:
            if len(self._prefill_s) > _TABLE_LIMIT:
                self._prefill_s.clear()
            value = self._prefill_s[key] = engine.prefill_s(isl_tokens)
        return value


class SizingModel:
    """The engine models and SLA constants the capacity functions size against, and their lookup tables.

    ``engine`` is the disaggregated pools' model (prefill curve at the prefill TP, decode curve at the decode
    TP: each pool uses its own half); ``aggregated`` runs both stages on one replica at the decode TP.
    Not a frozen record on purpose: it owns ``tables`` (see CurveTables), which fill as it is used.
    """

    __slots__ = ("engine", "aggregated", "gpus", "kv_bytes_per_token", "link_bytes_per_s", "ttft_target_ms",
                 "itl_target_ms", "percentile", "z", "tables")

    def __init__(self, engine: EngineModel, aggregated: EngineModel, gpus: dict[Pool, int],
                 kv_bytes_per_token: float, link_bytes_per_s: float, ttft_target_ms: float, itl_target_ms: float,
                 percentile: float) -> None:
        self.engine = engine
        self.aggregated = aggregated
        self.gpus = dict(gpus)
        self.kv_bytes_per_token = kv_bytes_per_token
        self.link_bytes_per_s = link_bytes_per_s
        self.ttft_target_ms = ttft_target_ms
        self.itl_target_ms = itl_target_ms
        self.percentile = percentile  # 0..1
        self.z = NormalDist().inv_cdf(percentile)  # standard normal quantile at the percentile
        self.tables = CurveTables()

    @classmethod
    def build(cls, policy: Policy, profile: Profile) -> SizingModel:
        ptp, dtp = profile.selected_tp("prefill"), profile.selected_tp("decode")
        pcurve, dcurve = profile.prefill_curve(ptp), profile.decode_curve(dtp)
        # An aggregated replica runs both stages at the decode TP (decode sets the memory footprint).
        agg_prefill = profile.prefill_curve(dtp) if any(s.tp == dtp for s in profile.prefill) else pcurve
        p = policy.sla.percentile / 100.0
        gpus = {Pool.PREFILL: pcurve.gpus, Pool.DECODE: dcurve.gpus, Pool.AGGREGATED: dcurve.gpus}
        return cls(EngineModel(pcurve, dcurve), EngineModel(agg_prefill, dcurve), gpus,
                   float(profile.model.kv_bytes_per_token), gbps_to_bytes_per_s(policy.kv_link.gbps),
                   policy.sla.ttft_ms, policy.sla.itl_ms, p)

    def at_percentile(self, percentile: float) -> SizingModel:
        """The same model sizing for another percentile (0..1); the lookup tables are shared."""
        if percentile == self.percentile:
            return self
        other = object.__new__(SizingModel)
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        other.percentile = percentile
        other.z = NormalDist().inv_cdf(percentile)
        return other

    def _engine_id(self, engine: EngineModel) -> int:
        return 1 if engine is self.aggregated else 0

    def itl_ms(self, engine: EngineModel, batch: float, ctx: float) -> float:
        """ITL at a (possibly fractional) batch; the context is rounded *up* to 16 tokens (never optimistic)."""
        ctx_q = int(math.ceil(ctx / CTX_QUANTUM))
        lo = max(1, int(batch))
        eid = self._engine_id(engine)
        a = self.tables.itl_ms(eid, engine, lo, ctx_q)
        if batch <= lo:
            return a
        b = self.tables.itl_ms(eid, engine, lo + 1, ctx_q)
        return a + (b - a) * (batch - lo)

    def prefill_s(self, engine: EngineModel, isl: float) -> float:
        return self.tables.prefill_s(self._engine_id(engine), engine, int(math.ceil(isl)))
