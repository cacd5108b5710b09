"""Airflow operators: the tasks of the window protocol (plan, extract, commit, apply)."""
