"""The OpenAPI document with exact integer bounds.

FastAPI passes the document through its own OpenAPI models, whose `minimum`/`maximum`/`exclusiveMinimum`/
`exclusiveMaximum` are floats: `seed < 2**63` comes out as `exclusiveMaximum: 9.223372036854776e+18`, a bound a
client or a test generator reading it as a float (or rounding 2**63 + 190 to it) takes to allow seeds the service
refuses. Here the integer bounds of the service's models are copied back from pydantic's own schema (exact ints),
every bound of an integer schema is written as an integer, and an exclusive one as the inclusive bound it means
(`maximum: 9223372036854775807`), so what the document allows is exactly what the service accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

_BOUNDS = ("minimum", "maximum")


def _exact(node: dict[str, Any]) -> None:
    """Integer bounds of one integer schema node, exact and inclusive."""
    for bound in ("exclusiveMinimum", "exclusiveMaximum"):
        if isinstance(node.get(bound), int | float) and not isinstance(node[bound], bool):
            value = node.pop(bound)
            inclusive = "minimum" if bound == "exclusiveMinimum" else "maximum"
            if inclusive == "minimum":
                new = math.floor(value) + 1
                node[inclusive] = max(node.get(inclusive, new), new)
            else:
                new = math.ceil(value) - 1
                node[inclusive] = min(node.get(inclusive, new), new)
    for bound in _BOUNDS:
        value = node.get(bound)
        if isinstance(value, float) and math.isfinite(value):
            node[bound] = math.ceil(value) if bound == "minimum" else math.floor(value)


def exact_integer_bounds(doc: Any) -> None:
    """Rewrite, in place, the bounds of every `type: integer` schema in an OpenAPI document."""
    if isinstance(doc, dict):
        if doc.get("type") == "integer":
            _exact(doc)
        for value in doc.values():
            exact_integer_bounds(value)
    elif isinstance(doc, list):
        for value in doc:
            exact_integer_bounds(value)


def _integer_nodes(node: Any) -> list[dict[str, Any]]:
    """The `type: integer` schemas of one property (itself, or the members of its anyOf/oneOf)."""
    if not isinstance(node, dict):
        return []
    if node.get("type") == "integer":
        return [node]
    return [
        m for key in ("anyOf", "oneOf") for m in node.get(key, []) if isinstance(m, dict) and m.get("type") == "integer"
    ]


def pydantic_bounds(doc: dict[str, Any]) -> None:
    """Copy, in place, the integer bounds of the service's request and response models from pydantic's own JSON
    schema (exact Python ints) over the document's float ones."""
    from raysampler.service import schemas

    for name, component in doc.get("components", {}).get("schemas", {}).items():
        base, _, mode = name.partition("-")
        model = getattr(schemas, base, None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            continue
        exact = model.model_json_schema(mode="serialization" if mode == "Output" else "validation")
        for prop, node in component.get("properties", {}).items():
            for target, source in zip(_integer_nodes(node), _integer_nodes(exact.get("properties", {}).get(prop))):
                for bound in (*_BOUNDS, "exclusiveMinimum", "exclusiveMaximum"):
                    target.pop(bound, None)
                    if bound in source:
                        target[bound] = source[bound]


def install(app: FastAPI) -> None:
    """Serve `app`'s OpenAPI document with exact integer bounds (built once, as FastAPI does)."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = build()  # stores the document in app.openapi_schema
            pydantic_bounds(doc)
            exact_integer_bounds(doc)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
