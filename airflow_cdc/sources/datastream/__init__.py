"""Datastream (seed 001): change events as JSON-lines or Avro files under a bucket prefix.

* :mod:`.events` maps one Datastream event (generic + source-specific metadata, payload)
  onto a :class:`~airflow_cdc.model.ChangeRow` with the per-source ordering key.
* :mod:`.discovery` lists event files (local folders; GCS through the Airflow hook) and
  turns the ones not consumed yet into partitions of the next window.
* :mod:`.progress` decides how far the reader provably got (completeness evidence).
* :mod:`.types` gives payload columns their types: declared per table, from the Avro
  schema, or from JSON values (exact decimals).
* :mod:`.records` turns one event file's bytes (JSON lines or Avro) into change rows and dead
  letters; :mod:`.readiness` decides when a window may be planned; :mod:`.source` is the
  :class:`~airflow_cdc.sources.base.ChangeSource`. Its Spark side (the window's files read
  in Spark tasks, repeats dropped) is ``airflow_cdc.spark_jobs.sources.datastream``.
"""

SOURCE_KIND = "datastream"
# The one partition that never finishes: its watermark is the completeness evidence.
PROGRESS_PARTITION = "~datastream-read-progress"
