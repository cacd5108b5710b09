"""Spanner tables with commit-timestamp columns (seed 003) as a change source.

Many Spanner databases have no change stream but keep the commit time of every insert and
update in a ``TIMESTAMP`` column with ``allow_commit_timestamp=true``. A window ``[s, e)``
of such a table is one consistent read **at the exact timestamp e** of the rows whose
commit-timestamp column lies in ``[s, e)``: a read at ``e`` sees every commit ``<= e`` and
none after, so the window is complete once ``e`` is past; no watermark needs waiting for.

* :mod:`.schema`: the tables' schema from INFORMATION_SCHEMA, checked before a window is
  planned (the column exists, is a NOT NULL commit-timestamp column; the seed's hotspot
  warnings).
* :mod:`.sql`: the window query ``WHERE col >= @s AND col < @e`` (the form Spanner optimizes)
  and the key query of the reconciliation, in both dialects, identifiers quoted.
* :mod:`.records`: result rows -> change rows (ordering per key: commit timestamp, then key).
* :mod:`.types`: the tables' column types in canonical names.
* :mod:`.readiness`: when a window may be read (its end past by the safety margin, the
  schema and retention checks).
* :mod:`.reads`: which reads a window makes at which instants (re-seeds, the key
  reconciliation) and the retention rule. The reads run on Spark, in the source's Spark side
  (``airflow_cdc.spark_jobs.sources.spanner_commit_ts``: one batch snapshot at ``e``, split
  by Spanner's partitioned query into Spark tasks).
* :mod:`.source`: the class behind the seam.
"""

SOURCE_KIND = "spanner_commit_ts"
# A re-seed's partition: ``reseed:<read timestamp>`` (see source.py, discover).
RESEED_PREFIX = "reseed:"
