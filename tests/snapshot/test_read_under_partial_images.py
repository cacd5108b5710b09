"""The rule a parallel snapshot's READ rows keep (issue 64): a batch's READ row sits at the
batch's low watermark, so every change after that watermark applies on top of it, and the
partial images of a TOASTed row (the unchanged body left out, Debezium's unavailable-value
placeholder) patch the READ row instead of dying for want of one.

The READ rows and the changes carry the ordering keys Debezium's PostgreSQL positions give
them (:func:`airflow_cdc.sources.debezium.ordering.ordering_key`); one window is applied as
the apply job does it. The whole path (a capture, the snapshot job, a window) is
``test_toasted_columns.py`` (long).
"""

from __future__ import annotations

import pytest

from airflow_cdc.sources.debezium.ordering import SourcePosition, ordering_key
from tests.apply.support import Changes, Lake, at, values_of, window

TYPES = {"id": "INT64", "n": "INT64", "body": "STRING"}
W0 = window(0)
# Positions in the log: (last commit LSN, event LSN), as Debezium's source.sequence has them.
LOW = SourcePosition("postgresql", (100, 150), "100:150")
BETWEEN = (SourcePosition("postgresql", (150, 160), "150:160"),
           SourcePosition("postgresql", (160, 170), "160:170"))
AFTER_HIGH = SourcePosition("postgresql", (180, 190), "180:190")
BODY = "x" * 10_000


@pytest.fixture(scope="module")
def applied(spark, warehouse):
    lake = Lake(spark, warehouse, "snapshot_partial_images")
    docs = Changes("Docs", TYPES)
    read_at_low = ordering_key(LOW, "r")
    for key in (1, 2, 3):
        docs.add(W0, "READ", key, {"n": 5, "body": BODY}, when=at(0, 1), ordering_key=read_at_low)
    # key 1: updated while its batch was read and after it, the body left out each time.
    for second, position in ((2, BETWEEN[0]), (3, BETWEEN[1]), (4, AFTER_HIGH)):
        docs.add(W0, "UPDATE", 1, {"n": 5 + second}, when=at(0, second), image="PARTIAL",
                 ordering_key=ordering_key(position, "u"))
    # key 2: deleted while its batch was read (after the read saw it).
    docs.add(W0, "DELETE", 2, when=at(0, 2), ordering_key=ordering_key(BETWEEN[0], "d"))
    # key 3: its body replaced while its batch was read, then a partial image.
    docs.add(W0, "UPDATE", 3, {"n": 6, "body": "new body"}, when=at(0, 2),
             ordering_key=ordering_key(BETWEEN[0], "u"))
    docs.add(W0, "UPDATE", 3, {"n": 7}, when=at(0, 3), image="PARTIAL",
             ordering_key=ordering_key(BETWEEN[1], "u"))
    lake.write(docs, win=W0)
    result = lake.apply(W0)
    return values_of(lake.rows("Docs"), "n", "body"), result


def test_partial_images_after_the_low_watermark_patch_the_read_row_and_keep_its_toasted_body(applied):
    target, result = applied
    assert result.dead_letter_rows == 0
    assert target[1] == (9, BODY)


def test_a_delete_between_the_watermarks_removes_the_key_the_read_row_brought(applied):
    target, _ = applied
    assert 2 not in target


def test_a_column_a_change_between_the_watermarks_carries_wins_over_the_read_row(applied):
    target, _ = applied
    assert target[3] == (7, "new body")
