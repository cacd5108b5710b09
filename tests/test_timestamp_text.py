"""Timestamp text: one writer (``model.format_ts``), RFC 3339 with a four-digit year for every
year Spanner, Datastream and Python hold (1-9999).

``strftime("%Y")`` writes year 5 as ``5``: Spanner's client refuses such a value, apply's
reader takes it for no timestamp and dead-letters a valid change, and the text no longer sorts
like the instant it names.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from google.cloud.spanner_v1._helpers import _parse_value_pb
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_cdc_emulators.spanner.schema import SpannerType
from airflow_cdc_emulators.spanner.tables.values import parse_timestamp, to_wire, wire_type
from airflow_cdc.model import format_ts, parse_ts
from airflow_cdc.sources.datastream.events import normalize_value
from airflow_cdc.sources.datastream.writer import _json_value

PROPERTY = settings(max_examples=300, deadline=None, database=None)
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
TIMESTAMP = SpannerType("TIMESTAMP")
# Every instant of years 1-9999, UTC (the zone every timestamp text is written in).
INSTANTS = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59,
                                                                         999999),
                        timezones=st.just(timezone.utc))


def test_a_timestamp_of_year_5_is_written_with_a_four_digit_year():
    assert format_ts(datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)) == \
        "0005-01-02T03:04:05.000006Z"


@PROPERTY
@given(INSTANTS)
def test_every_instant_of_years_1_to_9999_is_rfc3339_text_read_back_as_itself(instant):
    text = format_ts(instant)

    assert RFC3339_UTC.match(text), text
    assert parse_ts(text) == instant


@PROPERTY
@given(INSTANTS, INSTANTS)
def test_timestamp_texts_sort_like_their_instants(first, second):
    assert (format_ts(first) < format_ts(second)) == (first < second)


@PROPERTY
@given(INSTANTS)
def test_the_spanner_emulators_timestamp_is_read_by_the_real_client_as_the_instant(instant):
    wire = to_wire(TIMESTAMP, instant)

    read = _parse_value_pb(wire, wire_type(TIMESTAMP, "GOOGLE_STANDARD_SQL"), "ts")

    assert (read, parse_timestamp(wire.string_value, "ts")) == (instant, instant)


@PROPERTY
@given(INSTANTS)
def test_a_datastream_event_instant_is_rfc3339_text_read_back_as_itself(instant):
    text = normalize_value(instant)

    assert RFC3339_UTC.match(text), text
    assert parse_ts(text) == instant


@PROPERTY
@given(INSTANTS)
def test_a_written_datastream_event_instant_has_four_year_digits_and_milliseconds(instant):
    text = _json_value(instant)

    assert re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$", text), text
    assert parse_ts(text) == instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def test_an_instant_in_another_zone_is_written_as_its_utc_text():
    eastern = timezone(timedelta(hours=-5))

    assert format_ts(datetime(999, 12, 31, 20, tzinfo=eastern)) == "1000-01-01T01:00:00.000000Z"
