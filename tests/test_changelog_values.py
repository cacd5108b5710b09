"""A change row's changelog values (airflow_cdc/model.py: change_row_values, value_text)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from airflow_cdc.model import ChangeRow, Image, Op, change_row_values, value_text


@pytest.mark.parametrize("value", [1.5, 0.1, 2.0, -0.0, 1e300, 1e-7, 123456789.123, float("nan"), float("inf")])
def test_a_float_value_has_the_text_json_gives_it(value):
    assert value_text(value) == json.dumps(value)


def row(column_types: dict, metadata: dict) -> ChangeRow:
    return ChangeRow("s", "w", "orders", Op.INSERT, Image.FULL, {"id": 1}, {"id": 1}, None,
                     column_types, datetime(2024, 5, 1, tzinfo=timezone.utc), b"\x00",
                     source_metadata=metadata)


def test_rows_that_share_a_records_types_and_metadata_each_get_their_own_texts():
    types, metadata = {"id": "INT64"}, {"record_sequence": "00000001"}
    other_types, other_metadata = {"id": "STRING"}, {"record_sequence": "00000002"}
    values = [change_row_values(r) for r in (row(types, metadata), row(types, metadata),
                                              row(other_types, other_metadata), row(types, metadata))]
    assert [(v[8], v[14]) for v in values] == [
        ('{"id":"INT64"}', '{"record_sequence":"00000001"}'),
        ('{"id":"INT64"}', '{"record_sequence":"00000001"}'),
        ('{"id":"STRING"}', '{"record_sequence":"00000002"}'),
        ('{"id":"INT64"}', '{"record_sequence":"00000001"}'),
    ]
