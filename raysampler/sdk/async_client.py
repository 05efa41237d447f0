"""The asyncio SDK: `AsyncClient` and `AsyncRunHandle`, the same calls as `Client` and `RunHandle`, awaited; the
streams (`runs`, `events`, `stream_draws`) are async iterators that resume too.

Each method runs the same `Operations` as its sync twin through this module's driver, which performs their commands
with an httpx.AsyncClient; its docstring is its twin's (`_docs_of`), so the two cannot say different things.
tests/sdk/test_parity.py checks that every public method has its twin with the same signature.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
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
from .client import Client, RunHandle
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
K = TypeVar("K", bound=type)
_OpenStream = tuple[httpx.Response, AsyncIterator[str]]
#: The async names of sync methods (the rest keep theirs).
ASYNC_NAMES = {"close": "aclose", "__enter__": "__aenter__", "__exit__": "__aexit__"}


def _docs_of(twin: type) -> Callable[[K], K]:
    """A class decorator: each public method without a docstring takes its sync twin's."""

    def document(cls: K) -> K:
        sync_names = {ASYNC_NAMES.get(n, n): n for n in vars(twin)}
        for name, member in vars(cls).items():
            if callable(member) and member.__doc__ is None and name in sync_names:
                member.__doc__ = getattr(twin, sync_names[name]).__doc__
        return cls

    return document


@_docs_of(Client)
class AsyncClient(ClientBase[httpx.AsyncClient]):
    """The asyncio twin of `Client` (see `ClientBase` for the arguments): the same calls, awaited."""

    _http_class = httpx.AsyncClient

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the driver ------------------------------------------------------------------------------------------------
    async def _call(self, op: Op[T]) -> T:
        """Perform `op` to its end and return its value."""
        stepper, streams = Stepper(op), dict[Stream, _OpenStream]()
        try:
            while (command := stepper.next()) is not None:
                if isinstance(command, Emit):
                    raise TypeError(f"operation {getattr(op, '__name__', op)} emits items: iterate it")
                await self._step(stepper, command, streams)
            return stepper.result()
        finally:
            await self._close(op, streams)

    async def _iterate(self, op: Op[None]) -> AsyncIterator[Any]:
        """Perform `op`'s commands, yielding the items it emits; its streams close at its end."""
        stepper, streams = Stepper(op), dict[Stream, _OpenStream]()
        try:
            while (command := stepper.next()) is not None:
                if isinstance(command, Emit):
                    yield command.item
                else:
                    await self._step(stepper, command, streams)
        finally:
            await self._close(op, streams)

    async def _step(self, stepper: Stepper[Any], command: Command, streams: dict[Stream, _OpenStream]) -> None:
        try:
            stepper.reply(await self._perform(command, streams))
        except (httpx.TransportError, APIError) as exc:  # the operation's to handle
            stepper.fail(exc)

    @staticmethod
    async def _close(op: Op[Any], streams: dict[Stream, _OpenStream]) -> None:
        op.close()
        for resp, _ in streams.values():
            await resp.aclose()

    async def _perform(self, command: Command, streams: dict[Stream, _OpenStream]) -> Any:
        """One command's I/O, its reply."""
        if isinstance(command, Send):
            r = command.request
            return await self._http.request(r.method, r.path, **r.kwargs())
        if isinstance(command, Sleep):
            await asyncio.sleep(command.seconds)
            return None
        if isinstance(command, Open):
            r = command.request
            request = self._http.build_request(
                r.method, r.path, **r.kwargs(), timeout=self._stream_timeout(command.read_timeout)
            )
            resp = await self._http.send(request, stream=True)
            if resp.status_code >= 400:
                await resp.aread()
                await resp.aclose()
                check_response(resp)
            stream = Stream(next(self._streams))
            streams[stream] = (resp, resp.aiter_lines() if command.lines else resp.aiter_text())
            return stream
        if isinstance(command, Read):
            resp, parts = streams[command.stream]
            try:
                part = await anext(parts, None)
            except BaseException:
                del streams[command.stream]
                await resp.aclose()
                raise
            if part is None:
                del streams[command.stream]
                await resp.aclose()
            return part
        raise TypeError(f"not a command: {command!r}")

    # --- runs ------------------------------------------------------------------------------------------------------
    async def submit(
        self,
        spec: Mapping[str, Any] | RunSpec,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        secure_sums: bool | None = None,
        privacy: Any = None,
    ) -> AsyncRunHandle:
        state = await self._call(self._ops.submit(spec, run_id, idempotency_key, name, tags, secure_sums, privacy))
        return AsyncRunHandle(self, state.id, state.info)

    async def run(self, run_id: str) -> AsyncRunHandle:
        state = await self._call(self._ops.run(run_id))
        return AsyncRunHandle(self, state.id, state.info)

    def runs(
        self,
        status: str | None = None,
        page_size: int = 50,
        *,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> AsyncIterator[RunInfo]:
        return self._iterate(self._ops.runs(status, page_size, name, tags))

    async def compare(self, run_ids: list[str], draws: int | str = 1000, method: str = "pseudo-bma") -> pd.DataFrame:
        return await self._call(self._ops.compare(run_ids, draws, method))

    # --- data sets and the service ---------------------------------------------------------------------------------
    async def upload_dataset(self, X: ArrayLike, y: ArrayLike, name: str | None = None) -> DatasetInfo:
        return await self._call(self._ops.upload_dataset(X, y, name))

    async def upload_file(
        self, path: str, *, y_column: str = "y", x_columns: list[str] | None = None, name: str | None = None
    ) -> DatasetInfo:
        return await self._call(self._ops.upload_file(path, y_column, x_columns, name))

    async def datasets(self) -> list[DatasetInfo]:
        return await self._call(self._ops.datasets())

    async def models(self) -> list[ModelFamilyInfo]:
        return await self._call(self._ops.models())

    async def delete_dataset(self, dataset_id: str) -> None:
        await self._call(self._ops.delete_dataset(dataset_id))

    async def health(self) -> Health:
        return await self._call(self._ops.health())

    async def version(self) -> VersionInfo:
        return await self._call(self._ops.version())


@_docs_of(RunHandle)
class AsyncRunHandle(RunHandleBase[AsyncClient]):
    """One run on the service, async (`AsyncClient.submit`, `AsyncClient.run`): `RunHandle`'s calls, awaited."""

    async def info(self) -> RunInfo:
        return await self.client._call(self.client._ops.info(self._run))

    async def status(self) -> str:
        return await self.client._call(self.client._ops.status(self._run))

    def events(self, after: int = 0, follow: bool = True, deadline: float | None = None) -> AsyncIterator[ServerEvent]:
        return self.client._iterate(self.client._ops.events(self._run, after, follow, deadline))

    async def wait(self, progress: bool = False, timeout: float | None = None) -> RunInfo:
        return await self.client._call(self.client._ops.wait(self._run, progress, timeout))

    def stream_draws(self, start: int = 0, follow: bool = True) -> AsyncIterator[DrawBatch]:
        return self.client._iterate(self.client._ops.stream_draws(self._run, start, follow))

    async def draws(self, follow: bool = False) -> np.ndarray:
        return await self.client._call(self.client._ops.draws(self._run, follow))

    async def result(self) -> Result:
        return await self.client._call(self.client._ops.result(self._run))

    async def summary(self, ci_prob: float = 0.94) -> pd.DataFrame:
        return await self.client._call(self.client._ops.summary(self._run, ci_prob))

    async def fit_summary(self, prob: float = 0.95) -> FitSummary:
        return await self.client._call(self.client._ops.fit_summary(self._run, prob))

    async def fixef(self, probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
        return (await self.client._call(self.client._ops.effect_tables(self._run, "fixef", probs)))[""]

    async def ranef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> dict[str, Any]:
        return await self.client._call(self.client._ops.ranef(self._run, summary, probs))

    async def coef(self, summary: bool = True, probs: tuple[float, float] = (0.025, 0.975)) -> dict[str, Any]:
        return await self.client._call(self.client._ops.ranef(self._run, summary, probs, kind="coef"))

    async def prior_summary(self) -> pd.DataFrame:
        return (await self.client._call(self.client._ops.effect_tables(self._run, "prior", (0.025, 0.975))))[""]

    async def effects(self, kind: str = "fixef", probs: tuple[float, float] = (0.025, 0.975)) -> pd.DataFrame:
        warn_effects_deprecated(kind)
        return await self.client._call(self.client._ops.effects(self._run, kind, probs))

    async def to_arviz(self) -> xr.DataTree:
        return await self.client._call(self.client._ops.to_arviz(self._run))

    async def cancel(self) -> RunInfo:
        return await self.client._call(self.client._ops.cancel(self._run))

    async def resume(self) -> RunInfo:
        return await self.client._call(self.client._ops.resume(self._run))

    async def delete(self) -> None:
        await self.client._call(self.client._ops.delete(self._run))

    async def predict(
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
        return await self.client._call(
            self.client._ops.predict(
                self._run, rows, dataset_id, columns, kind, draws, prob, seed, re_formula, allow_new_levels
            )
        )

    async def evaluate(
        self, data: Mapping[str, JSON], *, draws: int | str = 1000, bins: int = 10, seed: int = 0
    ) -> Evaluation:
        return await self.client._call(self.client._ops.evaluate(self._run, data, draws, bins, seed))

    async def ledger(self, site: str | None = None) -> RunLedger:
        return await self.client._call(self.client._ops.ledger(self._run, site))

    async def loo(self, draws: int | str = 1000, moment_match: bool = False) -> LooInfo:
        return await self.client._call(self.client._ops.loo(self._run, draws, moment_match))

    async def bayes_r2(self, draws: int | str = 1000) -> BayesR2Info:
        return await self.client._call(self.client._ops.bayes_r2(self._run, draws))

    async def pp_check(
        self,
        kind: str = "dens",
        stat: str = "mean",
        *,
        draws: int | str | None = None,
        bins: int | None = None,
        seed: int = 0,
        group: str | None = None,
    ) -> PpcResult:
        return await self.client._call(self.client._ops.pp_check(self._run, kind, stat, draws, bins, seed, group))
