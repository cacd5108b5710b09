"""The Airflow side of a source: its hook, built from the pipeline's ``source_conn`` arguments.

A source names the class of its hook (:attr:`~airflow_cdc.sources.base.ChangeSource.airflow_hook`,
``module:Class``); the plan task, the readiness probe and the extract task build it here and
hand it to the source's plan-time methods. A source without one gets None.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def source_hook(source, conn_args: Mapping[str, Any] | None = None):
    """``source``'s Airflow hook built with ``conn_args``, or None when it needs none."""
    path = type(source).airflow_hook
    if not path:
        return None
    module_name, _, name = path.partition(":")
    hook_class = getattr(importlib.import_module(module_name), name)
    try:
        return hook_class(**dict(conn_args or {}))
    except TypeError as error:
        raise TypeError(
            f"source {type(source).kind!r}: its hook {path} does not take source_conn "
            f"{sorted(conn_args or {})} ({error}); give only the arguments it takes"
        ) from error
