"""The registry finds a source by kind, installed entry point or import path, and refuses the rest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_cdc.sources import registry
from airflow_cdc.sources.registry import UnknownSourceError, source_class, source_package, source_spec

PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    yield
    for name in [m for m in sys.modules if m.startswith("split_once_source")]:
        del sys.modules[name]


def test_a_built_in_kind_is_found_by_its_name():
    assert source_class("datastream").kind == "datastream"


def test_a_source_is_found_by_import_path(plugins):
    assert source_class("split_once_source:SplitOnceSource").kind == "split_once"


def test_an_installed_source_is_found_by_its_entry_point(plugins, monkeypatch):
    monkeypatch.setattr(registry, "_entry_points", lambda: {"split_once": "split_once_source:SplitOnceSource"})

    assert source_class("split_once").__name__ == "SplitOnceSource"


def test_an_entry_point_named_unlike_its_sources_kind_is_refused(plugins, monkeypatch):
    monkeypatch.setattr(registry, "_entry_points", lambda: {"splits": "split_once_source:SplitOnceSource"})

    with pytest.raises(UnknownSourceError, match=r"kind is 'split_once': register it under .* 'split_once'"):
        source_class("splits")


def test_an_unknown_kind_names_the_known_ones_and_how_to_add_one():
    with pytest.raises(UnknownSourceError, match=r"'kafka' is unknown .* \['bigtable_change_stream', 'datastream', 'debezium', 'spanner_change_stream', 'spanner_commit_ts'\].*import path"):
        source_class("kafka")


def test_a_class_that_is_not_a_change_source_is_refused():
    with pytest.raises(UnknownSourceError, match=r"not a ChangeSource subclass"):
        source_class("airflow_cdc.model:Window")


def test_an_external_source_records_its_import_path_and_ships_its_package(plugins, tmp_path):
    spec = source_spec("split_once_source:SplitOnceSource", "items", {"log": str(tmp_path / "log.json")})

    assert spec["class"] == "split_once_source.source:SplitOnceSource" and spec["kind"] == "split_once"
    assert source_package(spec) == "split_once_source"


def test_a_built_in_source_records_no_import_path_and_ships_nothing():
    spec = source_spec("datastream", "shop", {"prefix": "/landing"})

    assert "class" not in spec and source_package(spec) is None
