"""Airflow hooks: connections to the state store and to the change sources."""
