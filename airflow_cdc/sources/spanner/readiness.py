"""When a Spanner change stream partition proves a window read: the evidence rule (seed 000).

A window ``[s, e)`` is read by one bounded query per partition, ``[start, e - 1 µs]``; its
evidence exists at ``e`` already (the source's evidence delay is 0, the
:class:`~airflow_cdc.sources.base.ChangeSource` default), so a window may be planned as soon as
it ends. What the query returned proves how far the partition was read
(:func:`partition_progress`), and the gate opens only when every partition's progress reaches
``e`` (I4).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow_cdc.model import Window


def partition_progress(watermark: datetime, finished: bool, window: Window,
                       heartbeat_milliseconds: int) -> datetime:
    """How far a partition's query proved it read, from its newest record or heartbeat time
    (``watermark``) and whether it ended in child partitions (``finished``).

    1. A partition that ended in children returned everything before their start (I5: the
       source said so): its progress is the watermark.
    2. A query that returned normally with progress within one heartbeat interval of its end
       returned everything up to the window end.
    3. A query that returned normally with evidence short of that (a server whose clock is
       behind the window end) proved only what its evidence shows: the partition continues
       from there and the gate stays closed meanwhile (I4).
    """
    if finished:
        return watermark
    if watermark >= window.inclusive_end - timedelta(milliseconds=heartbeat_milliseconds):
        return window.end
    return watermark + timedelta(microseconds=1)
