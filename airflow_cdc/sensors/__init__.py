"""Airflow sensors: the completeness gate of a window."""
