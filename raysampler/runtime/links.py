"""What the coordinator's messages cost in round trips and link time: trips counted by phase, each worker process's
round-trip time (RTT) measured on the channel its rounds use.

A *trip* is one call from the coordinator to the shards' processes that it waits on: one round (`send` then
`collect`), or one set-up call (`describe`, `bind`, `map`, ...), whatever the number of processes it reaches at
once. Across sites far apart each trip costs at least one RTT, so the trip count is what a run's wall time is made
of on a slow link. Both pools count the same calls, so an in-process run reports the trips a Ray run would make.

The RTT of a process is what its round took beyond its own compute: the time from sending its message to its
reply arriving, less the seconds it reports having computed. The coordinator waits for the processes one after
another, so a reply that arrived while it was still waiting for another is seen late; the minimum over the recent
rounds (`LinkStats.rtt_s`) is therefore the link's estimate (as TCP's own min-RTT filter), with the median beside it.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from ..diagnostics import MANY_CHAINS

#: Recent rounds each process's RTT estimate is taken over.
RTT_WINDOW = 64


class Phase(StrEnum):
    """What a trip served: tuning and start-up, burn-in rounds, kept rounds, or a capture of the run's state."""

    SETUP = "setup"
    WARMUP = "warmup"
    SAMPLING = "sampling"
    CAPTURE = "capture"


@dataclass(frozen=True)
class Trips:
    """Round trips from the coordinator to the shards' processes, by phase (`Phase`)."""

    setup: int = 0
    warmup: int = 0
    sampling: int = 0
    capture: int = 0

    @property
    def total(self) -> int:
        return self.setup + self.warmup + self.sampling + self.capture


class TripLog:
    """Counts a pool's trips under the phase the coordinator sets (`phase`, or `during` for a while)."""

    def __init__(self) -> None:
        self.phase = Phase.SETUP
        self._counts = dict.fromkeys(Phase, 0)

    def count(self) -> None:
        self._counts[self.phase] += 1

    @contextlib.contextmanager
    def during(self, phase: Phase) -> Iterator[None]:
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def snapshot(self) -> Trips:
        c = self._counts
        return Trips(c[Phase.SETUP], c[Phase.WARMUP], c[Phase.SAMPLING], c[Phase.CAPTURE])


@dataclass(frozen=True)
class LinkStats:
    """One worker process's link to the coordinator: where it runs, the channel its rounds use ("tcp", "shm",
    "actor"), the RTT measured at set-up (seconds; None if not measured) and over the recent rounds (the minimum,
    `rtt_s`, and the median), from `samples` rounds in all."""

    shards: tuple[int, ...]
    site: str | None
    node_id: str | None
    channel: str
    setup_rtt_s: float | None
    rtt_s: float | None
    rtt_median_s: float | None
    samples: int


class RttMeter:
    """Per-process RTT samples (the recent `RTT_WINDOW` rounds) and the set-up measurement."""

    def __init__(self, processes: int) -> None:
        self._recent: list[deque[float]] = [deque(maxlen=RTT_WINDOW) for _ in range(processes)]
        self._counts = [0] * processes
        self.setup_s: list[float | None] = [None] * processes

    def observe(self, k: int, elapsed_s: float, compute_s: float) -> None:
        """Process k's round took `elapsed_s` from its send to its reply, of which it computed `compute_s`."""
        self._recent[k].append(max(elapsed_s - compute_s, 0.0))
        self._counts[k] += 1

    def links(
        self,
        groups: Sequence[Sequence[int]],
        sites: Sequence[str | None],
        nodes: Sequence[str | None],
        channels: Sequence[str],
    ) -> tuple[LinkStats, ...]:
        out = []
        for k, g in enumerate(groups):
            recent = np.asarray(self._recent[k], dtype=float)
            out.append(
                LinkStats(
                    tuple(int(i) for i in g),
                    sites[k],
                    nodes[k],
                    channels[k],
                    self.setup_s[k],
                    float(recent.min()) if len(recent) else None,
                    float(np.median(recent)) if len(recent) else None,
                    self._counts[k],
                )
            )
        return tuple(out)


#: A link whose set-up RTT is at least this is far (another site, region or continent), not a machine room's.
FAR_RTT_S = 0.010
#: The most chains `choose_chains` runs: 64 chains of ~100 draws reach the default ESS target in about 100 rounds.
CHAINS_AUTO_MAX = 64
#: Seconds of compute per element-chain of a shard's process per round (X's elements × chains × the model's
#: `work_per_element`): about what a small dense GLM's many-chain round costs, its fixed costs included; larger
#: shards cost less, so the prediction errs towards fewer chains (docs/performance.md, "Measurements behind choices
#: in the code").
ELEMENT_CHAIN_S = 1e-9
#: Bytes of memory per row-chain a process may need for a round's temporaries (linear predictors, weights).
ROW_CHAIN_BYTES = 128
#: The most memory the chains' temporaries may take in one process.
CHAINS_MEMORY_BYTES = 512 * 2**20


#: On a far link a chunk of rounds lasts at least this many RTTs: the capture of the run's state at its end (one
#: trip) then costs at most 1/CHUNK_RTTS of the rounds' trips.
CHUNK_RTTS = 25


def far_rtt(links: Sequence[LinkStats]) -> float | None:
    """The largest set-up RTT over the links to processes on other nodes (shared-memory ones are on this node)."""
    far = [link.setup_rtt_s for link in links if link.channel != "shm" and link.setup_rtt_s is not None]
    return max(far) if far else None


def choose_chains(
    base: int,
    links: Sequence[LinkStats],
    elements: Sequence[float],
    rows: Sequence[int],
    converges: bool = False,
    cap: int | None = None,
    budgeted: bool = False,
    fixed: Sequence[float] = (),
) -> ChainsChoice:
    """chains="auto": `base` chains; MANY_CHAINS where the run stops on convergence (`converges`): the many-chain
    rule (nested R-hat) then stops after about a hundred draws a chain, where split R-hat on `base` chains needs
    long ones, so the run takes fewer rounds of at most MANY_CHAINS / `base` times the cost; MANY_CHAINS too where
    the run ends at a time budget (`budgeted`): its length is the budget's, and a round of MANY_CHAINS chains draws
    MANY_CHAINS / `base` times as much for less than that times the cost wherever a round's fixed cost counts
    (docs/performance.md, "Measurements behind choices in the code"), and doubled from there while the chains'
    predicted compute stays within the round's fixed compute (`fixed[k]`: process k's work that no chain count
    changes, the model's `work_per_step` for each of its shards); then doubled while a
    round stays bound by the slowest far link (its set-up RTT at least the round's predicted compute at the doubled
    count: a round then costs at most twice the link's RTT, for twice the chains, and the run needs fewer rounds).
    Every count is bounded by the chains' temporaries in memory and by `cap` (at most CHAINS_AUTO_MAX; a count the
    floor or the link cannot reach within them is not taken). `elements[k]`: process k's element count (X's elements
    × the model's work per element), `rows[k]` its rows; `links` its links (in-process: none)."""
    top = CHAINS_AUTO_MAX if cap is None else max(1, min(cap, CHAINS_AUTO_MAX))
    rows_max = max(rows, default=0)

    def fits(k: int) -> bool:
        return k <= top and k * rows_max * ROW_CHAIN_BYTES <= CHAINS_MEMORY_BYTES

    k, why = min(base, top), ""
    if converges and k < MANY_CHAINS and fits(MANY_CHAINS):
        k = MANY_CHAINS
        why = f"the run stops on convergence: {k} chains, whose nested R-hat can stop after about 100 draws a chain; "
    elif budgeted and k < MANY_CHAINS and fits(MANY_CHAINS):
        k = MANY_CHAINS
        per_chain, floor = ELEMENT_CHAIN_S * max(elements, default=0.0), ELEMENT_CHAIN_S * max(fixed, default=0.0)
        while fits(2 * k) and 2 * k * per_chain <= floor:
            k *= 2
        why = f"the run ends at its time budget: {k} chains, which draw more in each round of it" + (
            f" (a predicted {1e3 * k * per_chain:.2f} ms of compute for them against {1e3 * floor:.2f} ms a round "
            "costs whatever its chains)"
            if k > MANY_CHAINS
            else ""
        )
        why += "; "
    rtt = far_rtt(links)
    if rtt is None or rtt < FAR_RTT_S:
        what = "no link" if rtt is None else f"the slowest link's RTT is {1e3 * rtt:.1f} ms"
        tail = f"the default {k} chains" if not why else "no more for the link"
        return ChainsChoice(k, True, f"{why}{what} (< {1e3 * FAR_RTT_S:g} ms): {tail}", rtt)
    per_chain = ELEMENT_CHAIN_S * max(elements, default=0.0)
    while fits(2 * k) and (2 * k) * per_chain <= rtt:
        k *= 2
    reason = (
        f"{why}the slowest link's RTT is {1e3 * rtt:.1f} ms against a predicted {1e3 * k * per_chain:.2f} ms of "
        f"compute a round at {k} chains: {k} chains in the same round trips" + (f" (at most {top})" if k == top else "")
    )
    return ChainsChoice(k, True, reason, rtt, k * per_chain)


#: chains in flight (pipeline="auto") are turned on where a round's measured compute is at least this share of the
#: slowest far link's RTT: two chain groups then hide up to half the compute behind the link, against a batch's fixed
#: cost paid twice. At a fifth of the RTT they gained nothing (docs/performance.md, "Chains in flight").
PIPELINE_COMPUTE_SHARE = 0.5
#: ... and at least this much compute (seconds): below it a second batch's fixed cost outweighs what is hidden.
PIPELINE_MIN_COMPUTE_S = 0.005
#: pipeline="auto" measures this many whole rounds' compute before it decides.
PIPELINE_PROBE_ROUNDS = 8
#: pipeline="auto" considers runs of at least this many chains: from 6 on the groups' cut keeps every draw's bits
#: (`chain_groups`), so the choice changes the round's wall time only, never a draw.
PIPELINE_AUTO_MIN_CHAINS = 6
#: Chain-group cuts fall on multiples of these, largest first: BLAS kernels take the chains in panels of at most 8, so
#: a chain keeps its place within its panel and rounds as in a whole round (`chain_groups`).
CHAIN_ALIGN = (8, 4)


def chain_groups(chains: int) -> list[tuple[int, int]]:
    """A pipelined run's two chain groups [0, cut) and [cut, chains): the cut nearest half the chains on a multiple of
    8 (from 16 chains; else 4) with at least two chains in each group (a lone chain's products take BLAS's
    matrix-vector path), so each chain sits at the same place in its BLAS panel as in a whole round and the draws
    equal an unpipelined run's bit for bit (tests/runtime/test_pipeline.py); below 6 chains, half."""
    aligns = [a for a in CHAIN_ALIGN if chains >= 2 * a] or [a for a in CHAIN_ALIGN[-1:] if chains >= a + 2]
    if not aligns:
        cut = (chains + 1) // 2
        return [(0, cut), (cut, chains)]
    align = aligns[0]
    cut = max(align, min(align * round(chains / (2 * align)), align * ((chains - 2) // align)))
    return [(0, cut), (cut, chains)]


@dataclass(frozen=True)
class PipelineChoice:
    """Whether a round runs as two chain groups in flight (`Coordinator._rounds_in_halves`) and why: as asked, or
    pipeline="auto"'s choice from the slowest far link's RTT against a round's measured compute (`pending` until
    PIPELINE_PROBE_ROUNDS rounds have been measured: `choose_pipeline`, then `decide_pipeline`)."""

    on: bool
    auto: bool
    reason: str
    groups: tuple[tuple[int, int], ...] = ()
    pending: bool = False
    compute_s: float | None = None


def choose_pipeline(asked: bool | None, chains: int, rtt_s: float | None, refusal: str | None) -> PipelineChoice:
    """The set-up's choice. As asked (`asked` True or False; True where `refusal`, why the run cannot split its
    chains, is None: the caller raises otherwise), or for pipeline="auto" (`asked` None): off where the run cannot
    split its chains, has fewer than PIPELINE_AUTO_MIN_CHAINS, or no link of FAR_RTT_S or more; else pending, decided
    from the first rounds' measured compute (`decide_pipeline`)."""
    groups = tuple(chain_groups(chains)) if chains >= 2 else ()
    if asked is not None:
        return PipelineChoice(asked, False, "as asked", groups if asked else ())
    if refusal is not None:
        return PipelineChoice(False, True, f"off: {refusal}")
    if chains < PIPELINE_AUTO_MIN_CHAINS:
        return PipelineChoice(False, True, f"off: {chains} chains (< {PIPELINE_AUTO_MIN_CHAINS})")
    if rtt_s is None or rtt_s < FAR_RTT_S:
        what = "no far link" if rtt_s is None else f"the slowest link's RTT is {1e3 * rtt_s:.1f} ms"
        return PipelineChoice(False, True, f"off: {what} (< {1e3 * FAR_RTT_S:g} ms)")
    return PipelineChoice(
        False, True, f"pending: decided from the first {PIPELINE_PROBE_ROUNDS} rounds' compute", groups, pending=True
    )


def decide_pipeline(pending: PipelineChoice, rtt_s: float, compute_s: float) -> PipelineChoice:
    """pipeline="auto" after its probe rounds: two chain groups in flight where a round's measured compute
    `compute_s` (the busiest process's, seconds; median over the probe) is at least PIPELINE_COMPUTE_SHARE of the
    slowest far link's RTT and PIPELINE_MIN_COMPUTE_S: while one group's messages cross the link the sites step the
    other, so a round costs about max(RTT + compute / 2, compute) instead of RTT + compute."""
    need = max(PIPELINE_MIN_COMPUTE_S, PIPELINE_COMPUTE_SHARE * rtt_s)
    what = f"a round's measured compute {1e3 * compute_s:.2f} ms against the slowest link's RTT {1e3 * rtt_s:.1f} ms"
    if compute_s < need:
        return PipelineChoice(False, True, f"off: {what} (below {1e3 * need:.2f} ms: nothing worth hiding)",
                              compute_s=compute_s)  # fmt: skip
    sizes = " and ".join(str(b - a) for a, b in pending.groups)
    reason = f"on: {what}: two chain groups ({sizes}) in flight"
    return PipelineChoice(True, True, reason, pending.groups, compute_s=compute_s)


@dataclass(frozen=True)
class ChainsChoice:
    """The run's chain count and the reason for it: as asked, or chains="auto"'s choice (`choose_chains`) from the
    slowest far link's RTT (seconds, at set-up) against a round's predicted compute at that many chains (seconds)."""

    chains: int
    auto: bool
    reason: str
    rtt_s: float | None = None
    compute_s: float | None = None
