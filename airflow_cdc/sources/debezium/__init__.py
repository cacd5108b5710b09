"""Debezium (issue 22): change events as Kafka Connect object-storage sink files.

Debezium's PostgreSQL and MySQL/MariaDB connectors write change events to Kafka; a Kafka
Connect GCS/S3 sink (or ``airflow-cdc capture debezium``) lands each topic-partition as files
``topics/<topic>/partition=<p>/<topic>+<p>+<startOffset>.json[.gz]``, one JSON value per line.

* :mod:`.layout` lists that layout (a local folder; ``gs://`` through the Airflow hook), picks
  the files a window reads from a topic-partition's resume offset, and reads their lines
  with their offsets.
* :mod:`.records` parses one line (with or without the schema part) into a change event,
  a tombstone, a logical message, a transaction BEGIN/END or a heartbeat, and maps a change
  event to a :class:`~airflow_cdc.model.ChangeRow` (a truncate to a :class:`.records.Truncate`).
* :mod:`.ordering` orders a key's changes by the source's log position (PostgreSQL commit
  LSN and event LSN, MySQL binlog file, position and row), never by ``ts_ms``.
* :mod:`.types` maps Debezium's logical types to canonical column types and converts values
  exactly.
* :mod:`.readiness`: a window may be planned once a heartbeat proving it is in the sink.
* :mod:`.source` is the :class:`~airflow_cdc.sources.base.ChangeSource`; its Spark side (staged
  snapshot batches, repeats dropped, transactions checked over the window) is
  ``airflow_cdc.spark_jobs.sources.debezium``.
"""

SOURCE_KIND = "debezium"
