"""What differs between the Spark lines the jobs run on (3.5 and 4.x), decided in this one place.

The jobs keep one code path for every Spark; where a JVM name, a default or a bug differs
between the lines, the job asks here, and this module decides by the session's Spark version
(``spark.version``, the JVM's, which is the one that answers the py4j calls):

* the classic ``Dataset`` (the frame a py4j plan becomes) is ``org.apache.spark.sql.Dataset``
  on Spark 3.5 and ``org.apache.spark.sql.classic.Dataset`` on Spark 4, where the first name
  became the API-only base class shared with Spark Connect (:func:`dataset_of_plan`);
* a thread that runs Spark jobs for its caller inherits the caller's local properties (job
  group, scheduler pool) on both lines; Spark 4 also carries the session's job tags, when
  given the session (:func:`inheriting_thread_target`);
* on Spark 4.1, Iceberg 1.11's SQL extensions parse a statement without the parameters given
  to ``spark.sql(text, args=...)`` (apache/iceberg#16625), so every marker stays unbound;
  Spark's own binding after the parse (``spark.sql.legacy.parameterSubstitution.constantsOnly``,
  how 3.5 and 4.0 always bind) brings them back, and the jobs only put parameters where a
  constant goes (:func:`sql_with_args`).

The same on every line, by rule rather than by version:

* a table read at a snapshot is ``SELECT * FROM t VERSION AS OF <id>``: Iceberg's read option
  ``snapshot-id`` is refused on Spark 4.1, and Spark's ``versionAsOf`` option is ignored by
  Spark 3.5's ``DataFrameReader.table``, while the SQL clause reads the snapshot on both;
* ANSI mode (``spark.sql.ansi.enabled``, off by default on 3.5, on by default on 4) is left to
  the session: source values are converted with ``try_cast`` (NULL for text that does not
  convert, then a dead letter, never an error or a silent NULL), and the remaining ``CAST``s
  convert values the job itself wrote in the target type's own text form, so the jobs give the
  same results either way and force no setting on the user's cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

# Spark's binding of ``args`` after the parse (see the module's docstring).
BIND_AFTER_PARSE = "spark.sql.legacy.parameterSubstitution.constantsOnly"


def spark_version(spark) -> tuple[int, int]:
    """(major, minor) of the session's Spark, e.g. (3, 5) or (4, 1)."""
    major, minor = spark.version.split(".")[:2]
    return int(major), int(minor)


def _dataset_class(spark) -> str:
    if spark_version(spark) >= (4, 0):
        return "org.apache.spark.sql.classic.Dataset"
    return "org.apache.spark.sql.Dataset"


def dataset_of_plan(spark, plan):
    """The JVM ``Dataset[Row]`` of a logical ``plan`` (analysed plans are not analysed again)."""
    found = spark.sparkContext._jvm
    for part in _dataset_class(spark).split("."):
        found = getattr(found, part)
    return found.ofRows(spark._jsparkSession, plan)


def sql_with_args(spark, text: str, args: Mapping[str, object]):
    """``spark.sql(text, args=args)`` with its named parameters bound on every Spark line.

    The parameters must stand where a constant goes (a comparison's operand, a map key): on
    Spark 4.1 they are bound after the parse, as on 3.5 and 4.0.
    """
    if spark_version(spark) >= (4, 1) and spark.conf.get(BIND_AFTER_PARSE, "false") != "true":
        spark.conf.set(BIND_AFTER_PARSE, "true")
    return spark.sql(text, args=dict(args))


def read_at_snapshot(spark, table: str, snapshot_id: int):
    """``table`` (a qualified name made of validated identifiers) as of ``snapshot_id``."""
    return spark.sql(f"SELECT * FROM {table} VERSION AS OF {int(snapshot_id)}")


def inheriting_thread_target(call):
    """``call`` wrapped to run in another thread with the caller's Spark local properties and,
    on Spark 4, the active session's job tags (Spark 3.5's wrapper takes only the call)."""
    from pyspark.sql import SparkSession
    from pyspark.util import inheritable_thread_target

    session = SparkSession.getActiveSession()
    if session is not None and spark_version(session) >= (4, 0):
        return inheritable_thread_target(session)(call)
    return inheritable_thread_target(call)
