"""Spec translation: a `RunSpec` becomes engine objects (model, shards) and run options, checked at submit the way the
run will check them, so a spec the engine would reject is a 422 naming the field rather than a FAILED run later.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from .. import datasets as rs_datasets
from ..algorithms import ALGORITHMS, Algorithm, get_algorithm
from ..errors import ArgumentError, PathPart
from ..grants import ACCESS_RULE, AccessRefused, DataGrants, check_lexical
from ..models.contract import DataSpec, Model
from ..options import RunOptions
from ..privacy.dp import DP, with_privacy
from ..runtime.binding import validate_run
from ..runtime.sites import probe_shards
from ..shards import DataTable, Shard, ShardSet, shard
from .datasets import load_dataset
from .errors import AccessDenied, FieldError
from .schemas import BUILTIN_PREFIX, DataRef, RunSpec
from .settings import Settings
from .store import RecordStore

MAX_BUILTIN_ROWS = 5_000_000  # generated data sets are built in the service process: bound their size
MAX_BUILTIN_DIM = 10_000


class SpecError(FieldError):
    """A run spec the engine rejects; `loc` names the field (as in pydantic's errors)."""


@dataclass(frozen=True)
class Built:
    """What a spec names, ready for `rs.Run`: the model, the shards, the algorithm with its parameters, rows n and
    the parameter dimension d."""

    model: Model
    shards: ShardSet
    algorithm: Algorithm
    n: int
    d: int


def _refused(i: int) -> AccessDenied:
    """The one answer to a site shard outside the tenant's grants: the field and the rule, nothing about the file."""
    return AccessDenied(("data", "shards", i, "path"), f"data.shards[{i}].path is refused: {ACCESS_RULE}")


def run_options(spec: RunSpec, chains_cap: int | None = None) -> RunOptions:
    """The run's length and bookkeeping as the engine validates them (burn-in default, totals); a combination the
    engine refuses is a SpecError naming the field. `chains_cap`: the most chains the service's quotas allow a
    chains="auto" run (`Settings.chains_cap`), beside the spec's own max_chains."""
    try:
        return _options(spec, chains_cap)
    except ValueError as exc:
        raise SpecError(rest_loc(spec, exc, ("num_rounds",)), str(exc)) from None


def quota_options(spec: RunSpec, settings: Settings, dim: int) -> RunOptions:
    """`run_options` under the service's per-run quotas: a chains="auto" run chooses no more chains than they allow
    (`Settings.chains_cap`; the quotas themselves are checked on the default count at submit)."""
    plain = run_options(spec)
    cap = settings.chains_cap(dim, plain.max_draws)
    return plain if cap is None else run_options(spec, cap)


def _options(spec: RunSpec, chains_cap: int | None) -> RunOptions:
    # the quotas' cap bounds what chains "auto" may choose; a count the spec names was checked against them at submit
    caps = [c for c in (spec.max_chains, chains_cap if spec.chains == "auto" else None) if c is not None]
    return RunOptions(
        chains=spec.chains,
        max_chains=min(caps) if caps else None,
        num_rounds=spec.num_rounds,
        burn_in=spec.burn_in,
        thin=spec.thin,
        seed=spec.seed,
        time_budget_s=spec.time_budget_s,
        target_ess=spec.target_ess,
        max_rhat=spec.max_rhat,
        max_rounds=spec.max_rounds,
        pipeline=spec.pipeline,
        secure_sums=spec.secure_sums,
    )


def check_secure_sums(spec: RunSpec, algorithm: Algorithm) -> None:
    """secure_sums needs an algorithm that sends only sums (SpecError at secure_sums naming it) and the privacy
    extra where the service runs."""
    if not spec.secure_sums:
        return
    try:
        algorithm.for_secure_sums()
    except ArgumentError as exc:
        raise SpecError(("secure_sums",), str(exc)) from None
    from ..extras import MissingExtraError, require

    try:
        require("privacy", "secure_sums")
    except MissingExtraError as exc:
        raise SpecError(("secure_sums",), str(exc)) from None


def spec_hash(spec: RunSpec) -> str:
    """What makes two submits the same run (the client-chosen run_id aside)."""
    body = spec.model_dump(mode="json", exclude={"run_id"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


Loc = tuple[str | int, ...]

#: Engine argument path (`ArgumentError.path`) -> RunSpec field (a 422's `loc`); the longest listed prefix of a path
#: decides. A model argument that is not listed keeps its name (("model", arg, ...) -> ("model", arg)).
REST_LOC: dict[tuple[PathPart, ...], Loc] = {
    ("model", "family"): ("model", "family"),
    ("model", "offset"): ("model", "offset_column"),
    ("model", "trials"): ("model", "trials_column"),
    ("model", "censored"): ("model", "censored_column"),
    ("model", "sigma"): ("model", "sigma_formula"),
    ("algorithm",): ("algorithm", "params"),
    ("strategy",): ("shard_strategy",),
    ("by",): ("shard_by",),
    ("num_shards",): ("num_shards",),
    ("privacy",): ("privacy",),
    **{("privacy", f): ("privacy", f) for f in ("epsilon", "delta", "clip")},
    **{(f.name,): (f.name,) for f in dataclasses.fields(RunOptions)},
}


def rest_loc(spec: RunSpec, exc: BaseException, default: Loc) -> Loc:
    """The RunSpec field an engine error names by its path (`REST_LOC`), else `default`: also for a model argument
    the spec does not set (e.g. columns, fixed from the data) and for errors that carry no path."""
    path = exc.path if isinstance(exc, ArgumentError) else ()
    own = spec.model.coef_priors or {}
    if path[:2] == ("model", "priors") and len(path) > 2 and str(path[2]).removeprefix("b_") in own:
        return ("model", "coef_priors", str(path[2]).removeprefix("b_"))  # a coefficient's own prior, by its name
    if path[:2] == ("model", "placement") and spec.model.group_placement is not None:
        return ("model", "group_placement", *path[2:])  # a grouping column's placement, by the column
    if path[:1] == ("model",) and len(path) > 1 and path[1] != "family" and path[1] not in spec.model.arg_names():
        return default
    for k in range(len(path), 0, -1):
        if path[:k] in REST_LOC:
            return REST_LOC[path[:k]]
    if len(path) > 1 and path[0] == "model" and isinstance(path[1], str):
        return ("model", path[1])
    return default


def load_data(spec: RunSpec, tenant: str, store: RecordStore) -> DataTable:
    """(X, y) and X's column names, named by spec.data: a built-in data set or one the tenant uploaded."""
    return load_data_ref(spec.data, tenant, store)


def load_data_ref(data: DataRef, tenant: str, store: RecordStore) -> DataTable:
    """(X, y) and X's column names of a built-in or uploaded data set (`data` names one); SpecError naming the
    field for an unknown one, or one of another tenant (never found)."""
    if data.dataset is not None:
        name = data.dataset.removeprefix(BUILTIN_PREFIX)
        if name not in rs_datasets.available():
            raise SpecError(
                ("data", "dataset"),
                f"unknown built-in data set {name!r}; valid: "
                f"{', '.join(BUILTIN_PREFIX + n for n in rs_datasets.available())}",
            )
        for key, cap in (("n", MAX_BUILTIN_ROWS), ("d", MAX_BUILTIN_DIM)):
            value = data.options.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > cap:
                raise SpecError(
                    ("data", "options", key), f"{key} must be at most {cap} for a built-in data set, got {value}"
                )
        try:
            X, y = rs_datasets.load(name, **data.options)
            cols = rs_datasets.columns(name, **{k: v for k, v in data.options.items() if k != "seed"})
            return DataTable(X, y, cols if len(cols) == X.shape[1] else None, target="y")
        except (TypeError, ValueError, MemoryError) as exc:
            raise SpecError(
                ("data", "options"), f"{type(exc).__name__}: {exc}" if isinstance(exc, MemoryError) else str(exc)
            ) from None
    assert data.dataset_id is not None  # DataRef holds exactly one of the two
    rec = store.get_dataset(tenant, data.dataset_id)
    if rec is None:
        raise SpecError(("data", "dataset_id"), f"no data set {data.dataset_id!r} (upload it with POST /v1/datasets)")
    return load_dataset(rec)


def model_table(table: DataTable, model: Model, data: DataRef) -> DataTable:
    """A built-in or uploaded data set as the model reads it: for a formula (a model that reads whole tables) y back
    among the columns under its name, since the formula names its response (`DataTable.with_target_column`); for
    any other model the table as it is, which must have a target: SpecError naming the data set when its upload had
    none (no column 'y' and no y_column)."""
    if getattr(model, "reads_tables", False):
        return table.with_target_column()
    if table.target is None:
        raise SpecError(
            ("data", "dataset_id"),
            f"data set {data.dataset_id} has no target column (it was uploaded with no column 'y' and no "
            "y_column): only a formula, which names its response, reads it; upload it again with y_column=...",
        )
    return table


def build(
    spec: RunSpec, tenant: str, store: RecordStore, executor: str = "ray", grants: DataGrants | None = None
) -> Built:
    """Engine objects for a spec, checked the way the run will check them; errors are SpecError naming the field.
    Site shards must lie within the tenant's `grants` (none: no site shard) and are checked by asking their sites'
    nodes (`build_site_shards`): this process never opens them."""
    try:
        spec.model.params()  # builds the priors: their errors' paths are the prior's own arguments
    except (ValueError, TypeError) as exc:  # group effects name their own field (model.group_effects)
        raise SpecError(rest_loc(spec, exc, ("model",)), str(exc)) from None
    try:
        model = spec.model.engine_model()
    except (ValueError, TypeError) as exc:
        raise SpecError(rest_loc(spec, exc, ("model",)), str(exc)) from None
    try:
        privacy = None if spec.privacy is None else DP(**spec.privacy.model_dump())
        params = with_privacy(spec.algorithm.name, privacy, spec.algorithm.params)
        algorithm = get_algorithm(spec.algorithm.name, **params)
    except (ValueError, TypeError) as exc:
        where = ("algorithm", "name") if spec.algorithm.name not in ALGORITHMS else ("algorithm", "params")
        path = exc.path if isinstance(exc, ArgumentError) else ()
        raise SpecError(tuple(path) if path[:1] == ("privacy",) else where, str(exc)) from None
    check_secure_sums(spec, algorithm)
    if spec.pipeline is True and spec.algorithm.name != "dglmc":
        raise SpecError(
            ("pipeline",), f"pipeline=true runs DG-LMC's batched chains in two groups; {spec.algorithm.name!r} has none"
        )
    if spec.data.shards is not None:
        return build_site_shards(spec, model, algorithm, executor, tenant, grants or DataGrants())
    table = model_table(load_data(spec, tenant, store), model, spec.data)
    X, y, cols, levels = table.X, table.y, table.columns, table.levels
    by = spec.sharding_column()
    if by is not None and spec.shard_by is None and (cols is None or by not in cols):  # by from group_effects[0]
        raise SpecError(
            ("model", "group_effects", 0, "group"),
            f"group_effects[0].group: {by!r} is not a column of the data (columns: {list(cols or ())})",
        )
    try:
        shards = (
            shard(X, y, num_shards=spec.num_shards, seed=spec.seed, columns=cols, by=by, levels=levels)
            if by is not None
            else shard(
                X,
                y,
                num_shards=spec.num_shards,
                strategy=spec.shard_strategy or "contiguous",
                seed=spec.seed,
                columns=cols,
                levels=levels,
            )
        )
    except ValueError as exc:
        raise SpecError(rest_loc(spec, exc, ("num_shards",)), str(exc)) from None
    try:
        _, d = validate_run(model, shards, algorithm, spec.chain_count, spec.seed)
    except (ValueError, TypeError) as exc:
        loc = rest_loc(spec, exc, ("data",))
        if loc == ("data",):
            raise SpecError(loc, f"the data do not fit model family {spec.model.family!r}: {exc}") from None
        raise SpecError(loc, str(exc)) from None
    return Built(model, shards, algorithm, int(X.shape[0]), d)


def check_formula_columns(spec: RunSpec, model: Model, columns: tuple[str, ...] | None) -> None:
    """At submit, from the site files' headers (every shard has the same columns): a formula's response and every
    column it reads must be columns of the files (SpecError at model.formula naming the one missing), and a
    data.y_column other than the default must be the formula's response, and no x_columns be chosen (a formula reads
    the files whole)."""
    check = getattr(model, "check_columns", None)
    if check is None:
        return
    response = model.response  # type: ignore[attr-defined]
    if spec.data.x_columns is not None:
        raise SpecError(
            ("data", "x_columns"),
            "data.x_columns: a formula names the columns it reads and its files are read whole; leave x_columns out",
        )
    if spec.data.y_column not in ("y", response):
        raise SpecError(
            ("data", "y_column"),
            f"data.y_column {spec.data.y_column!r} is not the formula's response {response!r}: a formula names its "
            "response, so its data need no y_column",
        )
    try:
        check(columns)
    except ArgumentError as exc:
        raise SpecError(("model", "formula"), f"{exc.message} (data.shards[0]'s header)") from None


def site_shards(data: DataRef, tenant: str, grants: DataGrants, tables: bool = False) -> list[Shard]:
    """`data.shards` as engine Shards that only their sites read, each path checked against the tenant's grants on
    its site as written (AccessDenied naming data.shards[i]); the site checks it again, links resolved, before
    reading. `tables` (a formula): files read whole unless the spec chooses feature columns (the response is a
    column, read by name)."""
    x_cols = tuple(data.x_columns) if data.x_columns is not None else None
    y_column: str | None = None if tables and x_cols is None else data.y_column
    shards = []
    for i, ref in enumerate(data.shards or []):
        prefixes = grants.prefixes(tenant, ref.site)
        try:
            path = check_lexical(ref.path, prefixes)
        except AccessRefused:
            raise _refused(i) from None
        try:
            shards.append(Shard(path=path, site=ref.site, y_column=y_column, x_columns=x_cols, grants=prefixes))
        except ValueError as exc:
            raise SpecError(("data", "shards", i), f"shards[{i}]: {exc}") from None
    return shards


def build_site_shards(
    spec: RunSpec, model: Model, algorithm: Algorithm, executor: str, tenant: str, grants: DataGrants
) -> Built:
    """Shards that stay on their sites: each path must lie within the tenant's grants on its site (as written here,
    then with symlinks resolved on the site, before any byte is read); each is checked by a short task on a node of
    its site that stats the file and reads its header (never the data); the columns must agree; the model is bound
    from the header."""
    refs = spec.data.shards or []
    if executor != "ray":
        raise SpecError(
            ("data", "shards"),
            "shards on sites need the service to run on Ray (executor 'ray'), "
            "where each shard's worker runs on a node of its site",
        )
    shards = site_shards(spec.data, tenant, grants, tables=getattr(model, "reads_tables", False))
    probes = probe_shards(shards)
    first = None
    for i, (ref, probe) in enumerate(zip(refs, probes)):
        assert probe is not None
        if probe.refused:
            raise _refused(i)
        if not probe.ok:
            raise SpecError(
                ("data", "shards", i),
                f"shards[{i}] ({ref.path} on site {ref.site!r}"
                f"{', host ' + probe.hostname if probe.hostname else ''}): {probe.error}",
            )
        if first is None:
            first = probe
        elif (probe.columns, probe.n_features) != (first.columns, first.n_features):
            raise SpecError(
                ("data", "shards", i),
                f"shards[{i}] has columns "
                f"{list(probe.columns) if probe.columns else probe.n_features} but shards[0] has "
                f"{list(first.columns) if first.columns else first.n_features}: every shard must have "
                "the same columns",
            )
    assert first is not None and first.n_features is not None
    check_formula_columns(spec, model, first.columns)
    rows = [p.n_rows for p in probes if p is not None]
    n = sum(r for r in rows if r is not None) if all(r is not None for r in rows) else 0
    d = 0
    # the number of classes needs the labels, a formula's width the categories' levels: both at run time
    if model.target_kind != "multiclass" and not getattr(model, "reads_tables", False):
        try:
            bound = model.bind(DataSpec(n_features=first.n_features, columns=first.columns))
        except ValueError as exc:  # e.g. a per-row column (offset, trials, noise_sd) the files do not have
            raise SpecError(rest_loc(spec, exc, ("data", "shards", 0)), str(exc)) from None
        d = int(bound.dim)
        try:
            algorithm.check_shapes(len(shards), d, spec.chain_count)
        except ValueError as exc:
            raise SpecError(rest_loc(spec, exc, ("algorithm", "params")), str(exc)) from None
    return Built(model, shard(shards), algorithm, n, d)
