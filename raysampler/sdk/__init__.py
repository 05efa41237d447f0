"""The Python SDK of the raysampler service: `Client` (sync, safe inside Jupyter) and `AsyncClient` (asyncio), the
same calls either way.

Each operation is written once (`operations`), as a generator that yields what to send and receives the answers
(`protocol`); the two clients are drivers that do the I/O with httpx. Requests are values (`requests`), retried by
one policy (`retry`); answers are typed (`raysampler.wire`) and turned into pandas, numpy, xarray or the engine's
`Result` (`frames`). The SDK imports no server code.
"""

from .async_client import AsyncClient, AsyncRunHandle
from .client import Client, RunHandle
from .connection import DEFAULT_URL, KEYS_FILE, LATEST, Verify, service_address
from .draws import DrawBatch
from .errors import APIError
from .retry import RETRY_STATUS, RetryPolicy

__all__ = [
    "DEFAULT_URL",
    "KEYS_FILE",
    "LATEST",
    "RETRY_STATUS",
    "APIError",
    "AsyncClient",
    "AsyncRunHandle",
    "Client",
    "DrawBatch",
    "RetryPolicy",
    "RunHandle",
    "Verify",
    "service_address",
]
