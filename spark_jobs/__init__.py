"""Spark entry points (one module per job) and the transforms they share; never imports Airflow."""
