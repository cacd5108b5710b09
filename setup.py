"""The package list of the airflow-cdc wheel (everything else is in pyproject.toml).

The Spark jobs live in the repository's ``spark_jobs/`` folder and ship inside the provider
as ``airflow_cdc.spark_jobs``, so no generic top-level name lands in users' environments. The
emulators (``emulators/``) and the demos (``demo/``) are not part of this wheel.
"""

from setuptools import find_packages, setup

SPARK_JOBS = "airflow_cdc.spark_jobs"

setup(
    packages=[
        *find_packages(include=["airflow_cdc", "airflow_cdc.*"]),
        SPARK_JOBS,
        *(f"{SPARK_JOBS}.{name}" for name in find_packages("spark_jobs")),
    ],
    package_dir={SPARK_JOBS: "spark_jobs"},
)
