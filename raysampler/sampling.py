"""`rs.sample` and `rs.resume`: validate the request, start a `Run` (`raysampler.run`), collect its draws as they
come, and hand back the `Result`.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from .algorithms import get_algorithm
from .checkpoints import Manifest, RunDirectory, as_run_directory
from .enums import Balance, Executor, TransportKind
from .errors import SamplingError
from .models.foreign import as_model
from .options import DEFAULT_MAX_RHAT, DEFAULT_TARGET_ESS, ExecutionOptions, RunOptions
from .privacy.dp import with_privacy
from .result import Result
from .run import CHECK_GROWTH, FIRST_CHECK_DRAWS, RECOVERABLE, Run, keyed_streams
from .runtime.contracts import Chunk
from .shards import ShardSet, as_shard_set

__all__ = ["CHECK_GROWTH", "FIRST_CHECK_DRAWS", "RECOVERABLE", "Run", "keyed_streams", "resume", "sample"]


def sample(
    model: Any,
    shards: Any,
    algorithm: str = "dglmc",
    *,
    chains: int | str = "auto",
    num_rounds: int | str = 1000,
    burn_in: int | str | None = None,
    thin: int = 1,
    seed: int = 0,
    executor: Executor | str = Executor.RAY,
    time_budget_s: float | None = None,
    progress: bool | None = None,
    balance: Balance | str | bool = Balance.AUTO,
    max_actors: int | None = None,
    transport: TransportKind | str = TransportKind.SOCKET,
    target_ess: float = DEFAULT_TARGET_ESS,
    max_rhat: float = DEFAULT_MAX_RHAT,
    max_rounds: int | None = None,
    pipeline: bool | Literal["auto"] = "auto",
    secure_sums: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    callback: Callable[[Chunk], None] | None = None,
    privacy: Any = None,
    keyed_noise: bool | None = None,
    max_chains: int | None = None,
    _slowdown: dict[int, float] | None = None,
    **params: Any,
) -> Result:
    """Sample the posterior of `model` given data split into `shards`.

    `chains`: a number, or "auto" (default): 4, 16 where the run stops on convergence (num_rounds="auto": the
    many-chain rule then stops after about a hundred draws a chain) or at `time_budget_s` (more draws in the same
    time), or more where a round is bound by the link to
    far sites rather than by their compute (chosen at set-up; `result.setup.chains` says how many and why), at most
    `max_chains` (default 64).
    `burn_in` rounds come first and are discarded (default: max(100, num_rounds // 10), or with num_rounds="auto"
    "auto": the warm-up ends once the chains are warm, checked at fixed round counts, at most 1000 rounds);
    `num_rounds` counts the rounds after burn-in, or is "auto": stop once min bulk ESS ≥ `target_ess` and max R-hat
    < `max_rhat` (or at `max_rounds`, default 100,000). Each chain keeps the last round of every block of `thin`.
    For the same seed the draws are identical on `executor="local"` and `"ray"`, run after run; `balance="auto"`
    re-balances local step counts N_i from measured worker speeds only on Ray and only when the speeds differ by
    more than 1.5x (then it warns and records the schedule in `result.run_stats.N_schedule`, which `n_local=`
    replays). `time_budget_s` stops cleanly, returning what was drawn. On Ray, `max_actors` caps the worker actors
    (default: one per CPU) and `transport` picks how round messages travel: "socket" (direct TCP channels, the fast
    path) or "actor" (plain Ray actor calls); a lost worker, node or coordinator is recovered from the last
    checkpoint. `pipeline=True` runs each round as two halves, one per group of chains, so that the sites step one
    group while the other's messages travel (DG-LMC's batched kernels; the same draws as an unpipelined run from 6
    chains on: see `RunOptions`); "auto" (the default) turns it on where a far link's RTT is of the order of a
    round's compute (`result.setup.pipeline` says whether and why). `secure_sums=True` has each site send its term of
    the coordinator's sums masked, so the coordinator learns only sums over sites (DG-LMC, FALD, QLSD, ULA; the
    "privacy" extra; docs/privacy.md says what it hides and what not). `checkpoint_dir` stores every chunk of
    draws with its checkpoint, so `rs.resume(checkpoint_dir)` continues the run in another process.
    `privacy=rs.DP(epsilon, delta, clip)` runs DG-LMC's differential-privacy mode: clipped Langevin steps, a private
    set-up, and a budget per site that stops the run (stop reason "privacy_budget") before any release would exceed
    it (`result.run_stats.privacy`; docs/privacy.md). Algorithm parameters go in `**params`.
    A failure raises SamplingError naming the worker, site and round, with `.result` holding the draws so far.

    The keywords are sugar for `Run(model, shards, get_algorithm(algorithm, **params), RunOptions(...),
    ExecutionOptions(...))`.
    """
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable (it receives each chunk of draws), got {callback!r}")
    as_model(model)  # model and shards are checked first, as `Run` checks them
    shard_set = as_shard_set(shards)
    if checkpoint_dir is not None and as_run_directory(checkpoint_dir).has_checkpoint():
        raise ValueError(
            f"checkpoint_dir {str(checkpoint_dir)!r} holds a run already: continue it with "
            "rs.resume(checkpoint_dir), or give an empty directory"
        )
    options = RunOptions(
        chains=chains,  # type: ignore[arg-type]  # checked by RunOptions (a clear error names it)
        num_rounds=num_rounds,  # type: ignore[arg-type]
        burn_in=burn_in,  # type: ignore[arg-type]
        thin=thin,
        seed=seed,
        time_budget_s=time_budget_s,
        target_ess=target_ess,
        max_rhat=max_rhat,
        max_rounds=max_rounds,
        pipeline=pipeline,
        secure_sums=secure_sums,
        keyed_noise=keyed_noise,
        max_chains=max_chains,
    )
    execution = ExecutionOptions(
        executor=executor,  # type: ignore[arg-type]  # parsed by ExecutionOptions (a clear error names it)
        transport=transport,  # type: ignore[arg-type]
        balance=balance,  # type: ignore[arg-type]
        max_actors=max_actors,
        checkpoint_dir=checkpoint_dir,
        _slowdown=_slowdown,
    )
    alg = get_algorithm(algorithm, **with_privacy(algorithm, privacy, params))
    run = Run(model, shard_set, alg, options, execution)
    if run.directory is not None:
        run.directory.save_manifest(Manifest.of(model, alg, options, execution, _nameable(shard_set)))
    return _drive(run, progress, callback)


def resume(
    checkpoint_dir: str | os.PathLike,
    *,
    shards: Any = None,
    executor: Executor | str | None = None,
    progress: bool | None = None,
    callback: Callable[[Chunk], None] | None = None,
) -> Result:
    """Continue a run started with `rs.sample(..., checkpoint_dir=...)` from its last checkpoint, in this process or
    any other: the result holds every draw (those stored before and the new ones), exactly those of an
    uninterrupted run. Shards that were files are found again by path; in-memory shards must be passed as
    `shards` (the same data). `executor` may differ from the original run's (the draws do not depend on it).
    A checkpoint that cannot be read or belongs to another run raises CheckpointError / ValueError; nothing
    restarts from round 0."""
    directory = as_run_directory(checkpoint_dir)
    manifest = directory.load_manifest()
    state = directory.load_checkpoint()
    if shards is None:
        if any(s is None for s in manifest.shards):
            raise ValueError("this run's shards were in memory: pass them again, rs.resume(checkpoint_dir, shards=...)")
        shards = list(manifest.shards)
    state = directory.rollback() or state  # drops the draw files past the checkpoint
    execution = manifest.execution(directory.location, executor)
    run = Run(manifest.model, shards, manifest.algorithm, manifest.options, execution, resume_from=state)
    return _drive(run, progress, callback)


def _drive(run: Run, progress: bool | None, callback: Callable[[Chunk], None] | None) -> Result:
    """Run to the end with a progress bar; the result (all draws stored for a checkpointed run), its warnings, or
    SamplingError."""
    show = progress if progress is not None else run.total_rounds >= 2000
    from tqdm.auto import tqdm

    desc = f"{run.algorithm_name} ({run.executor})"
    with run, tqdm(total=run.total_rounds, initial=run.rounds_done, disable=not show, unit="round", desc=desc) as bar:
        for chunk in run.chunks():
            bar.update(chunk.rounds_done - bar.n)
            if show and run.setup.privacy is not None:  # the DP mode: the most any site has spent, live
                spent = run.stats().privacy
                if spent is not None:
                    bar.set_postfix_str(f"ε {float(np.max(spent.epsilon_spent)):.3f} of {spent.epsilon:g}")
            if callback is not None:
                callback(chunk)
        result = run.result()
        notes = run.warnings()  # as in result.outcome.warnings, with their kinds (the RunWarning category)
    if run.draws_before and run.directory is not None:  # a resumed run: its result holds every stored draw
        result = _with_stored_draws(result, run.directory, run.draws_kept)
    if run.failure is not None:
        raise SamplingError(run.failure, result)
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return result


def _with_stored_draws(result: Result, directory: RunDirectory, n: int) -> Result:
    draws = directory.read(0, n)
    stats = {k: v.T for k, v in directory.read_stats(n).items()}
    return dataclasses.replace(result, draws=np.ascontiguousarray(draws.transpose(1, 0, 2)), sample_stats=stats)


def _nameable(shard_set: ShardSet) -> tuple[Any, ...]:
    """The shards as a manifest keeps them: file shards as themselves, in-memory shards as None (data stay out)."""
    return tuple(s if s.path is not None else None for s in shard_set)
