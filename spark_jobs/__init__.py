"""Spark entry points (one module per job) and the transforms they share; never imports Airflow.

Importing the package (as every Python worker that runs one of its functions does) makes the
worker's later tasks start without reading its zip archives again (:mod:`airflow_cdc.spark_jobs.zip_imports`),
unless ``AIRFLOW_CDC_ZIP_IMPORTS=off``.
"""

from airflow_cdc.spark_jobs.zip_imports import read_zip_directories_when_changed

read_zip_directories_when_changed()
