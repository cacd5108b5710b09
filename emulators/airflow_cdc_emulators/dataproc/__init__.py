"""A local Dataproc, speaking the real ``google.cloud.dataproc.v1`` API, that runs PySpark jobs
and batches with ``spark-submit`` on a local Spark master.

The real ``google-cloud-dataproc`` client talks to it unchanged through a plain-text channel
(see :mod:`.clients`, ``DATAPROC_EMULATOR_HOST``); nothing reaches Google Cloud.

* :mod:`.jobs`: JobController (SubmitJob, SubmitJobAsOperation, GetJob, ListJobs, CancelJob,
  DeleteJob) and the job state machine; :mod:`.batches`: BatchController (CreateBatch as a
  long-running operation, GetBatch, ListBatches, DeleteBatch; cancel through the operation);
  :mod:`.operations`: ``google.longrunning.Operations``.
* :mod:`.workload`: a ``pyspark_job`` / ``pyspark_batch`` as a ``spark-submit`` command line;
  :mod:`.driver`: one driver process group from setup to its outcome.
* :mod:`.servicer` and :mod:`.server` put it on gRPC (:class:`DataprocEmulator`).
* ``python -m airflow_cdc_emulators.dataproc --port 8087 --master spark://127.0.0.1:7077``
  runs it on its own.

No Airflow or pyspark import here (pyspark is only located, to find its ``spark-submit``).
"""

from __future__ import annotations

from .clients import (
    DATAPROC_EMULATOR_HOST,
    EmulatorHostMissingError,
    dataproc_client,
    dataproc_client_kwargs,
    emulator_host,
)
from .errors import ServiceError
from .server import (
    DEFAULT_CLUSTERS,
    DEFAULT_KILL_GRACE_SECONDS,
    DEFAULT_MASTER,
    DataprocEmulator,
    EmulatorStartError,
)
from .workload import PySparkWorkload, find_spark_submit

__all__ = [
    "DATAPROC_EMULATOR_HOST",
    "DEFAULT_CLUSTERS",
    "DEFAULT_KILL_GRACE_SECONDS",
    "DEFAULT_MASTER",
    "DataprocEmulator",
    "EmulatorHostMissingError",
    "EmulatorStartError",
    "PySparkWorkload",
    "ServiceError",
    "dataproc_client",
    "dataproc_client_kwargs",
    "emulator_host",
    "find_spark_submit",
]
