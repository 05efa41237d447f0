"""When the SDK sends a request again, and how long it waits first (`RetryPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from .requests import Request

#: Answers that say the service (or a proxy in front of it) is briefly unavailable: an idempotent request is resent.
RETRY_STATUS = frozenset({502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """When to send a request again and how long to wait first: exponential back-off, `retries` times at most."""

    retries: int = 3
    backoff_s: float = 0.5

    def after_response(self, call: Request, resp: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before resending after `resp` (a 502/503/504 to an idempotent call), else None."""
        if resp.status_code in RETRY_STATUS and call.idempotent and attempt < self.retries:
            return self.backoff_s * 2**attempt
        return None

    def after_error(self, call: Request, exc: httpx.TransportError, attempt: int) -> float | None:
        """Seconds to wait before resending after a transport error, else None (re-raise): a request that cannot
        have reached the service, or one that is harmless to send twice."""
        reached = not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))
        if attempt >= self.retries or (reached and not call.idempotent):
            return None
        return self.backoff_s * 2**attempt

    def reconnect_after(self, failures: int) -> float | None:
        """Seconds to wait before reopening a stream after `failures` drops in a row, else None (give up)."""
        return None if failures > self.retries else self.backoff_s * 2**failures
