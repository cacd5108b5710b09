"""Spanner change streams (seed 000) behind the seam: the source class.

Partitions split and merge (child partitions records), so extract reads in rounds
(:mod:`.reader`, one bounded query per partition); the evidence for ``[s, e)`` is the bounded
query's heartbeats, there at ``e`` already (:mod:`.readiness`); records are parsed by
:mod:`.records` and mapped to change rows by :mod:`.mapping`, their column types by
:mod:`.types`.
"""

from __future__ import annotations

import dataclasses

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.sources.base import ChangelogRows, ChangeSource, PartitionRead
from airflow_cdc.sources.spanner.mapping import ORDERING_KEY_PARTS
from airflow_cdc.sources.spanner.query import GOOGLE_SQL, INITIAL_PARTITION, validate_query_settings
from airflow_cdc.sources.spanner.reader import SpannerConnection, read_partition


class SpannerChangeStreamSource(ChangeSource):
    """Spanner change streams (seed 000) behind the seam (:class:`~airflow_cdc.sources.base.ChangeSource`).

    Partitions split and merge (child partitions records), so extract reads in rounds; the
    evidence for ``[s, e)`` is the bounded query's heartbeats, there at ``e`` already. The
    Airflow side (:class:`~airflow_cdc.hooks.spanner.SpannerChangeStreamHook`) resolves the
    project and mints a short-lived token, merged into the spec's ``connection`` for the job.
    """

    kind = "spanner_change_stream"
    ordering_key_parts = ORDERING_KEY_PARTS
    partitions_split = True
    airflow_hook = "airflow_cdc.hooks.spanner:SpannerChangeStreamHook"
    proves_empty_windows = True  # bounded queries, read anywhere the client runs

    def __init__(
        self,
        connection: SpannerConnection,
        stream_name: str,
        dialect: str = GOOGLE_SQL,
        heartbeat_milliseconds: int = 10_000,
        stream_id: str | None = None,
        progress_every_seconds: float = 30.0,
    ) -> None:
        # Validates the name and heartbeat now, before any task is scheduled.
        validate_query_settings(dialect, stream_name, heartbeat_milliseconds)
        self.connection = connection
        self.stream_name = stream_name
        self.dialect = dialect
        self.heartbeat_milliseconds = heartbeat_milliseconds
        self.stream_id = stream_id or stream_name
        self.progress_every_seconds = progress_every_seconds
        self.spec = {
            "stream_name": stream_name,
            "dialect": dialect,
            "heartbeat_milliseconds": heartbeat_milliseconds,
            "connection": {
                "project": connection.project,
                "instance": connection.instance,
                "database": connection.database,
            },
        }
        self.options = {}
        self._database = None

    @classmethod
    def from_spec(cls, spec, options=None) -> SpannerChangeStreamSource:
        return cls(
            connection=SpannerConnection(**spec["connection"]),
            stream_name=spec["stream_name"],
            dialect=spec.get("dialect", GOOGLE_SQL),
            heartbeat_milliseconds=int(spec.get("heartbeat_milliseconds", 10_000)),
            stream_id=spec.get("stream_id"),
        )

    @classmethod
    def validate_spec(cls, stream_id: str, spec) -> dict:
        """``stream_name``, ``dialect``, ``heartbeat_milliseconds`` and ``connection``
        (``project``, ``instance``, ``database``); checked as queries need them, without the
        client library (``query.validate_query_settings``)."""
        spec = dict(spec)
        connection = dict(spec.get("connection") or {})
        for name in ("instance", "database"):
            if not connection.get(name):
                raise ValueError(
                    f"Spanner change stream {spec.get('stream_name')!r} of stream {stream_id!r} "
                    f"has no {name}: give instance_id and database_id"
                )
        spec["dialect"] = spec.get("dialect", GOOGLE_SQL)
        spec["heartbeat_milliseconds"] = int(spec.get("heartbeat_milliseconds", 10_000))
        spec["connection"] = {"project": connection.get("project") or "",
                              "instance": connection["instance"], "database": connection["database"]}
        validate_query_settings(spec["dialect"], spec.get("stream_name"), spec["heartbeat_milliseconds"])
        return spec

    def extract_overrides(self, hook) -> dict:
        """Where executors reach the database: the resolved project, the emulator or a token."""
        resolved = hook.connection_for(
            self.connection.instance, self.connection.database, self.connection.project or None
        )
        return {
            "connection": {
                "project": resolved.project,
                "emulator_host": resolved.emulator_host,
                "access_token": resolved.access_token,
            }
        }

    def canonical_type(self, source_type) -> str:
        """A Spanner type (type object, ``column_types`` entry or DDL name) -> its canonical name."""
        from airflow_cdc.sources.spanner.types import canonical_type

        return str(canonical_type(source_type))

    def lineage_inputs(self, resolved) -> list[tuple[str, str]]:
        """Named as the google provider names Spanner: ``spanner://<project>/<instance>``,
        ``<database>.<change stream>``."""
        project = (
            self.connection.project
            or (resolved.get("connection") or {}).get("project")
            or "unknown-project"
        )
        return [(f"spanner://{project}/{self.connection.instance}",
                 f"{self.connection.database}.{self.stream_name}")]

    def initial_positions(self, window: Window) -> list[PartitionPosition]:
        return [PartitionPosition(partition_id=INITIAL_PARTITION, start=window.start)]

    def prepare_reads(self) -> None:
        """The client library loaded and the database opened (its imports are slow)."""
        import google.api_core.exceptions  # noqa: F401 - loaded now, used by read_partition

        if self._database is None:
            self._database = self.connection.open_database()

    def read_partition(self, window: Window, position: PartitionPosition) -> PartitionRead:
        """Steps 1-5 of :mod:`.reader` for one partition."""
        read, rows = read_partition(self, window, position, list)
        return dataclasses.replace(read, rows=tuple(rows))

    def read_partition_tuples(
        self, window: Window, position: PartitionPosition
    ) -> tuple[PartitionRead, list, list]:
        """:meth:`read_partition` with each record's rows made into changelog tuples as the
        stream delivers it (``ChangelogRows``), not once the stream has ended.

        A performance strategy. Saves: the conversion runs while the server prepares the
        stream's next response rather than after the stream, when the task asks nothing of the
        server (``bench/extract.py``, docs/performance.md).
        """
        read, rows = read_partition(
            self, window, position, lambda: ChangelogRows(window.stream_id, window.window_id))
        return read, rows.tuples, rows.dead_letters(read.dead_letters)
