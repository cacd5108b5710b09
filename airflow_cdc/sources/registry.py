"""One registry of change sources: the built-in kinds, installed packages, import paths.

A source is found by the name a pipeline gives (``source=`` of ``CdcPipeline``):

* a built-in kind (:data:`BUILT_IN`);
* a kind another installed package registers under the entry point group
  :data:`ENTRY_POINT_GROUP` (``[project.entry-points."airflow_cdc.sources"]``
  ``my_kind = "my_package.source:MySource"`` in its ``pyproject.toml``);
* an import path ``module:Class`` (a package in the DAGs folder, say).

The stream's spec records the import path of a source that is not built in (``class``), so
Spark executors import it directly: the extract task ships the source's top-level package
(or module) with the job when it is not installed (:func:`source_package`: a package in the
DAGs folder, say); an installed package must be installed where Spark runs too.
Nothing here imports a source before it is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from airflow_cdc.model import CdcError, validate_identifier

ENTRY_POINT_GROUP = "airflow_cdc.sources"
BUILT_IN = {
    "spanner_change_stream": "airflow_cdc.sources.spanner.source:SpannerChangeStreamSource",
    "datastream": "airflow_cdc.sources.datastream.source:DatastreamSource",
    "bigtable_change_stream": "airflow_cdc.sources.bigtable.source:BigtableChangeStreamSource",
    "debezium": "airflow_cdc.sources.debezium.source:DebeziumSource",
    "spanner_commit_ts": "airflow_cdc.sources.spanner_commit_ts.source:SpannerCommitTimestampSource",
}
# The spec key that names a source's class by import path (not part of its fingerprint).
CLASS_KEY = "class"


class UnknownSourceError(CdcError):
    pass


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def source_path(name: str) -> str:
    """The ``module:Class`` of the source ``name`` (a kind or an import path)."""
    if ":" in name:
        return name
    if name in BUILT_IN:
        return BUILT_IN[name]
    installed = _entry_points()
    if name in installed:
        return installed[name]
    raise UnknownSourceError(
        f"source {name!r} is unknown to this airflow-cdc: known kinds are "
        f"{sorted(BUILT_IN) + sorted(installed)}; name your own source by import path "
        f"('package.module:Class') or register it under the entry point group "
        f"{ENTRY_POINT_GROUP!r}"
    )


def source_class(name: str) -> type:
    """The :class:`~airflow_cdc.sources.base.ChangeSource` subclass named ``name``."""
    from airflow_cdc.sources.base import ChangeSource

    path = source_path(name)
    module_name, _, attribute = path.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise UnknownSourceError(
            f"source {name!r} names {path!r}, which cannot be imported here "
            f"({type(error).__name__}: {error}): install its package where this runs"
        ) from error
    if not (isinstance(found, type) and issubclass(found, ChangeSource)) or not found.kind:
        raise UnknownSourceError(
            f"source {name!r} names {path!r}, which is not a ChangeSource subclass with a "
            f"kind: derive it from airflow_cdc.sources.base.ChangeSource and set kind"
        )
    validate_identifier("source kind", found.kind)
    if ":" not in name and found.kind != name:
        raise UnknownSourceError(
            f"source kind {name!r} is registered as {path!r}, whose kind is {found.kind!r}: "
            f"register it under the entry point name {found.kind!r}"
        )
    return found


def class_of_spec(spec: Mapping[str, Any]) -> type:
    """The source class a stream's spec names (its recorded import path, else its kind)."""
    return source_class(spec.get(CLASS_KEY) or spec["kind"])


def build_source(spec: Mapping[str, Any], options: Mapping[str, Any] | None = None):
    """The source configured from a stream's spec (and a plan's options), on either side."""
    return class_of_spec(spec).from_spec(spec, options)


def source_spec(name: str, stream_id: str, spec: Mapping[str, Any]) -> dict:
    """The spec a stream records for source ``name``: validated by the source, with its kind,
    the stream id and, for a source that is not built in, its import path."""
    cls = source_class(name)
    recorded = {**cls.validate_spec(stream_id, spec), "kind": cls.kind, "stream_id": stream_id}
    path = f"{cls.__module__}:{cls.__qualname__}"
    if BUILT_IN.get(cls.kind) != path:
        recorded[CLASS_KEY] = path
    return recorded


def source_package(spec: Mapping[str, Any]) -> str | None:
    """The top-level package (or module) a Spark job must carry to import the stream's
    source, or None: a built-in source, or one installed as a distribution (executors import
    it as installed, as they import airflow-cdc itself)."""
    import importlib.util
    from pathlib import Path

    path = spec.get(CLASS_KEY)
    if not path:
        return None
    top = path.partition(":")[0].split(".")[0]
    if top == "airflow_cdc":
        return None
    found = importlib.util.find_spec(top)
    origin = (found.origin or "") if found else ""
    locations = list(found.submodule_search_locations or []) if found else []
    where = Path(locations[0] if locations else origin)
    if any(part in ("site-packages", "dist-packages") for part in where.parts):
        return None
    return top


def source_covers(name: str | None):
    """The gate's rule of the source ``name`` (the base rule when None)."""
    from airflow_cdc.sources.base import ChangeSource

    return (source_class(name) if name else ChangeSource).covers
