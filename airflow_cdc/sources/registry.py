"""Builds a source adapter from the JSON spec carried in a plan file (on Spark executors)."""

from __future__ import annotations

from airflow_cdc.model import CdcError


class UnknownSourceError(CdcError):
    pass


def build_source(spec: dict):
    """The adapter named by ``spec["kind"]``, configured from the rest of ``spec``."""
    kind = spec.get("kind")
    if kind == "spanner_change_stream":
        from airflow_cdc.sources.spanner.reader import SpannerChangeStreamSource, SpannerConnection

        return SpannerChangeStreamSource(
            connection=SpannerConnection(**spec["connection"]),
            stream_name=spec["stream_name"],
            dialect=spec["dialect"],
            heartbeat_milliseconds=int(spec["heartbeat_milliseconds"]),
            stream_id=spec["stream_id"],
        )
    raise UnknownSourceError(
        f"source kind {kind!r} is unknown to this airflow-cdc: known kinds are "
        f"['spanner_change_stream']"
    )
