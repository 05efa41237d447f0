"""The operator's view of the service for one tenant: Ray's nodes (site label, CPUs) with the workers placed on them,
the queue of waiting runs with their positions, and the tenant's use of its quotas. Another tenant's runs appear
only as counts."""

from __future__ import annotations

from typing import Any

from ..runtime.contracts import SITE_LABEL
from ..wire import RunStatus
from .manager import RunManager
from .schemas import ClusterNode, ClusterView, NodeWorker, QueuedRun, QuotaUse
from .store import RecordStore


def _ray_nodes() -> list[dict[str, Any]]:
    """Ray's node table, or none when this process is not connected to Ray."""
    import ray

    return list(ray.nodes()) if ray.is_initialized() else []


def cluster_view(tenant: str, manager: RunManager, store: RecordStore) -> ClusterView:
    """The nodes, queue and quota use as `tenant` may see them."""
    import ray

    settings = manager.settings
    running = store.runs_with_status([RunStatus.RUNNING])
    mine: dict[str, list[NodeWorker]] = {}
    others: dict[str, int] = {}
    for rec in running:
        for w in rec.workers:
            if w.node_id is None:
                continue
            if rec.tenant == tenant:
                mine.setdefault(w.node_id, []).append(NodeWorker(run_id=rec.id, shard=w.shard, tau_s=w.tau_s))
            else:
                others[w.node_id] = others.get(w.node_id, 0) + 1
    nodes = [
        ClusterNode(
            node_id=n["NodeID"],
            hostname=n.get("NodeManagerHostname"),
            alive=bool(n.get("Alive")),
            site=(n.get("Labels") or {}).get(SITE_LABEL),
            cpus=float((n.get("Resources") or {}).get("CPU", 0.0)),
            workers=mine.get(n["NodeID"], []),
            other_workers=others.get(n["NodeID"], 0),
        )
        for n in _ray_nodes()
    ]
    order = manager.queue_order()
    queue = []
    for position, (owner, run_id) in enumerate(order, start=1):
        if owner != tenant:
            continue
        waiting = store.get_run(tenant, run_id)
        name = None if waiting is None else waiting.spec.name
        queue.append(QueuedRun(run_id=run_id, name=name, position=position))
    return ClusterView(
        executor=settings.executor,
        ray_connected=ray.is_initialized(),
        nodes=nodes,
        running_runs=len(running),
        max_concurrent_runs=settings.max_concurrent_runs,
        queued_total=len(order),
        queue=queue,
        quota=QuotaUse(
            active_runs=store.count_active(tenant),
            max_active_runs=settings.quota_max_active_runs,
            stored_bytes=manager.stored_bytes(tenant),
            max_stored_bytes=settings.quota_max_stored_bytes,
            max_chains_x_dim=settings.quota_max_chains_x_dim,
            max_draw_bytes=settings.quota_max_draw_bytes,
        ),
        ray_dashboard_url=settings.ray_dashboard_url,
    )
