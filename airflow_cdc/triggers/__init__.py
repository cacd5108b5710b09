"""Airflow triggers: deferred waits of the sensors and operators."""
