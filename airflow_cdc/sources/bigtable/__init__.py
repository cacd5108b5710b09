"""Bigtable change streams (seed 004) behind the source seam.

* :mod:`.partitions` names partitions by row range and generation and checks that the live
  partitions tile the key space; :mod:`.records` assembles ``ReadChangeStream`` responses
  (chunked values, records continued across responses) into whole records;
  :mod:`.mapping` turns a record into change rows, one per mutation; :mod:`.reader` reads
  one partition over one window; :mod:`.readiness` decides when a window may be read
  (every partition's low watermark at its end) and what a stall does; :mod:`.source` is the
  :class:`~airflow_cdc.sources.base.ChangeSource`; :mod:`.types` decodes cell values into
  typed columns. The apply of a window's mutations to the ``cells`` and ``latest`` Iceberg
  tables is the source's Spark side (``airflow_cdc.spark_jobs.sources.bigtable``).

No Airflow import here, and no pyspark.
"""

SOURCE_KIND = "bigtable_change_stream"
