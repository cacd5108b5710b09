"""The end of a job's Spark session: stopped by a job run by spark-submit, kept by a warm driver.

Every entry point ends its session with :func:`end_job_session`. A job that spark-submit runs
owns its application, and stopping it ends the application. A warm driver
(:mod:`airflow_cdc.spark_jobs.warm_driver`) runs job after job in one session and sets
:data:`KEEP_SESSION`, so a job leaves the session to the next one.
"""

from __future__ import annotations

# Set by the warm driver before it runs its first job; never by a job.
KEEP_SESSION = False


def end_job_session(spark) -> None:
    """Stop ``spark`` unless a warm driver keeps it for its next job."""
    if not KEEP_SESSION:
        spark.stop()
