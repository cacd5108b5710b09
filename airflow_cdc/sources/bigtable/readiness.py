"""When a Bigtable window may be read: once every partition's low watermark reached its end.

The evidence that a partition covered ``[s, e)`` is its estimated low watermark reaching
``e`` (the service's ``end_time`` says when the stream passed a time, not that every
cluster's writes before it arrived). A lagging cluster holds a partition's watermark back, so
planning waits, deferred, asking again (:func:`lagging_partitions`: a short read of every
current partition from ``e``, whose first heartbeat or record carries the watermark).

What a stall does is the pipeline's stall policy, counted from ``e`` plus the evidence delay:

* ``wait`` (the default): keep waiting (up to the pipeline's ``gate_timeout``);
* ``fail`` after N minutes: the plan task fails, naming the partition and since when;
* ``open`` after N minutes: the window is read with what arrived, and flagged *unconfirmed*
  in the state store (its completeness note), the XCom summary and the Asset event extra.
  Records that arrive later are read by later windows; apply orders them per cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_cdc.model import CdcError, Window, format_ts
from airflow_cdc.sources.bigtable.connection import BigtableConnection
from airflow_cdc.sources.bigtable.partitions import RowRange
from airflow_cdc.sources.bigtable.records import CloseStream, stream_records

STALL_POLICIES = ("wait", "fail", "open")
UNCONFIRMED_NOTE = "unconfirmed"


class WatermarkStalledError(CdcError):
    """A partition's low watermark stayed behind a window's end past the stall policy's limit."""


@dataclass(frozen=True)
class StallPolicy:
    policy: str = "wait"
    after: timedelta | None = None

    @classmethod
    def from_setting(cls, setting: Mapping | None, stream_id: str) -> StallPolicy:
        setting = dict(setting or {})
        policy = setting.get("policy", "wait")
        if policy not in STALL_POLICIES:
            raise ValueError(
                f"stall policy {policy!r} of stream {stream_id!r} is unknown: use one of "
                f"{list(STALL_POLICIES)} ('wait', or 'fail'/'open' with after_minutes)")
        minutes = setting.get("after_minutes")
        if policy != "wait" and (minutes is None or float(minutes) < 0):
            raise ValueError(
                f"stall policy {policy!r} of stream {stream_id!r} needs after_minutes >= 0: "
                f"how long a window waits for a lagging partition before it {policy}s")
        return cls(policy, None if minutes is None else timedelta(minutes=float(minutes)))

    def to_setting(self) -> dict:
        setting: dict = {"policy": self.policy}
        if self.after is not None:
            setting["after_minutes"] = self.after.total_seconds() / 60
        return setting


@dataclass(frozen=True)
class Lagging:
    rows: RowRange
    watermark: datetime | None

    def describe(self, window: Window, since: datetime | None) -> str:
        mark = format_ts(self.watermark) if self.watermark else "no watermark yet"
        behind = f", {window.end - self.watermark} behind the window end" if self.watermark else ""
        return (f"partition {self.rows.text()} holds the low watermark at {mark}{behind}"
                + (f" (waiting since {format_ts(since)})" if since else ""))


def lagging_partitions(
    connection: BigtableConnection, window: Window, probe_seconds: float
) -> list[Lagging]:
    """The current partitions whose low watermark is still before ``window.end``."""
    from google.api_core import exceptions

    client = connection.data_client()
    request = {"table_name": connection.table_name, "app_profile_id": connection.app_profile}
    ranges = [
        RowRange(bytes(r.partition.row_range.start_key_closed),
                 bytes(r.partition.row_range.end_key_open))
        for r in client.generate_initial_change_stream_partitions(request=request)
    ]
    lagging = []
    for rows in ranges:
        read = {
            **request,
            "partition": {"row_range": {"start_key_closed": rows.start, "end_key_open": rows.end}},
            "start_time": window.end,
            "heartbeat_duration": timedelta(milliseconds=200),
        }
        watermark = None
        call = None
        try:
            call = client.read_change_stream(request=read, timeout=probe_seconds)
            for record in stream_records(call):
                if isinstance(record, CloseStream):
                    break  # it split or merged since: its children are probed next time
                mark = record.low_watermark
                if mark is not None:
                    watermark = mark if watermark is None else max(watermark, mark)
                    if watermark >= window.end:
                        break
        except exceptions.DeadlineExceeded:
            pass
        finally:
            try:
                if call is not None:
                    call.cancel()
            except Exception:  # noqa: BLE001 - cancelling a finished call is harmless
                pass
        if watermark is None or watermark < window.end:
            lagging.append(Lagging(rows, watermark))
    return lagging
