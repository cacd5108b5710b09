"""Apply's transforms as Spark SQL text: literals, names, and a query built in stages.

The fold is a few hundred expressions per table. Built with PySpark's ``Column`` API, every
``F.col``, ``F.lit``, operator and alias is a py4j round trip (about 3,000 per window, most of
the driver's time before the fold's first job), and every ``select`` is analysed on its own.
As SQL text the whole fold is one ``spark.sql`` call: one round trip, one parse, one
analysis. Columns that other code still needs come from the same text through ``F.expr``.

Only names and literals made here go into the text: :func:`string` quotes any text as a SQL
string literal, :func:`name` quotes a column name, and column names reach apply only after
``airflow_cdc.model.validate_identifier`` (see ``schema.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc.spark_jobs.spark_line import dataset_of_plan


def string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslash escapes, as Spark's parser reads them).

    ``$`` is written as the escape ``\\u0024``: Spark substitutes ``${name}`` in SQL text
    (``spark.sql.variable.substitute``, on by default) with a configuration value or an
    environment variable (``${env:HOME}``) before parsing, literals included, so a source's
    text holding one would reach the table altered, or carry a secret with it.
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024") + "'"


def name(column: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + column.replace("`", "``") + "`"


def coalesce_false(condition: str) -> str:
    return f"coalesce({condition}, false)"


def any_of(conditions: Sequence[str]) -> str:
    """``conditions`` OR'ed (``false`` for none)."""
    return " OR ".join(f"({c})" for c in conditions) if conditions else "false"


def case_when(branches: Sequence[tuple[str, str]], otherwise: str | None = None) -> str:
    """``CASE WHEN c1 THEN v1 ... [ELSE otherwise] END``."""
    text = " ".join(f"WHEN {condition} THEN {value}" for condition, value in branches)
    return f"CASE {text}{'' if otherwise is None else f' ELSE {otherwise}'} END"


class Query:
    """A query as a chain of SELECT stages, run as one statement.

    ``Query("src").select(["a", "b + 1 AS c"]).select(["*", "c * 2 AS d"], where="a > 0")``
    reads the view ``src``; each stage reads the one before, nested as a subquery in its
    FROM clause. A stage that later stages read more than once is made a common table
    expression first (:meth:`share`).

    Nested rather than one common table expression per stage: Spark's analyser runs its
    resolution rules over the whole plan about once per stage (a stage's columns resolve
    only after the stage before is resolved whole), and nested stages give it about half
    the nodes to walk in each pass (no definition, alias and reference per stage), where a
    rule such as ``DeduplicateRelations`` walks all of them.
    """

    def __init__(self, source: str) -> None:
        self._shared: list[str] = []
        self._stages = 0
        self._last = source

    def select(
        self,
        columns: Sequence[str],
        where: str | None = None,
        windows: Mapping[str, str] | None = None,
    ) -> Query:
        """Add the stage ``SELECT columns FROM <previous stage or source> [WHERE] [WINDOW]``."""
        text = f"SELECT {', '.join(columns)} FROM {self._last}"
        if where is not None:
            text += f" WHERE {where}"
        if windows:
            text += " WINDOW " + ", ".join(f"{n} AS ({spec})" for n, spec in windows.items())
        return self.stage(text)

    def stage(self, text: str) -> Query:
        """Add a stage given as a whole query (a UNION, say); later stages read it."""
        self._last = f"({text}) __stage{self._stages}"
        self._stages += 1
        return self

    def share(self) -> str:
        """The latest stage as a name that later stages (and the next) may read any number
        of times: a common table expression of the statement."""
        shared = f"__shared{len(self._shared)}"
        self._shared.append(f"{shared} AS (SELECT * FROM {self._last})")
        self._last = shared
        return shared

    @property
    def last(self) -> str:
        """The latest stage (or the source, before the first), as a FROM item."""
        return self._last

    def sql(self) -> str:
        select = f"SELECT * FROM {self._last}"
        return f"WITH {', '.join(self._shared)} {select}" if self._shared else select


@contextmanager
def temp_views(spark: SparkSession, frames: Mapping[str, DataFrame]) -> Iterator[dict[str, str]]:
    """``frames`` registered as temporary views under unique names (key -> view name) in the block.

    A query analysed in the block (``spark.sql`` analyses at once) keeps the frames' plans,
    not the names, so its frame outlives the views.
    """
    names: dict[str, str] = {}
    try:
        for key, frame in frames.items():
            names[key] = f"cdc_{key}_{uuid.uuid4().hex}"
            frame.createOrReplaceTempView(names[key])
        yield names
    finally:
        for view in names.values():
            spark.catalog.dropTempView(view)


def frame(spark: SparkSession, text: str) -> DataFrame:
    """The frame of the query ``text``, whose plan holds the plans of the views it reads.

    ``spark.sql`` gives a frame whose logical plan is the parsed text: the views' plans are
    only in its analysed plan. An ``Observation`` of a frame that a view holds reports only
    to a query whose logical plan contains it, so it would wait forever; a frame on the
    analysed plan (which Spark does not analyse again) keeps the observations visible.
    """
    analyzed = spark.sql(text)._jdf.queryExecution().analyzed()
    return DataFrame(dataset_of_plan(spark, analyzed), spark)

