"""Spark entry points and transforms (changelog writer, apply). Never imports Airflow."""
