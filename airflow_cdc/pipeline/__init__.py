"""The window protocol, plan -> extract -> commit -> apply -> gate, without Airflow or pyspark."""
