"""The asyncio SDK offers every call of the sync one, with the same signature and the same docstring: the README's
promise "the same calls, awaited", checked rather than hoped for."""

from __future__ import annotations

import inspect
import re

import pytest

from raysampler.client import AsyncClient, AsyncRunHandle, Client, RunHandle
from raysampler.sdk.async_client import ASYNC_NAMES

PAIRS = [(Client, AsyncClient), (RunHandle, AsyncRunHandle)]
#: What differs in the annotations between the twins, and nothing else may.
ASYNC_TYPES = {"Iterator": "AsyncIterator", "RunHandle": "AsyncRunHandle", "Client": "AsyncClient"}
ITERATORS = {"runs", "events", "stream_draws"}


def public(cls: type) -> dict[str, object]:
    """The class's public methods (its own and inherited), with the context-manager methods."""
    return {
        name: member
        for name, member in inspect.getmembers(cls, callable)
        if (not name.startswith("_") or name in ASYNC_NAMES or name in ASYNC_NAMES.values()) and name != "__init__"
    }


def as_async(annotation: object) -> object:
    """A sync annotation as its async twin spells it (`Iterator[RunInfo]` → `AsyncIterator[RunInfo]`)."""
    if not isinstance(annotation, str):
        return annotation
    return re.sub(r"\b(Iterator|RunHandle|Client)\b", lambda m: ASYNC_TYPES[m.group(1)], annotation)


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=["Client", "RunHandle"])
def test_every_sync_method_has_an_async_twin_with_its_signature(sync: type, asynchronous: type) -> None:
    ours, theirs = public(sync), public(asynchronous)
    assert {ASYNC_NAMES.get(n, n) for n in ours} == set(theirs)
    for name, method in ours.items():
        twin = theirs[ASYNC_NAMES.get(name, name)]
        s, a = inspect.signature(method), inspect.signature(twin)  # type: ignore[arg-type]
        assert list(s.parameters) == list(a.parameters), name
        for p, q in zip(s.parameters.values(), a.parameters.values()):
            assert (p.kind, p.default, as_async(p.annotation)) == (q.kind, q.default, q.annotation), f"{name}({p.name})"
        assert as_async(s.return_annotation) == a.return_annotation, name
        assert twin.__doc__ == method.__doc__, name  # the async docstring is the sync one's
        assert method.__doc__ or name in ASYNC_NAMES, f"{name} has no docstring"


@pytest.mark.parametrize("cls", [AsyncClient, AsyncRunHandle])
def test_async_calls_are_awaited_and_streams_iterated_with_async_for(cls: type) -> None:
    for name, method in public(cls).items():
        if name in ITERATORS:
            assert not inspect.iscoroutinefunction(method), name
            assert inspect.signature(method).return_annotation.startswith("AsyncIterator["), name
        else:
            assert inspect.iscoroutinefunction(method), name


def test_the_constructors_are_one_definition() -> None:
    assert inspect.signature(Client) == inspect.signature(AsyncClient)
    assert inspect.signature(RunHandle) == inspect.signature(AsyncRunHandle)


def test_the_sdk_keeps_its_first_module_name() -> None:
    import raysampler.client as old
    import raysampler.sdk as new

    for name in (
        "Client",
        "AsyncClient",
        "RunHandle",
        "AsyncRunHandle",
        "APIError",
        "DrawBatch",
        "RetryPolicy",
        "Verify",
        "service_address",
        "DEFAULT_URL",
        "LATEST",
        "KEYS_FILE",
        "RETRY_STATUS",
    ):
        assert getattr(old, name) is getattr(new, name), name
