"""When a Bigtable window may be read: once every partition's low watermark reached its end.

The evidence that a partition covered ``[s, e)`` is its estimated low watermark reaching
``e`` (the service's ``end_time`` says when the stream passed a time, not that every
cluster's writes before it arrived). A lagging cluster holds a partition's watermark back, so
planning waits, deferred, asking again (:func:`lagging_partitions`: a short read from ``e`` of
every partition live at ``e``, whose first heartbeat or record carries the watermark; the
partitions live now are followed back to them, and forward to their children, through the
tokens of their closes).

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
from airflow_cdc.sources.bigtable.partitions import RowRange, TokenPiece
from airflow_cdc.sources.bigtable.records import OUT_OF_RANGE, CloseStream, stream_records

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
    """The partitions live at ``window.end`` whose low watermark is still before it.

    The partitions that exist now may be younger than ``window.end`` (a split or a merge
    since): their streams begin after it and can never show a watermark at it. So:

    1. List the table's partitions now and read each from ``window.end``.
    2. A read closed with OUT_OF_RANGE hands over tokens for its new partitions: a partition
       born after the end answers at once with the partitions live at the end (tokens at the
       end); a partition that split or merged since, with its children (tokens at its own
       end). A new partition is read from those tokens once they tile its row range (a merge
       child's pieces come from each parent's close).
    3. A read whose watermark reaches the end covers its range; one whose probe deadline
       passes first is lagging, with the watermark it reached.
    4. A merge child still short of a piece has a parent that reached the end before its
       close: that parent is read again until its close, and the child then read (a close
       carries no time, so only the child's watermark tells whether the end is covered).
    """
    from google.api_core import exceptions

    client = connection.data_client()
    request = {"table_name": connection.table_name, "app_profile_id": connection.app_profile}
    pending = [
        _Probe(RowRange(bytes(r.partition.row_range.start_key_closed),
                        bytes(r.partition.row_range.end_key_open)))
        for r in client.generate_initial_change_stream_partitions(request=request)
    ]
    seen: set[_Probe] = set()
    covered: dict[_Probe, None] = {}  # reads whose watermark reached the end
    pieces: dict[RowRange, dict[RowRange, TokenPiece]] = {}  # child -> its pieces so far
    lagging: list[Lagging] = []
    while pending or pieces:
        if not pending:
            # Step 4: the parents that reached the end before closing into a merge child.
            pending = [_Probe(p.rows, p.tokens, until_close=True) for p in covered
                       if not p.until_close and any(p.rows.overlaps(c) for c in pieces)]
            if not pending:
                break
            for probe in pending:
                del covered[_Probe(probe.rows, probe.tokens)]
        probe = pending.pop(0)
        if probe in seen:
            continue
        seen.add(probe)
        watermark, close = _read(client, request, probe, window, probe_seconds, exceptions)
        if close is None:
            if watermark is not None and watermark >= window.end:
                covered[probe] = None
            else:
                lagging.append(Lagging(probe.rows, watermark))
            continue
        if close.code != OUT_OF_RANGE:
            lagging.append(Lagging(probe.rows, watermark))
            continue
        for child in close.new_partitions:
            got = pieces.setdefault(child, {})
            got.update({t.rows: t for t in close.tokens if child.contains(t.rows)})
            if _tiles(child, got):
                del pieces[child]
                pending.append(_Probe(child, tuple(sorted(got.values(), key=_by_start))))
    for child in pieces:
        # A merge child whose other parents did not close within the probe deadline (a
        # parent reported lagging already names the range).
        if not any(lag.rows.overlaps(child) for lag in lagging):
            lagging.append(Lagging(child, None))
    return lagging


@dataclass(frozen=True)
class _Probe:
    """One read of the probe: ``rows`` from ``tokens`` (none: from the window end);
    ``until_close``: read on past the end until the partition's close."""

    rows: RowRange
    tokens: tuple[TokenPiece, ...] = ()
    until_close: bool = False


def _by_start(piece: TokenPiece) -> bytes:
    return piece.rows.start


def _tiles(rows: RowRange, got: Mapping[RowRange, TokenPiece]) -> bool:
    """Whether the pieces ``got`` cover ``rows`` exactly, without a gap or an overlap."""
    expected = rows.start
    for piece in sorted(got):
        if piece.start != expected:
            return False
        if not piece.end:
            return not rows.end
        expected = piece.end
    return bool(rows.end) and expected == rows.end


def _read(client, request: dict, probe: _Probe, window: Window, probe_seconds: float,
          exceptions) -> tuple[datetime | None, CloseStream | None]:
    """The highest low watermark one read of ``probe`` showed, and its close if it met one."""
    read = {**request, "heartbeat_duration": timedelta(milliseconds=200),
            "partition": {"row_range": {"start_key_closed": probe.rows.start,
                                        "end_key_open": probe.rows.end}}}
    if probe.tokens:
        read["continuation_tokens"] = {"tokens": [
            {"partition": {"row_range": {"start_key_closed": t.rows.start,
                                         "end_key_open": t.rows.end}}, "token": t.token}
            for t in probe.tokens]}
    else:
        read["start_time"] = window.end
    watermark = None
    call = None
    try:
        call = client.read_change_stream(request=read, timeout=probe_seconds)
        for record in stream_records(call):
            if isinstance(record, CloseStream):
                return watermark, record
            mark = record.low_watermark
            if mark is not None:
                watermark = mark if watermark is None else max(watermark, mark)
                if watermark >= window.end and not probe.until_close:
                    break
    except exceptions.DeadlineExceeded:
        pass
    except exceptions.OutOfRange:
        # A read from ``window.end`` refused because that instant is after the table's own
        # clock: no watermark can be at the end yet, so the partition lags (the window is
        # not ready), whatever the worker's clock says.
        if probe.tokens:
            raise
    finally:
        try:
            if call is not None:
                call.cancel()
        except Exception:  # noqa: BLE001 - cancelling a finished call is harmless
            pass
    return watermark, None
