"""Every SDK operation, written once as a sans-IO generator (`protocol`): `Client` and `AsyncClient` drive the same
`Operations`, so the two cannot differ in what they send, retry, resume or return.

An operation on a run reads and updates its `RunState` (the last run object and draw-stream header seen), which is
what a `RunHandle` shows as `_info` and `header`.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
from numpy.typing import ArrayLike

from ..wire import (
    BayesR2Info,
    DatasetInfo,
    DrawsHeader,
    Evaluation,
    Health,
    LooInfo,
    ModelFamilyInfo,
    ProgressEvent,
    RunInfo,
    RunLedger,
    RunStatus,
    ServerEvent,
    SSEParser,
    StatusEvent,
    VersionInfo,
)
from . import frames
from . import requests as rq
from .connection import LATEST
from .draws import DrawStream, assemble
from .errors import check_response
from .protocol import Emit, Op, Open, Read, Send, Sleep, collect, next_item
from .requests import JSON, Request
from .retry import RetryPolicy

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from ..fitprint import FitSummary
    from ..predictive import PpcResult
    from ..result import Result
    from ..service.schemas import RunSpec

#: The longest a read of an event stream waits while a deadline is set, so that the deadline is checked that often
#: even when no event (and no keep-alive) comes.
DEADLINE_READ_S = 5.0


@dataclass
class RunState:
    """What the SDK knows of one run: its id, the last run object read and the header of the last draw stream."""

    id: str
    info: RunInfo | None = None
    header: DrawsHeader | None = None


class Operations:
    """The service's operations under one retry policy; each method returns an operation (`protocol.Op`)."""

    def __init__(self, retry: RetryPolicy) -> None:
        self.retry = retry

    # --- requests --------------------------------------------------------------------------------------------------
    def send(self, request: Request) -> Op[httpx.Response]:
        """Send `request`, resending as the retry policy says; an error status raises APIError."""
        for attempt in itertools.count():
            try:
                resp = yield Send(request)
            except httpx.TransportError as exc:
                delay = self.retry.after_error(request, exc, attempt)
                if delay is None:
                    raise
            else:
                delay = self.retry.after_response(request, resp, attempt)
                if delay is None:
                    return check_response(resp)
            yield Sleep(delay)
        raise AssertionError("unreachable")

    def json(self, request: Request) -> Op[JSON]:
        """The JSON body of `request`'s answer."""
        return (yield from self.send(request)).json()

    # --- runs ------------------------------------------------------------------------------------------------------
    def submit(
        self,
        spec: Mapping[str, Any] | RunSpec,
        run_id: str | None,
        idempotency_key: str | None,
        name: str | None,
        tags: Mapping[str, str] | None,
        secure_sums: bool | None = None,
        privacy: Any = None,
    ) -> Op[RunState]:
        info = yield from self.json(rq.submit(spec, run_id, idempotency_key, name, tags, secure_sums, privacy))
        return RunState(info["id"], info)

    def run(self, run_id: str) -> Op[RunState]:
        """The run `run_id` ("latest": the tenant's newest)."""
        info = yield from self.json(rq.run((yield from self.resolve(run_id))))
        return RunState(info["id"], info)

    def resolve(self, run_id: str) -> Op[str]:
        """`run_id`, or for "latest" the id of the tenant's newest run (LookupError if it has none)."""
        if run_id != LATEST:
            return run_id
        newest = self.runs(None, 1, None, None)
        found, info = yield from next_item(newest)
        newest.close()
        if not found:
            raise LookupError("no runs yet: 'latest' names the newest run")
        return str(info["id"])

    def runs(self, status: str | None, page_size: int, name: str | None, tags: Mapping[str, str] | None) -> Op[None]:
        """Emits every run (RunInfo), newest first, following the cursor pages."""
        cursor = None
        while True:
            page = yield from self.json(rq.runs(status, page_size, cursor, name, tags))
            for info in page["runs"]:
                yield Emit(info)
            cursor = page["next_cursor"]
            if cursor is None:
                return

    def compare(self, run_ids: list[str], draws: int | str, method: str) -> Op[pd.DataFrame]:
        ids = []
        for run_id in run_ids:
            ids.append((yield from self.resolve(run_id)))
        return frames.comparison_frame((yield from self.json(rq.compare(ids, draws, method))))

    # --- data sets and the service ---------------------------------------------------------------------------------
    def upload_dataset(self, X: ArrayLike, y: ArrayLike, name: str | None) -> Op[DatasetInfo]:
        return (yield from self.json(rq.upload_arrays(X, y, name)))

    def upload_file(self, path: str, y_column: str, x_columns: list[str] | None, name: str | None) -> Op[DatasetInfo]:
        """The file goes out in chunks as httpx reads it, by either client (never read whole into memory)."""
        with open(path, "rb") as fh:
            return (yield from self.json(rq.upload_file(path, fh, y_column, x_columns, name)))

    def datasets(self) -> Op[list[DatasetInfo]]:
        return (yield from self.json(rq.datasets()))["datasets"]

    def delete_dataset(self, dataset_id: str) -> Op[None]:
        yield from self.send(rq.delete_dataset(dataset_id))

    def models(self) -> Op[list[ModelFamilyInfo]]:
        return (yield from self.json(rq.models()))["families"]

    def health(self) -> Op[Health]:
        return (yield from self.json(rq.health()))

    def version(self) -> Op[VersionInfo]:
        return (yield from self.json(rq.version()))

    # --- one run ---------------------------------------------------------------------------------------------------
    def info(self, run: RunState) -> Op[RunInfo]:
        run.info = yield from self.json(rq.run(run.id))
        return run.info

    def status(self, run: RunState) -> Op[str]:
        return (yield from self.info(run))["status"]

    def cancel(self, run: RunState) -> Op[RunInfo]:
        run.info = yield from self.json(rq.cancel(run.id))
        return run.info

    def resume(self, run: RunState) -> Op[RunInfo]:
        run.info = yield from self.json(rq.resume(run.id))
        return run.info

    def delete(self, run: RunState) -> Op[None]:
        yield from self.send(rq.delete_run(run.id))

    def events(self, run: RunState, after: int, follow: bool, deadline: float | None) -> Op[None]:
        """Emits the run's events after `after`, reconnecting with Last-Event-ID when the connection drops; with a
        `deadline` (time.monotonic()), raises TimeoutError once it passes, even while no event comes."""
        last, failures = after, 0
        while True:
            try:
                read_s = None if deadline is None else max(0.05, min(DEADLINE_READ_S, deadline - time.monotonic()))
                stream = yield Open(rq.events(run.id, follow, last), lines=True, read_timeout=read_s)
                parser = SSEParser()
                while (line := (yield Read(stream))) is not None:
                    _check_deadline(deadline, run.id)  # keep-alive comments count: they come while nothing happens
                    ev = parser.feed(line)
                    if ev is not None:
                        last = int(ev["id"] or last)
                        failures = 0
                        yield Emit(ev)
                return
            except httpx.ReadTimeout:
                _check_deadline(deadline, run.id)  # else: no event for a while; reconnect where we were
            except httpx.TransportError:
                failures += 1
                delay = self.retry.reconnect_after(failures)
                if delay is None:
                    raise
                yield Sleep(delay)

    def wait(self, run: RunState, progress: bool, timeout: float | None) -> Op[RunInfo]:
        """Until the run ends (TimeoutError after `timeout` s), with a tqdm bar from its events if `progress`."""
        from tqdm.auto import tqdm

        info = yield from self.info(run)
        deadline = None if timeout is None else time.monotonic() + timeout
        convergence = info["progress"].get("basis") == "convergence"
        total, unit = (100, "%") if convergence else (info["progress"]["rounds_total"], "round")
        with tqdm(total=total, disable=not progress, unit=unit, desc=run.id) as bar:
            events = self.events(run, 0, True, deadline)
            while True:
                found, ev = yield from next_item(events)
                if not found:
                    break
                if ev["event"] == ProgressEvent.kind:
                    step = ProgressEvent.from_json(ev["data"])
                    bar.update(_bar_position(step, convergence) - bar.n)
                    post: dict[str, Any] = {"draws": step.draws_stored}
                    if step.min_ess_bulk is not None and step.max_rhat is not None:
                        post |= {"ess": f"{step.min_ess_bulk:.0f}", "rhat": f"{step.max_rhat:.3f}"}
                    bar.set_postfix(post, refresh=False)
                elif _ends_run(ev) and RunStatus((yield from self.info(run))["status"]).is_terminal:
                    break  # an end in the history may be an earlier attempt's (a run resumed since): read past it
            events.close()
            final = yield from self.info(run)
            if final.get("stop_reason") == "converged":  # the targets are met: the bar ends full
                bar.update(total - bar.n)
        return final

    def stream_draws(self, run: RunState, start: int, follow: bool) -> Op[None]:
        """Emits draw batches from line offset `start`, resuming at its offset when the connection drops."""
        state, failures = DrawStream(start), 0
        run.header = None
        while True:
            try:
                stream = yield Open(rq.draws(run.id, state.offset, follow))
                state.reopen()
                while (text := (yield Read(stream))) is not None:
                    batch = state.feed(text)
                    run.header = state.header
                    if batch is not None:
                        failures = 0
                        yield Emit(batch)
                return
            except httpx.TransportError:
                failures += 1
                delay = self.retry.reconnect_after(failures)
                if delay is None:
                    raise
                yield Sleep(delay)

    def draws(self, run: RunState, follow: bool) -> Op[np.ndarray]:
        batches = yield from collect(self.stream_draws(run, 0, follow))
        return assemble(run.header, batches)

    def summary(self, run: RunState, ci_prob: float) -> Op[pd.DataFrame]:
        return frames.summary_frame((yield from self.json(rq.summary(run.id, ci_prob))))

    def fit_summary(self, run: RunState, prob: float) -> Op[FitSummary]:
        """The fit as brms prints it, from the run object (family, formula, workers' sites and rows, draws) and its
        summary at ci_prob `prob` (`raysampler.fitprint.of_service`)."""
        from ..fitprint import of_service

        info = yield from self.info(run)
        table = frames.summary_frame((yield from self.json(rq.summary(run.id, prob))))
        return of_service(info, table, prob)

    def effect_tables(self, run: RunState, kind: str, probs: tuple[float, float]) -> Op[dict[str, pd.DataFrame]]:
        """The service's brms-style tables of `kind`, by group ("" for fixef and prior)."""
        return frames.effect_tables((yield from self.json(rq.effects(run.id, kind, probs))))

    def ranef(self, run: RunState, summary: bool, probs: tuple[float, float], kind: str = "ranef") -> Op[Any]:
        """Group effects (or with kind "coef", group coefficients): the service's tables, or per draw (`summary`
        False) computed here from the run's export, as `Result.ranef` / `Result.coef` give them."""
        if summary:
            return (yield from self.effect_tables(run, kind, probs))
        result = yield from self.result(run)
        return result.ranef(False, probs) if kind == "ranef" else result.coef(False, probs)

    def effects(self, run: RunState, kind: str, probs: tuple[float, float]) -> Op[pd.DataFrame]:
        """The deprecated `effects(kind)`: every group's table in one DataFrame."""
        return frames.effects_frame((yield from self.json(rq.effects(run.id, kind, probs))))

    def to_arviz(self, run: RunState) -> Op[xr.DataTree]:
        return frames.open_netcdf((yield from self.send(rq.arviz(run.id))).content)

    def result(self, run: RunState) -> Op[Result]:
        info = yield from self.info(run)
        return frames.result_of((yield from self.to_arviz(run)), info)

    def predict(
        self,
        run: RunState,
        rows: Any,
        dataset_id: str | None,
        columns: list[str] | None,
        kind: str,
        draws: int | str,
        prob: float,
        seed: int,
        re_formula: str | None,
        allow_new_levels: bool,
    ) -> Op[np.ndarray]:
        request = rq.predict(run.id, rows, dataset_id, columns, kind, draws, prob, seed, re_formula, allow_new_levels)
        body = yield from self.json(request)
        return frames.prediction_values(body)

    def evaluate(
        self, run: RunState, data: Mapping[str, JSON], draws: int | str, bins: int, seed: int
    ) -> Op[Evaluation]:
        return (yield from self.json(rq.evaluate(run.id, data, draws, bins, seed)))

    def ledger(self, run: RunState, site: str | None) -> Op[RunLedger]:
        return (yield from self.json(rq.ledger(run.id, site)))

    def loo(self, run: RunState, draws: int | str, moment_match: bool) -> Op[LooInfo]:
        return (yield from self.json(rq.loo(run.id, draws, moment_match)))

    def bayes_r2(self, run: RunState, draws: int | str) -> Op[BayesR2Info]:
        return (yield from self.json(rq.bayes_r2(run.id, draws)))

    def pp_check(
        self,
        run: RunState,
        kind: str,
        stat: str,
        draws: int | str | None,
        bins: int | None,
        seed: int,
        group: str | None = None,
    ) -> Op[PpcResult]:
        return frames.ppc_result((yield from self.json(rq.ppc(run.id, kind, stat, draws, bins, seed, group))))


def _bar_position(step: ProgressEvent, convergence: bool) -> float:
    """Where a progress bar stands: percent of the way to convergence, or rounds done."""
    if not convergence:
        return step.rounds_done
    return round(100 * (step.fraction or 0.0), 1)


def _ends_run(ev: ServerEvent) -> bool:
    return ev["event"] == StatusEvent.kind and StatusEvent.from_json(ev["data"]).status.is_terminal


def _check_deadline(deadline: float | None, run_id: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(f"run {run_id} did not finish before the timeout")


def warn_effects_deprecated(kind: str) -> None:
    """The deprecation of `RunHandle.effects(kind)`, naming the method that replaces it (as `Result` names it);
    called by the handles' `effects` so that the warning points at the caller's line."""
    new = {"ranef": "ranef()", "coef": "coef()", "prior": "prior_summary()"}.get(kind, "fixef()")
    warnings.warn(
        f"RunHandle.effects(kind={kind!r}) is deprecated: use RunHandle.{new}, the name Result uses",
        DeprecationWarning,
        stacklevel=3,
    )
