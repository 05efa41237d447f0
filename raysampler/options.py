"""How long a run samples and what it keeps (`RunOptions`), and where and how it executes (`ExecutionOptions`): two
validated values used by `rs.sample`, `rs.resume` and the service to build a `Run`.

`num_rounds` is a number of rounds after burn-in, or "auto": sample until the draws' minimum bulk ESS reaches
`target_ess` and their maximum rank-normalised R-hat is below `max_rhat` (checked as the run goes), or until
`max_rounds` rounds after burn-in (or the time budget) are spent.
"""

from __future__ import annotations

import math
import numbers
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .enums import Balance, Executor, TransportKind, parse
from .errors import ArgumentError

if TYPE_CHECKING:  # pydantic-settings loads only when a run starts: `import raysampler` (and the CLI) stays light
    from .events import RunEvent
    from .settings import EngineSettings

AUTO: Literal["auto"] = "auto"
#: Chains when none are asked for and the links are fast (`chains="auto"` off a slow link).
DEFAULT_CHAINS = 4
#: Defaults of a run that stops on convergence (`num_rounds="auto"`): its warm-up ends when the chains are warm
#: (`diagnostics.warm`, checked as it goes), at the latest after AUTO_BURN_IN rounds.
AUTO_BURN_IN = 1000
AUTO_MAX_ROUNDS = 100_000
DEFAULT_TARGET_ESS = 400.0
DEFAULT_MAX_RHAT = 1.01


def default_burn_in(num_rounds: int | Literal["auto"]) -> int | Literal["auto"]:
    """Burn-in when none is given: max(100, num_rounds // 10) rounds, or "auto" for a convergence-stopped run."""
    return AUTO if num_rounds == AUTO else max(100, int(num_rounds) // 10)


@dataclass(frozen=True)
class RunOptions:
    """The run's length and bookkeeping, checked once (errors are `ArgumentError`s whose path names the argument).

    `num_rounds`: rounds after burn-in, or "auto" (then `max_rounds` bounds them). `burn_in` rounds come first and
    are discarded; "auto" (the default with num_rounds="auto") ends the warm-up once the chains are warm
    (`diagnostics.warm`, checked at fixed round counts), at most AUTO_BURN_IN rounds (`burn_in` then holds that cap
    and `warmup_auto` is True). `chains`: a number, or "auto": DEFAULT_CHAINS, or more where a round is bound by the
    link to the sites rather than by their compute, and MANY_CHAINS (16) in a run that stops on convergence, whose
    many-chain rule (nested R-hat) stops after far fewer rounds, except in the DP mode, whose budget the chains share
    (chosen at set-up: `SetupInfo.chains` says how many and why; the field then holds DEFAULT_CHAINS and
    `chains_auto` is True); `max_chains` bounds that choice (with chains="auto" only). Each chain keeps the last round
    of every block of `thin`. `time_budget_s` stops cleanly.
    `pipeline`: run each round as two halves, one per group of chains (chains in flight), so that the sites step one
    group while the other's messages cross the link and the coordinator updates it. "auto" (the default): on where
    the slowest far link's RTT is of the order of a round's compute (chosen at set-up: `SetupInfo.pipeline` says
    whether and why), else off. Each chain draws the same random numbers, and the groups are cut on a multiple of
    the BLAS kernels' chain panel (`links.chain_groups`), so from 6 chains on the draws equal an unpipelined run's
    bit for bit; with 2-5 chains the halves round differently in the last bits.
    `secure_sums`: the sites send their terms of the coordinator's sums masked (pairwise masks that cancel in the
    sum, fixed point mod 2⁶⁴: `privacy.secure_sum`), so the coordinator reads only the sums over sites; needs the
    "privacy" extra and an algorithm that needs only sums (DG-LMC, FALD, QLSD, ULA): docs/privacy.md.
    `keyed_noise`: the workers' random streams come from the seed *and their site's secret* (`privacy.sealing`), and
    their captured states (stream positions included) are sealed under it, so nobody who knows the seed alone — the
    coordinator, whoever reads the draws — can recompute a site's proposals or noise. None (default): on exactly
    where it protects something, with `secure_sums` or the DP mode; True in a plain run gives the draws such a run
    gives with the same site secrets (a reproduction, or a plain run to compare with); False with `secure_sums` or
    the DP mode is refused.
    """

    chains: int | Literal["auto"] = AUTO
    num_rounds: int | Literal["auto"] = 1000
    burn_in: int | Literal["auto"] | None = None
    thin: int = 1
    seed: int = 0
    time_budget_s: float | None = None
    target_ess: float = DEFAULT_TARGET_ESS
    max_rhat: float = DEFAULT_MAX_RHAT
    max_rounds: int | None = None
    pipeline: bool | Literal["auto"] = AUTO
    secure_sums: bool = False
    keyed_noise: bool | None = None
    max_chains: int | None = None
    chains_auto: bool = field(default=False, init=False)
    warmup_auto: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.chains == AUTO:
            object.__setattr__(self, "chains", DEFAULT_CHAINS)
            object.__setattr__(self, "chains_auto", True)
        object.__setattr__(self, "chains", _chains(self.chains))
        if self.max_chains is not None:
            object.__setattr__(self, "max_chains", positive_int(self.max_chains, "max_chains"))
            if not self.chains_auto:
                raise ArgumentError(
                    ("max_chains",),
                    f"max_chains only applies with chains='auto' (chains={self.chains} is the count: no cap to apply)",
                )
        if self.pipeline != AUTO and not isinstance(self.pipeline, bool):
            raise ArgumentError(("pipeline",), f'pipeline must be True, False or "auto", got {self.pipeline!r}')
        if not isinstance(self.secure_sums, bool):
            raise ArgumentError(("secure_sums",), f"secure_sums must be True or False, got {self.secure_sums!r}")
        if self.keyed_noise is not None and not isinstance(self.keyed_noise, bool):
            raise ArgumentError(("keyed_noise",), f"keyed_noise must be True, False or None, got {self.keyed_noise!r}")
        if self.keyed_noise is False and self.secure_sums:
            raise ArgumentError(
                ("keyed_noise",),
                "keyed_noise=False with secure_sums=True: the coordinator, which knows the seed, could recompute each "
                "site's proposals and so its z_i; secure sums need the site-keyed streams",
            )
        if self.num_rounds != AUTO:
            object.__setattr__(self, "num_rounds", positive_int(self.num_rounds, "num_rounds"))
        burn = default_burn_in(self.num_rounds) if self.burn_in is None else self.burn_in
        if burn == AUTO:
            object.__setattr__(self, "warmup_auto", True)
            burn = AUTO_BURN_IN
        elif isinstance(burn, str):
            raise ArgumentError(("burn_in",), f"burn_in must be a non-negative integer or 'auto', got {burn!r}")
        object.__setattr__(self, "burn_in", nonnegative_int(burn, "burn_in"))
        object.__setattr__(self, "thin", positive_int(self.thin, "thin"))
        object.__setattr__(self, "seed", nonnegative_int(self.seed, "seed"))
        if self.time_budget_s is not None and not _positive_real(self.time_budget_s):
            raise ArgumentError(
                ("time_budget_s",),
                f"time_budget_s must be a positive number of seconds or None, got {self.time_budget_s!r}",
            )
        if not _positive_real(self.target_ess):
            raise ArgumentError(("target_ess",), f"target_ess must be a positive number, got {self.target_ess!r}")
        if not (_positive_real(self.max_rhat) and self.max_rhat > 1.0):
            raise ArgumentError(("max_rhat",), f"max_rhat must be a number greater than 1, got {self.max_rhat!r}")
        if self.max_rounds is not None:
            object.__setattr__(self, "max_rounds", positive_int(self.max_rounds, "max_rounds"))
            if self.num_rounds != AUTO:
                raise ArgumentError(
                    ("max_rounds",),
                    "max_rounds only applies with num_rounds='auto' (otherwise num_rounds is the length)",
                )

    @property
    def chain_count(self) -> int:
        """The chains as a number (with chains="auto", the default count the set-up may raise)."""
        return int(self.chains)

    @property
    def auto(self) -> bool:
        """True if the run stops on convergence (num_rounds="auto")."""
        return self.num_rounds == AUTO

    @property
    def sampling_rounds(self) -> int:
        """Rounds after burn-in at most: num_rounds, or max_rounds (default AUTO_MAX_ROUNDS) for "auto"."""
        if self.auto:
            return self.max_rounds if self.max_rounds is not None else AUTO_MAX_ROUNDS
        return int(self.num_rounds)

    @property
    def total_rounds(self) -> int:
        """Burn-in plus the most rounds after it."""
        return int(self.burn_in or 0) + self.sampling_rounds

    @property
    def max_draws(self) -> int:
        """Draws per chain kept if the run goes to its last round."""
        return self.sampling_rounds // self.thin


@dataclass(frozen=True)
class ExecutionOptions:
    """Where and how a run executes, checked once; none of it changes the draws.

    `executor`: the coordinator in this process ("local") or as a Ray actor ("ray"). On Ray, `transport` picks how
    round messages travel ("socket": direct channels, "actor": Ray actor calls), `max_actors` caps the worker actors
    (default: one per CPU) and `balance` ("auto", True/False, or a `Balance`) whether local step counts N_i follow
    measured worker speeds ("auto" only on Ray and only when the speeds differ). `keep_draws=False`: `Run.chunks()`
    only yields draws, the caller stores them. `checkpoint_dir` (a path or an object-storage URI) stores every chunk
    of draws with its checkpoint; a service replica names its files by its lease epoch (`checkpoint_epoch`, 0: the
    plain layout) and refuses a write once its lease may be gone (`checkpoint_fence`, called before each write).
    `engine`: the RAYSAMPLER_* engine settings (default: read from the environment when the run starts).
    `on_event` hears of each lost process and resume (`RunEvent`). `cancel`, once set, stops the run's set-up (the
    processes starting, tuning) where it is: the run's constructor raises `RunCancelled` (sampling itself stops at
    the caller's next chunk). `_slowdown` is a test hook (shard -> factor by which its local work is slowed).
    """

    executor: Executor = Executor.RAY
    transport: TransportKind = TransportKind.SOCKET
    balance: Balance = Balance.AUTO
    max_actors: int | None = None
    keep_draws: bool = True
    checkpoint_dir: str | os.PathLike | None = None
    checkpoint_epoch: int = 0
    checkpoint_fence: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    engine: EngineSettings | None = None
    on_event: Callable[[RunEvent], None] | None = field(default=None, compare=False)
    cancel: threading.Event | None = field(default=None, compare=False, repr=False)
    _slowdown: Mapping[int, float] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "executor", parse(Executor, self.executor, "executor"))
        object.__setattr__(self, "transport", parse(TransportKind, self.transport, "transport"))
        object.__setattr__(self, "balance", Balance.of(self.balance))
        if self.max_actors is not None:
            object.__setattr__(self, "max_actors", positive_int(self.max_actors, "max_actors"))
        object.__setattr__(self, "keep_draws", bool(self.keep_draws))
        if self.on_event is not None and not callable(self.on_event):
            raise TypeError(f"on_event must be callable (it receives each RunEvent), got {self.on_event!r}")

    @property
    def balance_policy(self) -> Balance:
        """The policy the coordinator follows: balancing from timings only pays where workers run in parallel, so
        "auto" means never off Ray (equal workers keep a fixed, reproducible schedule either way)."""
        if self.balance == Balance.AUTO and self.executor != Executor.RAY:
            return Balance.NEVER
        return self.balance


def positive_int(value: Any, name: str) -> int:
    """`value` as an int ≥ 1, else ArgumentError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ArgumentError((name,), f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _chains(value: Any) -> int:
    if isinstance(value, str):
        raise ArgumentError(("chains",), f"chains must be a positive integer or 'auto', got {value!r}")
    return positive_int(value, "chains")


def nonnegative_int(value: Any, name: str) -> int:
    """`value` as an int ≥ 0, else ArgumentError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ArgumentError((name,), f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _positive_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) and float(value) > 0
