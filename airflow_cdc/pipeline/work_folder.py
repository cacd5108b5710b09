"""Where a stream's plan and outcome files live when its pipeline names no work root."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from airflow_cdc.pipeline.protocol import StreamConfig


def default_work_root() -> str:
    """Where plan and outcome files live: ``$AIRFLOW_CDC_WORK_ROOT`` or AIRFLOW_HOME/cdc_work."""
    configured = os.environ.get("AIRFLOW_CDC_WORK_ROOT")
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return str(Path(home) / "cdc_work")


def with_work_root(stream: StreamConfig) -> StreamConfig:
    """``stream``, with :func:`default_work_root` when it names no work root (read when a task
    runs, so a worker's own environment decides)."""
    if stream.work_root:
        return stream
    return replace(stream, work_root=default_work_root())
