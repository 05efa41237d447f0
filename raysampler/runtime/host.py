"""ShardHost: owns some shards, their data, random streams and algorithm states; runs worker functions on them.

The same class serves the in-process executor and, wrapped in a Ray actor, the distributed one: data is loaded
where the host lives (from a file path the host reads itself, or from the object store), on first use, so a
missing or unreadable file is reported as the worker's own failure (shard, path, node) and a restarted actor
reloads its shards.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..algorithms.base import Algorithm
from ..errors import Failure, FailureKind, WorkerFailed
from ..grants import AccessRefused
from ..models.contract import Model
from ..shards import DataTable, Shard
from ..streams import ChainNoise, NoiseState
from .batches import ShardBatches, join_blocks
from .contracts import NO_INIT, ShardFacts, ShardState, StateInit

if TYPE_CHECKING:  # the privacy extra: imported where a run asks for secure sums
    from ..privacy.sealing import SiteSeals
    from ..privacy.site import SecureSite


@dataclass(frozen=True)
class ShardSource:
    """Where shard `shard`'s data comes from: a `Shard` (arrays, or a path the worker reads on its own node), an
    (X, y) pair, or a Ray ObjectRef to an (X, y) pair; with its site and column names when known."""

    shard: int
    data: Any
    site: str | None = None
    columns: tuple[str, ...] | None = None
    index: np.ndarray | None = None  # which rows of the original data the shard holds (Shard.index), if known
    elements: int | None = None  # X's size where known without reading anything (in-memory data): sizes processes

    def __post_init__(self) -> None:
        if self.elements is None:
            X = self.data.X if isinstance(self.data, Shard) else self.data[0] if isinstance(self.data, tuple) else None
            if X is not None:
                object.__setattr__(self, "elements", int(np.size(X)))


def load_source(source: Any) -> DataTable:
    """X, y (and column names and text labels when known) from a Shard (in memory or a file path), a `DataTable`,
    an (X, y) pair, or a Ray ObjectRef to one of these."""
    if isinstance(source, Shard):
        return source.read()
    if type(source).__name__ == "ObjectRef":
        import ray

        source = ray.get(source)
    if isinstance(source, DataTable):
        return source
    X, y = source
    return DataTable(X, y, None)


def _where() -> tuple[str | None, str, int]:
    """(Ray node id or None, hostname, pid) of this process."""
    node_id = None
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        node_id = ray.get_runtime_context().get_node_id()
    return node_id, socket.gethostname(), os.getpid()


class ShardHost:
    """Shards `sources` with their data; worker states and noise streams are created by `init_states`."""

    def __init__(
        self,
        sources: Sequence[ShardSource],
        model: Model,
        algorithm: Algorithm | None,
        seed: int,
        chains: int,
        secure: bool = False,
        keyed: bool = False,
    ) -> None:
        self.sources = list(sources)
        self.shard_ids = [s.shard for s in self.sources]
        self.model = model
        self.algorithm = algorithm
        self.seed, self.chains = seed, chains
        self.node_id, self.hostname, self.pid = _where()
        self._raw: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._bound: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._columns: list[tuple[str, ...] | None] = [s.columns for s in self.sources]
        self._levels: list[dict[str, tuple[str, ...]] | None] = [None] * len(self.sources)
        self.states: list[Any] = []
        self.noises: list[ChainNoise] = []
        self.slowdown = {i: 1.0 for i in self.shard_ids}
        self._channel: Any = None
        self._batches: ShardBatches | None = None  # made at the first round sent as one message for all shards
        #: a secure-sums run: this process's shards' key pairs, mask streams and seal (`privacy.site`); else None
        self.secure: SecureSite | None = None
        if secure:
            from ..privacy.site import SecureSite  # the privacy extra: only where a run asks for secure sums

            self.secure = SecureSite(self.shard_ids, [s.site for s in self.sources])
        #: keyed streams (`RunOptions.keyed_noise`): the shards' stream seeds and the seal on their captured states
        self.seals: SiteSeals | None = None
        if keyed or secure:
            from ..privacy.sealing import SiteSeals  # the privacy extra: only where a run asks for keyed streams

            self.seals = SiteSeals(self.shard_ids, [s.site for s in self.sources])

    def _failure(self, j: int, kind: FailureKind, exc: BaseException) -> WorkerFailed:
        """The shard's failure for `exc`; an error raised in a user's model code names the model's method and
        carries the user's frames only (`user_model_frames`)."""
        src = self.sources[j]
        what, tb = f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))
        user = user_model_frames(exc)
        if user is not None:
            method, frames = user
            what, tb = f"the model's {method}() raised {what}", "".join(traceback.format_list(frames)) + what + "\n"
        return WorkerFailed(Failure(kind, what, shard=src.shard, site=src.site, node_id=self.node_id, traceback=tb))

    def _per_shard(self, fn: Callable[[int, np.ndarray, np.ndarray], Any]) -> list[Any]:
        """fn(j, X_j, y_j) for each of this host's shards; an exception raised in a user's model code becomes the
        shard's WorkerFailed naming the method (others propagate unchanged)."""
        out = []
        for j, (X, y) in enumerate(self.data):
            try:
                out.append(fn(j, X, y))
            except Exception as exc:
                if user_model_frames(exc) is None:
                    raise
                raise self._failure(j, FailureKind.WORKER_ERROR, exc) from exc
        return out

    @property
    def data(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The shards' (X, y) as the bound model reads them (`Model.shard_data`), or as loaded before `bind`."""
        return self._bound if self._bound is not None else self.raw

    @property
    def raw(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The shards' (X, y) as stored, loaded on first use; a load error is this worker's failure, naming the host."""
        if self._raw is None:
            data = []
            for j, src in enumerate(self.sources):
                try:
                    table = load_source(src.data)
                    data.append((table.X, table.y))
                    if self._columns[j] is None:
                        self._columns[j] = table.columns
                    self._levels[j] = table.levels
                except AccessRefused as exc:  # outside the tenant's grants: the rule only, nothing about the file
                    raise WorkerFailed(
                        Failure(FailureKind.ACCESS, str(exc), shard=src.shard, site=src.site, node_id=self.node_id)
                    ) from None
                except Exception as exc:
                    msg = f"cannot load its data on host {self.hostname}: {type(exc).__name__}: {exc}"
                    raise WorkerFailed(
                        Failure(
                            FailureKind.WORKER_ERROR,
                            msg,
                            shard=src.shard,
                            site=src.site,
                            node_id=self.node_id,
                            traceback=traceback.format_exc(),
                        )
                    ) from None
            self._raw = data
        return self._raw

    def ping(self) -> int:
        """This worker's process id (answers once the actor is up, e.g. after Ray restarted it)."""
        return self.pid

    def describe(self) -> list[ShardFacts]:
        """Shape, label and column facts of each shard and where it lives (loads the data if not yet loaded); in a
        secure-sums run, with a fresh public key per shard (the key agreement's first half: `privacy.site`)."""
        out = []
        publics = self.secure.new_keys() if self.secure is not None else [None] * len(self.sources)
        for src, (X, y), columns, levels, pk in zip(self.sources, self.raw, self._columns, self._levels, publics):
            X, y = np.asarray(X), np.asarray(y)
            finite_y = y.size == 0 or bool(np.all(np.isfinite(y))) if y.dtype.kind in "fc" else True
            y_max = float(np.max(y)) if y.size and y.dtype.kind in "iuf" and np.all(np.isfinite(y)) else None
            out.append(
                ShardFacts(
                    shard=src.shard,
                    n_rows=int(X.shape[0]) if X.ndim else 0,
                    x_shape=tuple(X.shape),
                    y_shape=tuple(y.shape),
                    finite=bool(np.all(np.isfinite(X))) and finite_y,
                    y_max=y_max,
                    columns=tuple(columns) if columns is not None else None,
                    levels=levels,
                    site=src.site,
                    path=getattr(src.data, "path", None),
                    node_id=self.node_id,
                    hostname=self.hostname,
                    pid=self.pid,
                    public_key=pk,
                )
            )
        return out

    def bind(self, model: Model) -> None:
        """Adopt the bound model: each shard's stored (X, y) becomes what the model reads (`Model.shard_data`, e.g.
        its rows of an offset array), then is checked against the model (errors name the shard)."""
        bound = []
        for src, (X, y) in zip(self.sources, self.raw):
            try:
                Xb, yb = model.shard_data(np.asarray(X), np.asarray(y), src.index)
            except ValueError as exc:
                raise ValueError(f"shards[{src.shard}]: {exc}") from None
            model.validate(Xb, yb, argname=f"shards[{src.shard}]")
            bound.append((Xb, yb))
        if self._batches is not None:  # the per-shard states must be current before the batches go
            self._batches.sync()
        self._bound, self.model = bound, model
        self._batches = None

    def bind_facts(self, model: Model, fns: Sequence[Callable[..., Any]]) -> list[list[Any]]:
        """`bind(model)`, then each of `fns` on every shard under it: [[fn(model, X_j, y_j) for each shard] for fn]
        (the shards' static facts the set-up reads, such as `Model.gram`), in the same call."""
        self.bind(model)

        def on_every_shard(fn: Callable[..., Any]) -> list[Any]:
            return self._per_shard(lambda j, X, y: fn(self.model, X, y))

        return [on_every_shard(fn) for fn in fns]

    def gram(self) -> list[np.ndarray | None]:
        """Each shard's contribution to the pooled matrix the bound model's properness check reads (`Model.gram`)."""
        return self._per_shard(lambda j, X, y: self.model.gram(X, y))

    def map(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], model: Model | None = None) -> list[Any]:
        """fn(model, X_j, y_j, *args[j]) for each shard, after binding `model` if one is given (in the same call)."""
        if model is not None:
            self.bind(model)
        return self._per_shard(lambda j, X, y: fn(self.model, X, y, *args[j]))

    def _width(self, X: np.ndarray, y: np.ndarray) -> int:
        """The width of a shard's worker state: d, plus the shard's local parameters (group effects) if any."""
        d = int(self.model.dim)
        has_local = getattr(self.model, "has_local_params", None)
        return d + int(self.model.local_dim(X, y)) if has_local is not None and has_local() else d

    def _new_noises(self) -> list[ChainNoise]:
        """Shard i's streams, sized to its worker state (d + l_i with local parameters; the coordinator's stays d),
        from the run's seed, or with keyed streams from the seed and the site's secret (`SiteSeals.noise_seed`)."""
        seeds = [
            self.seed if self.seals is None else self.seals.noise_seed(j, self.seed) for j in range(len(self.data))
        ]
        return [
            ChainNoise(seed, self.chains, role=i + 1, dim=self._width(X, y))
            for seed, i, (X, y) in zip(seeds, self.shard_ids, self.data)
        ]

    def init_states(self, payloads: Sequence[Any], init: StateInit = NO_INIT) -> list[float] | None:
        """Create each shard's algorithm state from its payload (and fresh random streams), with what `init` asks
        in the same call (`StateInit`); returns the seconds per shard of `init.calibrate`, else None."""
        if init.model is not None:
            self.bind(init.model)
        self._agree(init.peers)
        if init.chains is not None:  # chains="auto" chose another count at set-up
            self.chains = int(init.chains)
        self._init_states(payloads)
        if init.slowdown:
            self.set_slowdown(init.slowdown)
        return self.calibrate() if init.calibrate else None

    def _init_states(self, payloads: Sequence[Any]) -> None:
        assert self.algorithm is not None
        self.noises = self._new_noises()
        self.states = []
        self._batches = None
        for j, (i, p, (X, y)) in enumerate(zip(self.shard_ids, payloads, self.data)):
            try:
                self.states.append(self.algorithm.worker_init(p, self.model, X, y))
            except Exception as exc:
                if user_model_frames(exc) is not None:
                    raise self._failure(j, FailureKind.WORKER_ERROR, exc) from exc
                if isinstance(exc, (ValueError, FloatingPointError)):
                    raise type(exc)(f"shards[{i}]: {exc}") from None
                raise

    def _agree(self, peers: Sequence[bytes] | None) -> None:
        """A secure-sums run's key agreement, second half (`privacy.site.SecureSite.agree`); refused without keys."""
        if self.secure is None:
            return
        if peers is None:
            raise ValueError("a secure-sums run's workers need every shard's public key (peers)")
        self.secure.agree(peers)

    def capture(self) -> list[ShardState]:
        """Each shard's algorithm state and random-stream position; with keyed streams both sealed together under the
        site's key (`privacy.sealing`: the coordinator and the checkpoint never hold z_i, nor where a stream stands,
        in the clear)."""
        if self._batches is not None:
            self._batches.sync()
        if self.seals is not None:
            seals = self.seals
            return [
                ShardState(i, seals.seal(j, (s, n.capture())), None)
                for j, (i, s, n) in enumerate(zip(self.shard_ids, self.states, self.noises))
            ]
        return [ShardState(i, s, n.capture()) for i, s, n in zip(self.shard_ids, self.states, self.noises)]

    def restore(self, states: Sequence[ShardState], peers: Sequence[bytes] | None = None) -> None:
        """Continue from captured shard states (the model must be bound); a secure-sums run opens its sealed states
        and agrees new pairwise keys from `peers` (the public keys of the `describe` that began the resume)."""
        by_shard = {s.shard: s for s in states}
        missing = [i for i in self.shard_ids if i not in by_shard]
        if missing:
            raise ValueError(f"no captured state for shards {missing}")
        opened: list[tuple[Any, NoiseState]] = []
        for j, i in enumerate(self.shard_ids):
            st = by_shard[i]
            if self.seals is not None:
                opened.append(self.seals.unseal(j, st.algorithm))
            elif st.noise is None:
                raise ValueError(f"shards[{i}]: its state is sealed (a run with keyed streams): resume it as one")
            else:
                opened.append((st.algorithm, st.noise))
        self.chains = len(opened[0][1].normal) if opened else self.chains  # as captured
        self.noises = self._new_noises()
        self.states = []
        self._batches = None
        for (state, captured), noise in zip(opened, self.noises):
            noise.restore(captured)
            self.states.append(state)
        self._agree(peers)

    def calibrate(self, repeats: int = 5) -> list[float]:
        """CPU seconds per model evaluation (U_i and ∇U_i for the K chains) on each shard, slowdown included: the
        τ_i estimate taken before sampling (median of `repeats`). Touches no chain state or random stream."""

        def seconds(j: int, X: np.ndarray, y: np.ndarray) -> float:
            x = np.zeros((self.chains, self._width(X, y)))
            times = []
            for _ in range(repeats):
                t0 = time.thread_time()
                self.model.potential_and_grad(X, y, x)
                times.append(time.thread_time() - t0)
            return float(np.median(times)) * self.slowdown[self.shard_ids[j]]

        return self._per_shard(seconds)

    def set_slowdown(self, factors: dict[int, float]) -> None:
        """Test hook: shard i's local work takes `factors[i]` times as long (the host computes for the difference,
        as a slower machine would)."""
        self.slowdown.update({int(k): float(v) for k, v in factors.items() if int(k) in self.slowdown})
        if self._batches is not None:  # a slowed shard steps alone
            self._batches.sync()
            self._batches = None

    def open_channel(self, kind: str = "tcp", spin_s: float = 0.0) -> tuple[str, Any, bytes]:
        """Serve `step` over a direct channel (the round loop's fast path): "shm" (shared memory, for a coordinator
        on this node, its reader watching `spin_s` before sleeping; falls back to TCP where the platform lacks it)
        or "tcp". Returns (kind, address, token)."""
        import ray

        from . import shm_channel
        from .channel import ChannelServer

        if kind == "shm" and shm_channel.supported():
            self._channel = shm_channel.ShmChannelServer(self.step, label=f"shards-{self.shard_ids}", spin_s=spin_s)
            return "shm", self._channel.address, self._channel.token
        self._channel = ChannelServer(self.step, ray.util.get_node_ip_address())
        return "tcp", self._channel.address, self._channel.token

    def step(self, messages: Any) -> tuple[Any, Any]:
        """One local step on every shard: (replies, CPU seconds of work per shard). `messages` is a list, one per
        shard, or one message for all shards (an algorithm that steps shards as one batch): then the replies come
        as one block over this host's shards (`batches.join_blocks`). Raises WorkerFailed naming the shard. Work is
        timed in this thread's CPU time, so other processes competing for the core (noise on a shared machine) do
        not make a worker look slow; a slower machine or a bigger shard does."""
        assert self.algorithm is not None
        if not isinstance(messages, list):
            block, seconds = self._step_batches(messages)
            return (self.secure.mask(block) if self.secure is not None else block), seconds
        if self._batches is not None:  # the per-shard states must be current
            self._batches.sync()
            self._batches = None
        replies, times = [], []
        for j, (msg, (X, y)) in enumerate(zip(messages, self.data)):
            t0 = time.thread_time()
            try:
                self.states[j], reply = self.algorithm.worker_step(
                    self.states[j], msg, self.model, X, y, self.noises[j]
                )
            except Exception as exc:
                raise self._failure(j, FailureKind.WORKER_ERROR, exc) from exc
            factor = self.slowdown[self.shard_ids[j]]
            if factor != 1.0:
                _compute_for((factor - 1.0) * (time.thread_time() - t0))
            times.append(time.thread_time() - t0)
            replies.append(reply)
        if self.secure is not None:
            replies = self.secure.mask(replies)
        return replies, times

    def _step_batches(self, message: Any) -> tuple[Any, np.ndarray]:
        """Every shard stepped in batches (`batches.ShardBatches`): (one block of replies over this host's shards,
        seconds per shard: a batch's CPU time shared by its shards in proportion to their rows)."""
        assert self.algorithm is not None
        if self._batches is None:
            data = self.data
            before = list(data)
            self._batches = ShardBatches(
                self.algorithm,
                self.shard_ids,
                data,
                self.states,
                self.noises,
                lambda j: self.slowdown[self.shard_ids[j]] != 1.0,
            )
            if self._raw is not None and self._raw is not data:  # the stacked data replace the loaded arrays too
                for j, (old, new) in enumerate(zip(before, data)):
                    if new is not old and self._raw[j][0] is old[0] and self._raw[j][1] is old[1]:
                        self._raw[j] = new
        batches = self._batches
        parts = []
        times = np.empty(len(self.shard_ids))
        for batch in batches.batches(message):
            try:
                reply, seconds = batches.step(batch, message, self.model)
            except Exception as exc:
                found = batches.culprit(batch, message, self.model)
                j, cause = found if found is not None else (batch.positions[0], exc)
                raise self._failure(j, FailureKind.WORKER_ERROR, cause) from cause
            if len(batch.positions) == 1:
                factor = self.slowdown[self.shard_ids[batch.positions[0]]]
                if factor != 1.0:
                    t0 = time.thread_time()
                    _compute_for((factor - 1.0) * seconds)
                    seconds += time.thread_time() - t0
            times[batch.where] = seconds * batch.share
            parts.append((batch.where, reply))
        return join_blocks(parts, len(self.shard_ids)), times


def _compute_for(seconds: float) -> None:
    """Busy this thread for `seconds` of CPU time (the slowdown hook: a slower machine computes, it does not sleep)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # raysampler/
#: the contract's defaults and ForeignModel
_ADAPTERS = tuple(os.path.join(_PACKAGE_DIR, "models", f) for f in ("contract.py", "foreign.py"))


def user_model_frames(exc: BaseException) -> tuple[str, list[traceback.FrameSummary]] | None:
    """If `exc` was raised in a user's model code (a model class defined outside raysampler: a subclass of rs.Model,
    a foreign model, a registered package's family), (the model method raysampler called, the frames from that call
    on); else None. The call is the first frame after the last raysampler frame (the contract's default methods and
    adapter aside) whose `self` is such a model."""
    tbs = []
    tb = exc.__traceback__
    while tb is not None:
        tbs.append(tb)
        tb = tb.tb_next
    last = max((k for k, t in enumerate(tbs) if _ours(t.tb_frame.f_code.co_filename)), default=None)
    if last is None:
        return None
    for k in range(last + 1, len(tbs)):
        frame = tbs[k].tb_frame
        if os.path.abspath(frame.f_code.co_filename) in _ADAPTERS:
            continue
        owner = frame.f_locals.get("self")
        if owner is None or not hasattr(owner, "potential") or type(owner).__module__.startswith("raysampler."):
            return None
        summary = traceback.extract_tb(tbs[k])
        return frame.f_code.co_name, list(summary)
    return None


def _ours(filename: str) -> bool:
    """A frame of raysampler itself (not the contract's adapter code, which calls into the user's methods)."""
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE_DIR + os.sep) and path not in _ADAPTERS
