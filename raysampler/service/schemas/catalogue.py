"""What the service offers: the data sets a tenant uploaded and the model families with their parameters' schemas
(GET /v1/datasets, GET /v1/models)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, TypeAdapter

from ...models import FAMILY_INFO, Family
from .runs import ModelSpec


class DatasetInfo(BaseModel):
    id: str
    name: str
    n: int
    d: int
    created_at: float
    bytes: int


class DatasetList(BaseModel):
    datasets: list[DatasetInfo]


class ModelFamilyInfo(BaseModel):
    """A model family a run spec may name: built-in, or registered by an installed package (entry-point group
    `raysampler.models`), with the JSON schema of the parameters its `model` object takes."""

    name: str
    description: str = Field(description="the first line of the family's docstring")
    builtin: bool
    distribution: str | None = Field(description="the installed distribution that registers it (null: built-in)")
    parameters: dict[str, Any] = Field(
        description="JSON schema of the family's parameters in a run spec's `model` object (besides `family`)"
    )


class ModelFamilyList(BaseModel):
    families: list[ModelFamilyInfo]


#: An engine model argument → its name in ModelSpec, where the two differ (per-row inputs are given by column).
REST_PARAM = {"offset": "offset_column", "trials": "trials_column", "censored": "censored_column"}


def family_parameters_schema(family: Family) -> dict[str, Any]:
    """The JSON schema of a family's declared parameters as a run spec gives them: the names and schemas of
    ModelSpec's own fields (priors by name, per-row inputs by column) where the engine argument has one, else derived
    from the dataclass field's type (pydantic), with its default and its metadata `description`."""
    spec_schema = ModelSpec.model_json_schema()
    spec_props = spec_schema["properties"]
    props: dict[str, Any] = {}
    required = []
    for param in family.params():
        rest = REST_PARAM.get(param.name, param.name)
        if rest in spec_props and rest != "family":
            prop = dict(spec_props[rest])
        else:
            try:
                prop = TypeAdapter(param.type).json_schema()
            except Exception:  # a type pydantic cannot describe: no constraint in the schema, the engine checks it
                prop = {}
            if not param.required:
                try:
                    prop["default"] = TypeAdapter(param.type).dump_python(param.default, mode="json")
                except Exception:
                    pass
        if param.description and "description" not in prop:  # the REST field's own description wins
            prop["description"] = param.description
        if param.required:
            required.append(rest)
        props[rest] = prop
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    if "$defs" in spec_schema:
        out["$defs"] = spec_schema["$defs"]
    return out


def model_families() -> ModelFamilyList:
    """Every registered family (`rs.models.FAMILY_INFO`), built-ins first in registration order."""
    return ModelFamilyList(
        families=[
            ModelFamilyInfo(
                name=fam.name,
                description=fam.description,
                builtin=fam.builtin,
                distribution=fam.distribution,
                parameters=family_parameters_schema(fam),
            )
            for fam in FAMILY_INFO.values()
        ]
    )
