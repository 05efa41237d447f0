"""The synchronous SDK: `Client` and `RunHandle`, safe inside Jupyter (no event loop used).

    client = Client("http://127.0.0.1:8000", api_key="...")
    run = client.submit({"model": {"family": "logistic_regression"}, "data": {"dataset": "builtin:breast_cancer"}})
    run.wait(progress=True)            # tqdm bar fed by the run's event stream
    for batch in run.stream_draws():   # DrawBatch: offset, chain, index, values (n, d)
        ...
    run.result()                       # the Result raysampler.sample returns: draws, posterior(), summary(), ...

Each method runs one of the `Operations` (written once for this client and `AsyncClient`) through this module's
driver, which performs its commands with an httpx.Client.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import numpy as np
from numpy.typing import ArrayLike

from ..wire import (
    BayesR2Info,
    DatasetInfo,
    Evaluation,
    Health,
    LooInfo,
    ModelFamilyInfo,
    RunInfo,
    RunLedger,
    ServerEvent,
    VersionInfo,
)
from .base import ClientBase, RunHandleBase
from .draws import DrawBatch
from .errors import APIError, check_response
from .operations import warn_effects_deprecated
from .protocol import Command, Emit, Op, Open, Read, Send, Sleep, Stepper, Stream
from .requests import JSON

if TYPE_CHECKING:
    import pandas as pd
    import xarray as xr

    from ..fitprint import FitSummary
    from ..predictive import PpcResult
    from ..result import Result
    from ..service.schemas import RunSpec

T = TypeVar("T")
_OpenStream = tuple[httpx.Response, Iterator[str]]


class Client(ClientBase[httpx.Client]):
    """Synchronous client of the service (see `ClientBase` for the arguments)."""

    _http_class = httpx.Client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the driver ------------------------------------------------------------------------------------------------
    def _call(self, op: Op[T]) -> T:
        """Perform `op` to its end and return its value."""
        steps = self._drive(op)
        try:
            item = next(steps)
        except StopIteration as stop:
            return stop.value
        steps.close()
        raise TypeError(f"operation {getattr(op, '__name__', op)} emits items ({type(item).__name__}): iterate it")

    def _drive(self, op: Op[T]) -> Generator[Any, None, T]:
        """Perform `op`'s commands, yielding the items it emits, returning its value; its streams close at its end."""
        stepper, streams = Stepper(op), dict[Stream, _OpenStream]()
        try:
            while (command := stepper.next()) is not None:
                if isinstance(command, Emit):
                    yield command.item
                    continue
                try:
                    stepper.reply(self._perform(command, streams))
                except (httpx.TransportError, APIError) as exc:  # the operation's to handle
                    stepper.fail(exc)
            return stepper.result()
        finally:
            op.close()
            for resp, _ in streams.values():
                resp.close()

    def _perform(self, command: Command, streams: dict[Stream, _OpenStream]) -> Any:
        """One command's I/O, its reply."""
        if isinstance(command, Send):
            r = command.request
            return self._http.request(r.method, r.path, **r.kwargs())
        if isinstance(command, Sleep):
            time.sleep(command.seconds)
            return None
        if isinstance(command, Open):
            r = command.request
            request = self._http.build_request(
                r.method, r.path, **r.kwargs(), timeout=self._stream_timeout(command.read_timeout)
            )
            resp = self._http.send(request, stream=True)
            if resp.status_code >= 400:
                resp.read()
                resp.close()
                check_response(resp)
            stream = Stream(next(self._streams))
            streams[stream] = (resp, resp.iter_lines() if command.lines else resp.iter_text())
            return stream
        if isinstance(command, Read):
            resp, parts = streams[command.stream]
            try:
                part = next(parts, None)
            except BaseException:
                del streams[command.stream]
                resp.close()
                raise
            if part is None:
                del streams[command.stream]
                resp.close()
            return part
        raise TypeError(f"not a command: {command!r}")

    # --- runs ------------------------------------------------------------------------------------------------------
    def submit(
        self,
        spec: Mapping[str, Any] | RunSpec,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        secure_sums: bool | None = None,
        privacy: Any = None,
    ) -> RunHandle:
        """Submit a run (a RunSpec or its dict; `name` and `tags` label it to find it by, see `runs`); returns its
        handle. `secure_sums` (where given) sets the spec's field of that name: the sites send their terms of the
        coordinator's sums masked; `privacy` (an `rs.DP(...)` or {epsilon, delta, clip}) runs it in the DP mode.
        Invalid specs raise APIError (422) naming the field. The request carries an Idempotency-Key
        (`idempotency_key`, else a fresh one), so a resent submit makes one run."""
        state = self._call(self._ops.submit(spec, run_id, idempotency_key, name, tags, secure_sums, privacy))
        return RunHandle(self, state.id, state.info)

    def run(self, run_id: str) -> RunHandle:
        """The handle of run `run_id`; "latest" is the tenant's newest run."""
        state = self._call(self._ops.run(run_id))
        return RunHandle(self, state.id, state.info)

    def runs(
        self,
        status: str | None = None,
        page_size: int = 50,
        *,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Iterator[RunInfo]:
        """All the tenant's runs, newest first (follows the cursor pages); only those of `name` and with all `tags`
        when given."""
        return self._drive(self._ops.runs(status, page_size, name, tags))

    def compare(self, run_ids: list[str], draws: int | str = 1000, method: str = "pseudo-bma") -> pd.DataFrame:
        """Rank runs fitted on the same rows by PSIS-LOO computed at their shards: a DataFrame indexed by run id,
        best first (rank, elpd, se, p_loo, elpd_diff, dse, weight, warning); weights by `method` ("pseudo-bma" or
        "stacking")."""
        return self._call(self._ops.compare(run_ids, draws, method))

    # --- data sets and the service ---------------------------------------------------------------------------------
    def upload_dataset(self, X: ArrayLike, y: ArrayLike, name: str | None = None) -> DatasetInfo:
        """Upload arrays (as .npz) for runs to use as {"dataset_id": ...}; returns {id, n, d, ...}."""
        return self._call(self._ops.upload_dataset(X, y, name))

    def upload_file(
        self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None, name: str | None = None
    ) -> DatasetInfo:
        """Upload a .npz, .csv or .parquet file, sent in chunks (never read whole); y_column / x_columns name the
        target and feature columns."""
        return self._call(self._ops.upload_file(path, y_column, x_columns, name))

    def datasets(self) -> list[DatasetInfo]:
        """The tenant's uploaded data sets."""
        return self._call(self._ops.datasets())

    def models(self) -> list[ModelFamilyInfo]:
        """The model families a run spec may name (built-in and registered), with their parameters' JSON schema."""
        return self._call(self._ops.models())

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete an uploaded data set."""
        self._call(self._ops.delete_dataset(dataset_id))

    def health(self) -> Health:
        """Whether the service is up, on which executor, and whether it reaches Ray."""
        return self._call(self._ops.health())

    def version(self) -> VersionInfo:
        """The service's version, algorithms, model families and built-in data sets."""
        return self._call(self._ops.version())


class RunHandle(RunHandleBase[Client]):
    """One run on the service (`Client.submit`, `Client.run`)."""

    def info(self) -> RunInfo:
        """The run object: status, progress, timings, per-worker τ_i, N_i, idle fraction, error."""
        return self.client._call(self.client._ops.info(self._run))

    def status(self) -> str:
        """The run's status now (PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED)."""
        return self.client._call(self.client._ops.status(self._run))

    def events(self, after: int = 0, follow: bool = True, deadline: float | None = None) -> Iterator[ServerEvent]:
        """The run's events ({"id", "event", "data"}); reconnects with Last-Event-ID if the connection drops.
        With a `deadline` (time.monotonic()), raises TimeoutError once it passes, even while no event comes."""
        return self.client._drive(self.client._ops.events(self._run, after, follow, deadline))

    def wait(self, progress: bool = False, timeout: float | None = None) -> RunInfo:
        """Block until the run ends (a tqdm bar from the event stream if `progress`: rounds against their total, or
        for num_rounds="auto" the percentage of the way to convergence with the last min ESS and max R-hat); returns
        the final run object. TimeoutError after `timeout` seconds."""
        return self.client._call(self.client._ops.wait(self._run, progress, timeout))

    def stream_draws(self, start: int = 0, follow: bool = True) -> Iterator[DrawBatch]:
        """Draw batches from line offset `start` as the service stores them (until the run ends if `follow`);
        resumes at its offset if the connection drops."""
        return self.client._drive(self.client._ops.stream_draws(self._run, start, follow))

    def draws(self, follow: bool = False) -> np.ndarray:
        """Stored draws as (chains, draws, d) on the parameters' natural scale (waits for the run to end if
        `follow`): `result().draws`, without the rest of the result."""
        return self.client._call(self.client._ops.draws(self._run, follow))

    def result(self) -> Result:
        """The stored draws as the `Result` that `raysampler.sample` returns (from the run's ArviZ export): `draws`,
        `posterior()`, `summary()`, `fixef()`, `ranef()`, `coef()`, `to_arviz()` work on it as on a local run's.
        The model and rows stay on the service: use the handle's `predict`, `loo` and `pp_check`."""
        return self.client._call(self.client._ops.result(self._run))

    def summary(self, ci_prob: float = 0.94) -> pd.DataFrame:
        """pandas DataFrame per coordinate: mean, sd, HDI, ess_bulk, ess_tail, r_hat, mcse (draws stored so far)."""
        return self.client._call(self.client._ops.summary(self._run, ci_prob))

    def fit_summary(self, prob: float = 0.95) -> FitSummary:
        """The fit as brms prints it (`print()` it; `tables()` gives its sections): family, formula, data (the
        workers' sites and rows), draws, group-level effects, population-level effects and distributional
        parameters, each with Estimate, Est.Error, the central `prob` interval, Rhat, Bulk_ESS and Tail_ESS, from
        the run object and the service's summary (`raysampler summary ID` prints it)."""
        return self.client._call(self.client._ops.fit_summary(self._run, prob))

    def fixef(self, probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
        """The coefficients' summary, one row per column: Estimate, Est.Error and the `probs` quantiles (as
        `Result.fixef`), computed by the service."""
        return self.client._call(self.client._ops.effect_tables(self._run, "fixef", probs))[""]

    def ranef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> dict[str, Any]:
        """Each grouping column's effects, as `Result.ranef`: {group: table by (label, effect)} from the service, or
        per draw {group: DataArray (chain, draw, <group>, <group>_effect)} (`summary=False`)."""
        return self.client._call(self.client._ops.ranef(self._run, summary, probs))

    def coef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> dict[str, Any]:
        """Each group's coefficients, fixed plus the group's effect, as `Result.coef`: {group: table by (label,
        coefficient)} from the service, or per draw (`summary=False`)."""
        return self.client._call(self.client._ops.ranef(self._run, summary, probs, kind="coef"))

    def prior_summary(self) -> pd.DataFrame:
        """The prior on every parameter: a table of prior, class (b, sd, cor, sigma, phi), coef and group."""
        return self.client._call(self.client._ops.effect_tables(self._run, "prior", (0.025, 0.975)))[""]

    def effects(self, kind: str = "fixef", probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
        """Deprecated: `fixef()`, `ranef()`, `coef()` and `prior_summary()` (the names `Result` uses). The brms-style
        tables of `kind` in one DataFrame indexed by (group,) label and effect or coefficient."""
        warn_effects_deprecated(kind)
        return self.client._call(self.client._ops.effects(self._run, kind, probs))

    def to_arviz(self) -> xr.DataTree:
        """The stored draws as an ArviZ/xarray DataTree (downloaded as NetCDF)."""
        return self.client._call(self.client._ops.to_arviz(self._run))

    def cancel(self) -> RunInfo:
        """Cancel the run (its stored draws are kept); returns the run object."""
        return self.client._call(self.client._ops.cancel(self._run))

    def resume(self) -> RunInfo:
        """Continue a FAILED or CANCELLED run from its checkpoint."""
        return self.client._call(self.client._ops.resume(self._run))

    def delete(self) -> None:
        """Delete a finished run: its record, events and draws."""
        self.client._call(self.client._ops.delete(self._run))

    def predict(
        self,
        rows: Any = None,
        *,
        dataset_id: str | None = None,
        columns: list[str] | None = None,
        kind: str = "mean",
        draws: int | str = 1000,
        prob: float = 0.9,
        seed: int = 0,
        re_formula: str | None = None,
        allow_new_levels: bool = True,
    ) -> np.ndarray:
        """The posterior predictive at `rows` (inline: an array, or a DataFrame or a mapping of columns, read by
        name; the response column is not needed) or an uploaded data set: kind "mean" (rows,) or (rows, classes),
        "interval" (rows, 2), and per draw (draws, rows) "epred" E[y|x], "linpred" the linear predictor and
        "predict" (or "draws") predictive draws. `re_formula="NA"`: population-level only; `allow_new_levels=False`
        refuses a group label the run never saw, naming it (else its effects are drawn from its group's law)."""
        return self.client._call(
            self.client._ops.predict(
                self._run, rows, dataset_id, columns, kind, draws, prob, seed, re_formula, allow_new_levels
            )
        )

    def evaluate(
        self, data: Mapping[str, JSON], *, draws: int | str = 1000, bins: int = 10, seed: int = 0
    ) -> Evaluation:
        """Held-out metrics on `data` (a data reference as in a run spec: {"dataset_id": ...}, {"dataset":
        "builtin:..."} or {"shards": [...], "y_column": ...}), computed where the rows are."""
        return self.client._call(self.client._ops.evaluate(self._run, data, draws, bins, seed))

    def ledger(self, site: str | None = None) -> RunLedger:
        """The run's release ledger: every message each shard's site sent so far, by kind (quantity, shape,
        messages, bytes, masked/sealed/plain); only the shards of `site` where given (APIError 404 for a site the
        run has no shard on)."""
        return self.client._call(self.client._ops.ledger(self._run, site))

    def loo(self, draws: int | str = 1000, moment_match: bool = False) -> LooInfo:
        """PSIS-LOO on the run's own rows, computed at its shards: elpd, se, p_loo, Pareto-k counts by band (flat
        rows apart), high-k rows; with `moment_match`, what moment matching did to each of them."""
        return self.client._call(self.client._ops.loo(self._run, draws, moment_match))

    def bayes_r2(self, draws: int | str = 1000) -> BayesR2Info:
        """The run's residual-based Bayesian R² (brms' bayes_R2), computed at its shards: estimate, est_error and
        the central 95 % interval over the draws."""
        return self.client._call(self.client._ops.bayes_r2(self._run, draws))

    def pp_check(
        self,
        kind: str = "dens",
        stat: str = "mean",
        *,
        draws: int | str | None = None,
        bins: int | None = None,
        seed: int = 0,
        group: str | None = None,
    ) -> PpcResult:
        """A posterior predictive check on the run's own rows, computed at its shards (only bin counts and sums come
        back): "dens", "hist" or "stat" of `stat`, as `Result.pp_check` gives it (`.plot()` draws it); with `group`,
        "stat" per label of that column of the data."""
        return self.client._call(self.client._ops.pp_check(self._run, kind, stat, draws, bins, seed, group))
