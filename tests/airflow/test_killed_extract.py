"""A killed extract says why it ended, that its window stays planned and how to re-run it."""

from __future__ import annotations

import pytest

from airflow_cdc.pipeline.extract_step import with_rerun_hint
from airflow_cdc.spark.job import SparkJobError, SparkJobSpec
from airflow_cdc.spark.runners import LocalSparkRunner, killed_detail

from cdc_airflow_support import W1


def test_a_spark_submit_killed_by_sigkill_names_the_signal_instead_of_no_error_line(tmp_path):
    app = tmp_path / "killed_job.py"
    # The driver's parent is the spark-submit JVM: killing it is what the OOM killer does.
    app.write_text("import os, signal\nprint('reading window 7')\nos.kill(os.getppid(), signal.SIGKILL)\n")
    spec = SparkJobSpec(str(app), name="cdc-killed", conf={"spark.ui.enabled": "false"})

    with pytest.raises(SparkJobError) as failed:
        LocalSparkRunner(master="local[1]").run(spec)

    assert failed.value.return_code == -9
    assert failed.value.reason.startswith("spark-submit was killed by SIGKILL from outside the job")
    assert "no error line in the log" not in str(failed.value)


def test_a_failed_extract_says_its_window_stays_planned_and_how_to_run_it_again():
    error = SparkJobError("cdc-extract-orders", -9, ["reading"], detail=killed_detail(-9))

    hinted = with_rerun_hint(error, W1)

    assert isinstance(hinted, SparkJobError) and hinted.return_code == -9
    assert str(hinted).startswith("Spark job 'cdc-extract-orders' failed (exit code -9): "
                                  "spark-submit was killed by SIGKILL")
    assert f"window {W1.window_id} of 'orders' stays PLANNED" in str(hinted)
    assert "clear this extract task" in str(hinted)
