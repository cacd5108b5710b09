"""A downstream consumer of CDC windows: scheduled on the Iceberg tables' Assets.

The Spanner example DAG's gate emits one Asset event per table each time a window is proven
complete. This DAG runs on every event of one target table (``CDC_CONSUMER_TABLE``, default
``current.Accounts``) and reads what the event
says about the window: its bounds, low watermark, counts and the snapshot ids to read the
table at (``target_snapshot_ids``), so the consumer sees exactly the window's state even if
later windows have landed since.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from airflow.sdk import DAG, task

from airflow_cdc.assets import iceberg_asset

ACCOUNTS = iceberg_asset(os.environ.get("CDC_CONSUMER_TABLE", "current.Accounts"))

with DAG(
    dag_id="cdc_asset_consumer",
    schedule=[ACCOUNTS],
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    tags=["cdc", "asset", "example"],
    doc_md=__doc__,
):

    @task(inlets=[ACCOUNTS])
    def read_completed_window(**context) -> dict:
        """The window each triggering event announced, with the snapshot to read."""
        windows = []
        for event in context["triggering_asset_events"][ACCOUNTS]:
            extra = event.extra
            snapshot = extra["target_snapshot_ids"].get(ACCOUNTS.name)
            print(
                f"{extra['stream']} window [{extra['window_start']}, {extra['window_end']}) "
                f"complete up to {extra['low_watermark']}: {extra['changes']} changes; "
                f"read {ACCOUNTS.name} at snapshot {snapshot}"
            )
            windows.append({"window_end": extra["window_end"], "snapshot_id": snapshot})
        return {"windows": windows}

    read_completed_window()
