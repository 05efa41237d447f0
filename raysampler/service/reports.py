"""A run's runtime statistics as the API reports them: per worker (placement, rows, timings, its link, its release
ledger, its DP budget spent), round trips by phase, and reports (the tuned plan) as JSON values."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..privacy.ledger import SiteLedger
from ..runtime.contracts import RunStats
from .schemas import NetworkInfo, PipelineInfo, ReleaseInfo, SiteLedgerInfo, TripsInfo, WorkerStats


def worker_stats(stats: RunStats, rows: Sequence[int] = ()) -> list[WorkerStats]:
    """Per-shard placement (site, node, host, process), its rows (the set-up's `shard_rows`), τ_i, N_i and idle
    fraction (NaN → None)."""

    def val(arr: Any, i: int) -> float | None:
        a = np.asarray(arr, dtype=float).ravel()
        return float(a[i]) if i < len(a) and np.isfinite(a[i]) else None

    def count(arr: Any, i: int) -> int | None:
        v = val(arr, i)
        return None if v is None else int(v)

    link_of = {i: link for link in stats.links for i in link.shards}
    dp = stats.privacy
    out = []
    for i in range(len(np.asarray(stats.N).ravel())):
        p = stats.placement[i] if i < len(stats.placement) else None
        link = link_of.get(i)
        out.append(
            WorkerStats(
                shard=i,
                site=p.site if p else None,
                rows=int(rows[i]) if i < len(rows) else None,
                node_id=p.node_id if p else None,
                hostname=p.hostname if p else None,
                pid=p.pid if p else None,
                tau_s=val(stats.tau, i),
                local_steps=count(stats.N, i),
                idle_fraction=val(stats.idle_fraction, i),
                channel=link.channel if link else None,
                setup_rtt_s=link.setup_rtt_s if link else None,
                rtt_s=link.rtt_s if link else None,
                rtt_median_s=link.rtt_median_s if link else None,
                ledger=site_ledger(stats.ledger.shards[i]) if stats.ledger is not None else None,
                epsilon_spent=val(dp.epsilon_spent, i) if dp is not None else None,
                clip_rate=val(dp.clip_rate, i) if dp is not None else None,
            )
        )
    return out


def site_ledger(entry: SiteLedger) -> SiteLedgerInfo:
    """One shard's release ledger as the API shows it."""
    by_mode = entry.bytes_by_mode()
    return SiteLedgerInfo(
        shard=entry.shard,
        site=entry.site,
        messages=entry.messages,
        bytes=entry.total_bytes,
        masked_bytes=by_mode["masked"],
        sealed_bytes=by_mode["sealed"],
        plain_bytes=by_mode["plain"],
        releases=[
            ReleaseInfo.model_validate(
                {
                    "quantity": r.quantity,
                    "shape": list(r.shape),
                    "messages": r.messages,
                    "bytes": r.bytes,
                    "mode": r.mode,
                }
            )
            for r in entry.releases
        ],
    )


def network_info(stats: RunStats) -> NetworkInfo:
    """Round trips by phase so far, and whether chains are in flight (and why)."""
    t = stats.trips
    pipe = None if stats.pipeline is None else PipelineInfo(**dataclasses.asdict(stats.pipeline))
    return NetworkInfo(trips=TripsInfo(**dataclasses.asdict(t), total=t.total), pipeline=pipe)


def jsonable(value: Any, max_items: int = 64) -> Any:
    """A report (e.g. the tuned plan) as JSON values: arrays become lists (summarised as min/max/size when longer
    than `max_items`), non-finite floats None, other objects their string."""
    if isinstance(value, dict):
        return {str(k): jsonable(v, max_items) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value, dtype=object if not isinstance(value, np.ndarray) else None)
        if arr.dtype.kind in "fiub" and arr.size > max_items:
            flat = arr.astype(float).ravel()
            return {
                "size": int(arr.size),
                "min": jsonable(float(np.nanmin(flat))),
                "max": jsonable(float(np.nanmax(flat))),
            }
        return [jsonable(v, max_items) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)
