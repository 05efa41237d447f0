"""The coordinator: owns the chain state and runs the rounds. It knows nothing of an algorithm's mathematics:
it asks the algorithm for messages, moves them to the pool, hands the replies back, keeps the draws.

Rounds run in chunks (`run(max_rounds)`), each returning the draws it produced, so a caller can show
progress, stream draws and stop on a time budget without the coordinator holding the whole run.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms.base import Algorithm, RoundInfo
from ..models.base import DataSpec, Model
from ..streams import ChainNoise


@dataclass(frozen=True)
class RunConfig:
    chains: int
    num_rounds: int
    burn_in: int
    thin: int
    seed: int
    balance: bool            # re-balance N_i from measured step times (sec. 3.2.2)
    rebalance_every: int = 20


@dataclass
class Chunk:
    """Draws kept by one `run` call: theta (n, K, d), per-chain stats (n, K), and where the run stands."""

    theta: np.ndarray
    stats: dict[str, np.ndarray]
    rounds_done: int
    done: bool
    error: dict | None = None


class StepBalancer:
    """N_i = max(1, round(q_i · N_avg · b)), q_i = τ_i⁻¹ / Σ_k τ_k⁻¹ (seed 000, sec. 3.2.2).

    τ_i is worker i's seconds per local step: timed before sampling (`calibrate`), then an exponential moving
    average of the measured rounds, re-estimated after 5 rounds and every `every` rounds.
    """

    def __init__(self, n_init: np.ndarray, n_avg: float, enabled: bool, every: int, group_size: np.ndarray,
                 alpha: float = 0.3) -> None:
        self.n = np.asarray(n_init, dtype=int).copy()
        self.n_avg, self.enabled, self.every, self.alpha = n_avg, enabled, every, alpha
        self.group_size = np.asarray(group_size, dtype=float)
        self.tau = np.full(len(self.n), np.nan)
        self._count = 0

    def calibrate(self, tau: np.ndarray) -> None:
        """Start from step times measured before sampling, and set N_i from them at once."""
        self.tau = np.asarray(tau, dtype=float).copy()
        if self.enabled:
            self._rebalance()

    def observe(self, times: np.ndarray, steps: np.ndarray) -> None:
        per_step = times / np.maximum(steps, 1)
        self.tau = np.where(np.isnan(self.tau), per_step, (1 - self.alpha) * self.tau + self.alpha * per_step)
        self._count += 1
        if self.enabled and (self._count == 5 or self._count % self.every == 0):
            self._rebalance()

    def _rebalance(self) -> None:
        if np.all(np.isfinite(self.tau)) and np.all(self.tau > 0):
            # Shards sharing a worker process run one after another: weighting by 1/(group size) equalises
            # the processes' wall times, Σ_{i∈g} N_i τ_i, which is what the paper's rule aims at.
            speed = 1.0 / (self.tau * self.group_size)
            q = speed / np.sum(speed)
            self.n = np.maximum(1, np.round(q * self.n_avg * len(self.n))).astype(int)


class Coordinator:
    """Runs the rounds of one sampling run over a worker pool (in-process or Ray actors)."""

    def __init__(self, pool: Any, model: Model, algorithm: Algorithm, config: RunConfig) -> None:
        self.pool, self.model, self.algorithm, self.config = pool, model, algorithm, config
        self.t = 0
        self.state: Any = None
        self.setup_info: dict[str, Any] = {}

    # --- setup ----------------------------------------------------------------------------------

    def setup(self, slowdown: dict[int, float] | None = None) -> dict[str, Any]:
        """Fix the model's dimension from the shards, tune the algorithm, create the worker states."""
        t0 = time.perf_counter()
        facts = self.pool.describe()
        self.model = self.model.bind(data_spec(facts, self.model))
        self.pool.bind(self.model)
        d, cfg = self.model.dim, self.config
        self.algorithm.check_shapes(self.pool.num_shards, d, cfg.chains)
        self.noise = ChainNoise(cfg.seed, cfg.chains, role=0, dim=d)
        plan = self.algorithm.prepare(self.model, self.pool, chains=cfg.chains, seed=cfg.seed, noise=self.noise)
        self.pool.init_states(plan.worker_payloads)
        if slowdown:
            self.pool.set_slowdown(slowdown)
        self.state = plan.coordinator_state
        b = self.pool.num_shards
        group_size = np.empty(b)
        for g in self.pool.groups:
            group_size[g] = len(g)
        self.balancer = StepBalancer(plan.local_steps, plan.n_avg, cfg.balance and plan.balance, cfg.rebalance_every,
                                     group_size)
        if self.balancer.enabled:
            self.balancer.calibrate(self.pool.calibrate())
        self.round_time: list[float] = []
        self.compute = np.zeros(b)
        self.idle = np.zeros(b)
        self.n_history: list[np.ndarray] = [self.balancer.n.copy()]
        self.setup_info = {
            "dim": d, "param_names": self.model.param_names(), "num_shards": b,
            "shard_rows": [f["n_rows"] for f in facts], "groups": self.pool.groups,
            "setup_time_s": time.perf_counter() - t0, "plan": plan.info, "n_avg": plan.n_avg,
            "balance": bool(self.balancer.enabled), "transport": getattr(self.pool, "transport", "in-process"),
        }
        return self.setup_info

    # --- rounds ---------------------------------------------------------------------------------

    @property
    def total_rounds(self) -> int:
        return self.config.burn_in + self.config.num_rounds

    def run(self, max_rounds: int, time_left_s: float | None = None) -> Chunk:
        """Run up to `max_rounds` rounds (or until the time budget); return the draws kept meanwhile.

        A non-finite reply or draw stops the run: the chunk carries the error (worker and round) and the
        draws kept before it.
        """
        cfg, alg, pool = self.config, self.algorithm, self.pool
        deadline = None if time_left_s is None else time.perf_counter() + time_left_s
        kept: list[np.ndarray] = []
        kept_stats: dict[str, list[np.ndarray]] = {}
        end = min(self.total_rounds, self.t + max_rounds)
        error = None
        while self.t < end:
            info = RoundInfo(self.t, self.t < cfg.burn_in)
            steps = self.balancer.n
            t0 = time.perf_counter()
            try:
                replies, times, busy = pool.step(alg.messages(self.state, steps, info))
            except Exception as exc:  # a worker raised or died: stop, keep the draws, say where
                shard = _failing_shard(exc)
                who = f"worker {shard}" if shard is not None else "a worker"
                error = {"message": f"{who} failed in round {self.t}: {exc}", "worker": shard, "round": self.t}
                break
            bad = next((i for i, r in enumerate(replies) if not _finite(r)), None)
            if bad is not None:
                error = {"message": f"worker {bad} produced a non-finite state (NaN or inf) in round {self.t}",
                         "worker": bad, "round": self.t}
                break
            self.state, theta = alg.coordinator_step(self.state, replies, self.noise, info)
            if not np.all(np.isfinite(theta)):
                error = {"message": f"the coordinator's draw became non-finite (NaN or inf) in round {self.t}",
                         "worker": None, "round": self.t}
                break
            wall = time.perf_counter() - t0
            self.round_time.append(wall)
            self.compute += times
            self.idle += np.maximum(wall - busy, 0.0)
            before = steps
            self.balancer.observe(times, steps)
            if self.balancer.n is not before and not np.array_equal(self.balancer.n, before):
                self.n_history.append(self.balancer.n.copy())
            if not info.warmup and (self.t - cfg.burn_in + 1) % cfg.thin == 0:  # num_rounds // thin draws
                kept.append(theta)
                for k, v in alg.reply_stats(replies).items():
                    kept_stats.setdefault(k, []).append(v)
            self.t += 1
            if deadline is not None and time.perf_counter() >= deadline:
                break
        d = self.model.dim
        theta_arr = np.stack(kept) if kept else np.empty((0, cfg.chains, d))
        stats = {k: np.stack(v) for k, v in kept_stats.items()}
        return Chunk(theta_arr, stats, self.t, self.t >= self.total_rounds or error is not None, error)

    def stats(self) -> dict[str, Any]:
        """Per-round wall time and per-worker compute/idle time, N_i, τ_i, and the tuned ρ_i, γ_i."""
        wall = float(np.sum(self.round_time)) if self.round_time else 0.0
        plan = self.setup_info.get("plan", {})
        return {
            "rounds": self.t,
            "round_time": np.asarray(self.round_time),
            "sampling_time_s": wall,
            "worker_compute_s": self.compute.copy(),
            "worker_idle_s": self.idle.copy(),
            "idle_fraction": self.idle / wall if wall > 0 else np.zeros_like(self.idle),
            "N": self.balancer.n.copy(),
            "N_history": np.stack(self.n_history),
            "tau": self.balancer.tau.copy(),
            "rho": plan.get("rho"),
            "gamma": plan.get("gamma"),
            "M": plan.get("M"),
        }

    def close(self) -> None:
        self.pool.close()


def _failing_shard(exc: BaseException) -> int | None:
    """The shard named by a worker failure (`shards[i]` in its message, or the first shard of its process)."""
    found = re.search(r"shards\[(\d+)\]", str(exc))
    if found:
        return int(found.group(1))
    shards = getattr(exc, "shards", None)
    return shards[0] if shards else None


def _finite(obj: Any) -> bool:
    """True if every array inside a reply (nested tuples/lists) is finite."""
    if isinstance(obj, np.ndarray):
        return obj.dtype.kind not in "fc" or bool(np.isfinite(obj).all())
    if isinstance(obj, (tuple, list)):
        return all(_finite(o) for o in obj)
    if isinstance(obj, float):
        return np.isfinite(obj)
    return True


def data_spec(facts: list[dict], model: Model) -> DataSpec:
    """DataSpec from the shards' facts; mismatched feature counts are an error naming the shard."""
    widths = {f["x_shape"][1] if len(f["x_shape"]) == 2 else None for f in facts}
    for f in facts:
        if len(f["x_shape"]) != 2:
            raise ValueError(f"shards[{f['shard']}]: X must be 2-D (rows, features), got shape {f['x_shape']}")
        if f["x_shape"][1] != facts[0]["x_shape"][1]:
            raise ValueError(f"shards[{f['shard']}]: has {f['x_shape'][1]} features but shards[0] has "
                             f"{facts[0]['x_shape'][1]}: every shard must have the same columns")
        if not f["finite"]:
            raise ValueError(f"shards[{f['shard']}]: data contains NaN or inf")
    y_max = [f["y_max"] for f in facts if f["y_max"] is not None]
    n_classes = int(max(y_max)) + 1 if y_max and getattr(model, "target_kind", "") == "multiclass" else None
    p = widths.pop()
    ywidth = {f["y_shape"][1] for f in facts if len(f["y_shape"]) == 2}
    if getattr(model, "target_kind", "") == "vector" and ywidth:
        p = ywidth.pop()
    return DataSpec(n_features=int(p), n_classes=n_classes, n_rows=sum(f["n_rows"] for f in facts))
