"""What the apply job hands a source that applies its own changes (its Spark side's ``apply_window``).

Such a source (Bigtable's cells) computes its window's outcome itself, but commits through
this object, so its tables follow the same exactly-once rules as every target: each commit
tagged with the window, a table that holds the window's commit skipped on a re-run, and the
pre-window state read at the snapshot before that commit (I1). Its tables are created in the
config's write mode and compacted after the window's commits, as targets are
(``targets.write_mode``, ``targets.compact_delete_files``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc.spark_jobs.apply import compaction
from airflow_cdc.spark_jobs.apply.config import ApplyConfig, TableName
from airflow_cdc.spark_jobs.apply.schema import set_write_mode, table_properties, write_mode_of, write_mode_properties
from airflow_cdc.spark_jobs.commits import (
    commit_once,
    current_snapshot_id,
    sql_tagged,
    table_before,
    window_commit,
    window_properties,
)

_VIEWS = itertools.count()


class WindowTables:
    """The window's tagged commits to tables the source names (fully qualified)."""

    def __init__(self, spark: SparkSession, config: ApplyConfig) -> None:
        self.spark = spark
        self.config = config

    def create(self, qualified: str, columns: str, partitioned_by: str | None = None) -> None:
        """Create table ``qualified`` (``columns``: its SQL column definitions) when it is missing, in the
        config's write mode; an existing table in another mode takes it now (a metadata change,
        no snapshot), as a target does."""
        table = TableName.parse(qualified)
        properties = table_properties(self.spark, table)
        if properties is not None:
            if write_mode_of(properties) != self.config.write_mode:
                set_write_mode(self.spark, [table], self.config.write_mode)
            return
        modes = write_mode_properties(self.config.write_mode)
        self.spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`")
        partitioning = f"PARTITIONED BY ({partitioned_by}) " if partitioned_by else ""
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {table.sql} ({columns}) USING iceberg {partitioning}"
                       f"TBLPROPERTIES ('format-version' = '2', {modes})")

    def compact(self, tables: Sequence[str]) -> dict[str, list[str]]:
        """After the window's commits: those of ``tables`` (qualified names) holding many delete files compacted
        (``compaction.py``). Returns the result's ``compacted_tables`` and ``compaction_errors``."""
        compacted, errors = compaction.compact_due(self.spark, self.config, [TableName.parse(t) for t in tables])
        return {"compacted_tables": compacted, "compaction_errors": errors}

    def committed(self, table: str) -> dict | None:
        """The counts the window's commit to ``table`` recorded, or None when it has none."""
        commit = window_commit(self.spark, table, self.config.window_id)
        return None if commit is None else {"snapshot_id": commit.snapshot_id,
                                            **commit.apply_properties()}

    def before(self, table: str) -> DataFrame | None:
        """``table`` as it was before the window's commit (or now, when it has none)."""
        return table_before(self.spark, table, window_commit(self.spark, table, self.config.window_id))

    def snapshot_id(self, table: str) -> int | None:
        return current_snapshot_id(self.spark, table)

    def merge(self, frame: DataFrame, table: str, key_columns: Sequence[str],
              counts: Mapping[str, object]) -> None:
        """One MERGE of ``frame`` into ``table``, tagged with the window and ``counts``: rows
        whose ``action`` is ``D`` delete the matching row, ``U`` rows update or insert it.
        Key columns compare NULL-safe. Another apply of the window (an orphaned job, the task's
        retry) may have made this commit since the source looked: its commit is then the
        window's, and this MERGE is not run, or, when the two race, refused by Iceberg and
        given up (``apply/table_commits.py``, module doc)."""
        window_id = self.config.window_id
        view = f"cdc_window_merge_{next(_VIEWS)}"
        columns = [c for c in frame.columns if c != "action"]
        on = " AND ".join(f"t.`{c}` <=> s.`{c}`" for c in key_columns)
        sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in columns if c not in key_columns)
        names = ", ".join(f"`{c}`" for c in columns)
        values = ", ".join(f"s.`{c}`" for c in columns)
        statement = (
            f"MERGE INTO {table} t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.action = 'D' THEN DELETE "
            + (f"WHEN MATCHED THEN UPDATE SET {sets} " if sets else "")
            + f"WHEN NOT MATCHED AND s.action = 'U' THEN INSERT ({names}) VALUES ({values})"
        )
        frame.createOrReplaceTempView(view)
        try:
            commit_once(self.spark, table, window_id,
                        lambda: sql_tagged(self.spark, statement, window_properties(window_id, counts)))
        finally:
            self.spark.catalog.dropTempView(view)
