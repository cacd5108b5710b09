"""End-to-end demos on embedded defaults (``make demo``): emulator, real Airflow, Spark, Iceberg."""
