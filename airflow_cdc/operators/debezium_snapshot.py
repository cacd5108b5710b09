"""Ask a running Debezium connector for an ad-hoc (incremental) snapshot, from a DAG.

    DebeziumIncrementalSnapshotOperator(
        task_id="backfill_open_orders",
        conn_id="shop_pg",                       # a postgres (or mysql) Airflow connection
        signal_table="public.debezium_signal",   # the connector's signal.data.collection
        data_collections=["public.orders"],
        additional_conditions={"public.orders": "status = 'open'"},
    )

The operator writes one row into the connector's signaling table (see
:mod:`airflow_cdc.sources.debezium.signals` for the signals, the table and the connector
properties): ``action`` ``execute`` (the default), ``stop``, ``pause`` or ``resume``.
Everything is checked before it connects; for ``execute`` it then checks that each table has
a primary key (or the ``surrogate_key`` column), and inserts the signal in one transaction.

The database is reached through the connection's own provider hook
(``BaseHook.get_connection(conn_id).get_hook()``: the Postgres provider's ``PostgresHook``
for type ``postgres``, the MySQL provider's ``MySqlHook`` for ``mysql``, also MariaDB), so the
driver and connection extras are the provider's.

The signal id is derived from the task instance (DAG, run, task, map index), so a retry of
the same run sends nothing new: the row is there already and is left alone. The return value
(XCom) is ``{"signal_id", "type", "data", "signal_table", "newly_sent"}``; ``newly_sent`` is
False on such a retry. A new snapshot needs a new DAG run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.providers.common.compat.sdk import AirflowFailException, BaseHook, BaseOperator

from airflow_cdc.sources.debezium.errors import InvalidSignalError, SignalTargetError
from airflow_cdc.sources.debezium.signals import (
    SNAPSHOT_TYPES,
    SnapshotSignal,
    parse_table_name,
    run_signal_id,
    send_signal,
)

ACTIONS = ("execute", "stop", "pause", "resume")
# Airflow connection type -> the dialect the signal is written in.
DIALECTS = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


class DebeziumIncrementalSnapshotOperator(BaseOperator):
    """Sends one Debezium snapshot signal (``action``) through the connection ``conn_id``.

    :param conn_id: a postgres or mysql (also MariaDB) Airflow connection to the captured
        database.
    :param signal_table: the connector's signaling table (``signal.data.collection``), as
        ``schema.table`` or ``database.table``.
    :param action: ``execute`` (the default), ``stop``, ``pause`` or ``resume``.
    :param data_collections: the tables to snapshot (``execute``) or to stop (``stop``; None:
        every table). Templated.
    :param snapshot_type: the snapshot's type (``incremental``, the default; ``execute``
        takes the others Debezium knows too).
    :param additional_conditions: ``execute`` only: a filter per table,
        ``{"public.orders": "status = 'open'"}``. Templated.
    :param surrogate_key: ``execute`` only: the column that chunks a table instead of its
        primary key. Templated.
    """

    template_fields = ("data_collections", "additional_conditions", "surrogate_key")
    ui_color = "#fdf1e8"

    def __init__(
        self,
        *,
        conn_id: str,
        signal_table: str,
        action: str = "execute",
        data_collections: str | Iterable[str] | None = None,
        snapshot_type: str = "incremental",
        additional_conditions: Mapping[str, str] | None = None,
        surrogate_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.signal_table = signal_table
        self.action = action
        if isinstance(data_collections, Iterable) and not isinstance(data_collections, (str, Mapping)):
            data_collections = list(data_collections)
        self.data_collections = data_collections
        self.snapshot_type = snapshot_type
        self.additional_conditions = additional_conditions
        self.surrogate_key = surrogate_key
        self._check_arguments()
        if not _templated(data_collections, additional_conditions, surrogate_key):
            self.signal("parse-time-check")  # wrong values fail the DAG file, not a run

    def _check_arguments(self) -> None:
        if self.action not in ACTIONS:
            raise InvalidSignalError(f"action {self.action!r}: use one of {list(ACTIONS)}")
        allowed_types = list(SNAPSHOT_TYPES) if self.action == "execute" else ["incremental"]
        if self.snapshot_type not in allowed_types:
            raise InvalidSignalError(
                f"snapshot_type {self.snapshot_type!r} for action {self.action!r}: use one of {allowed_types}")
        parse_table_name("signal_table", self.signal_table)
        given = {"data_collections": self.data_collections, "additional_conditions": self.additional_conditions,
                 "surrogate_key": self.surrogate_key}
        allowed = {"execute": set(given), "stop": {"data_collections"}, "pause": set(), "resume": set()}[self.action]
        extra = sorted(name for name, value in given.items() if value is not None and name not in allowed)
        if extra:
            why = ("only action 'execute' takes conditions and a surrogate key" if self.action == "stop"
                   else "pause and resume act on the running incremental snapshot")
            raise InvalidSignalError(f"action {self.action!r} takes no {', '.join(extra)}: leave them out ({why})")
        if self.action == "execute" and self.data_collections is None:
            raise InvalidSignalError(
                "action 'execute' needs data_collections: name the tables to snapshot, e.g. ['public.orders']"
            )

    def signal(self, signal_id: str) -> SnapshotSignal:
        """The signal this task sends, its values checked."""
        if self.action == "execute":
            return SnapshotSignal.execute_snapshot(
                self.data_collections, snapshot_type=self.snapshot_type,
                additional_conditions=self.additional_conditions, surrogate_key=self.surrogate_key,
                signal_id=signal_id)
        if self.action == "stop":
            return SnapshotSignal.stop_snapshot(self.data_collections, signal_id=signal_id)
        if self.action == "pause":
            return SnapshotSignal.pause_snapshot(signal_id=signal_id)
        return SnapshotSignal.resume_snapshot(signal_id=signal_id)

    def execute(self, context) -> dict[str, Any]:
        # 1. The signal, checked, with the id of this task instance (the same on every try).
        ti = context["ti"]
        signal_id = run_signal_id(self.dag_id, context["run_id"], self.task_id, getattr(ti, "map_index", -1))
        try:
            signal = self.signal(signal_id)
        except InvalidSignalError as error:
            raise AirflowFailException(str(error)) from error
        # 2. The connection's dialect, before connecting.
        connection = BaseHook.get_connection(self.conn_id)
        dialect = DIALECTS.get((connection.conn_type or "").lower())
        if dialect is None:
            raise AirflowFailException(
                f"connection {self.conn_id!r} has type {connection.conn_type!r}: the signal is "
                f"written to PostgreSQL (type postgres, the Postgres provider) or MySQL/MariaDB "
                f"(type mysql, the MySQL provider)"
            )
        # 3. Check the tables and insert the row, in one transaction, through the provider's hook.
        db = connection.get_hook().get_conn()
        try:
            newly_sent = send_signal(db, signal, self.signal_table, dialect=dialect,
                                     check_keys=self.action == "execute")
        except SignalTargetError as error:
            raise AirflowFailException(str(error)) from error
        finally:
            db.close()
        # 4. Say what was sent.
        if newly_sent:
            self.log.info("sent Debezium signal %s (%s) into %s: %s", signal.id, signal.type,
                          self.signal_table, signal.data_json)
        else:
            self.log.info("Debezium signal %s (%s) is already in %s (an earlier try of this run sent "
                          "it): not sent again", signal.id, signal.type, self.signal_table)
        return {"signal_id": signal.id, "type": signal.type, "data": signal.data,
                "signal_table": self.signal_table, "newly_sent": newly_sent}


def _templated(*values: Any) -> bool:
    """Whether any value (or a string inside it) holds a Jinja expression."""
    def texts(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                yield from texts(k)
                yield from texts(v)
        elif isinstance(value, Iterable):
            for item in value:
                yield from texts(item)

    return any("{{" in text or "{%" in text for value in values for text in texts(value))
