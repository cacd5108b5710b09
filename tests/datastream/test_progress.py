"""Completeness evidence: the progress watermark and the idle-timeout declaration."""

from __future__ import annotations

from datetime import timedelta

from airflow_cdc.sources.datastream.progress import idle_declared, progress_watermark

from .support import at

LATENESS = timedelta(minutes=5)


def test_reads_within_the_allowed_lateness_do_not_reach_the_window_end():
    assert progress_watermark(at(0), at(33), LATENESS) == at(28)


def test_progress_watermark_never_moves_backwards():
    assert progress_watermark(at(40), at(33), LATENESS) == at(40)


def test_no_events_keep_the_previous_watermark():
    assert progress_watermark(at(12), None, LATENESS) == at(12)


def test_idle_source_stays_incomplete_before_the_idle_timeout():
    assert not idle_declared(0, at(0), at(30), at(35), timedelta(minutes=10))


def test_idle_timeout_never_declares_a_window_that_read_events():
    assert not idle_declared(3, at(0), at(30), at(90), timedelta(minutes=10))


def test_idle_declaration_is_off_without_a_timeout():
    assert not idle_declared(0, at(0), at(30), at(900), None)
