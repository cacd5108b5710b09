"""The window protocol's operators under the module name the README documents; each lives in
the module of its step (:mod:`~airflow_cdc.operators.plan`, :mod:`~airflow_cdc.operators.extract`,
:mod:`~airflow_cdc.operators.commit`, :mod:`~airflow_cdc.operators.apply`)."""

from airflow_cdc.operators.apply import CdcApplyOperator
from airflow_cdc.operators.base import CdcWindowOperator
from airflow_cdc.operators.commit import CdcCommitWindowOperator
from airflow_cdc.operators.extract import CdcExtractOperator
from airflow_cdc.operators.plan import CdcPlanOperator
from airflow_cdc.operators.spark_step import CdcSparkOperator
from airflow_cdc.pipeline.apply_step import ApplySettings

__all__ = [
    "ApplySettings",
    "CdcApplyOperator",
    "CdcCommitWindowOperator",
    "CdcExtractOperator",
    "CdcPlanOperator",
    "CdcSparkOperator",
    "CdcWindowOperator",
]
