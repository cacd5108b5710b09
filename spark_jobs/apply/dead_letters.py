"""The stream's dead-letter table: raw changelog rows apply could not apply, with the reason.

One Iceberg table per stream (``targets.dead_letter_table``). A row holds every changelog
column exactly as read (so it can be replayed once the cause is fixed), the ``reason``, and
the ``target_table`` it was meant for (NULL when the source table had no usable target). The
window is the row's own ``window_id``. All dead letters of a window are appended in one
commit tagged with the window, so a re-run never adds them twice.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc.model import CHANGELOG_COLUMNS
from spark_jobs.apply.config import TableName

DEAD_LETTER_COLUMNS: tuple[tuple[str, str], ...] = (
    *CHANGELOG_COLUMNS,
    ("reason", "string"),
    ("target_table", "string"),
)


def create_dead_letter_table(spark: SparkSession, table: TableName) -> None:
    columns = ", ".join(f"`{name}` {kind}" for name, kind in DEAD_LETTER_COLUMNS)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`")
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {table.sql} ({columns}) USING iceberg "
        f"TBLPROPERTIES ('format-version' = '2')"
    )


def in_table_order(frame: DataFrame) -> DataFrame:
    """``frame`` with exactly the dead-letter columns, in order."""
    return frame.select(*[frame[name].cast(kind).alias(name) for name, kind in DEAD_LETTER_COLUMNS])
