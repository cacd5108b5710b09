"""LocalSparkRunner: a failing job surfaces as SparkJobError with the end of its log."""

from __future__ import annotations

import pytest

from airflow_cdc.spark.job import SparkJobError, SparkJobSpec
from airflow_cdc.spark.runners import LocalSparkRunner


def test_failing_job_raises_spark_job_error_naming_the_job_with_its_log_tail(tmp_path):
    app = tmp_path / "broken_job.py"
    app.write_text(
        "print('reading the plan of window 7')\n"
        "raise RuntimeError('plan file of window 7 is missing')\n"
    )
    spec = SparkJobSpec(str(app), name="cdc-broken", conf={"spark.ui.enabled": "false"})

    with pytest.raises(SparkJobError) as failed:
        LocalSparkRunner(master="local[2]").run(spec)

    error = failed.value
    assert error.name == "cdc-broken"
    assert error.return_code == 1
    assert "reading the plan of window 7" in error.log_tail
    assert error.reason == "RuntimeError: plan file of window 7 is missing"
    assert str(error).startswith(
        "Spark job 'cdc-broken' failed (exit code 1): RuntimeError: plan file of window 7 is missing"
    )
