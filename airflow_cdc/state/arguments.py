"""What the state store accepts from its callers: each check names the argument and bad value.

The facade checks its arguments before it opens a transaction, so a caller's mistake never
takes the database's write lock.
"""

from __future__ import annotations

from datetime import timedelta

from airflow_cdc.model import PartitionPosition, Window
from airflow_cdc.state.errors import InvalidPlanError
from airflow_cdc.state.tables import dumps

_MAX_LEASE_SECONDS = 366 * 24 * 3600  # beyond a year is a unit mistake (ms for s)


def require_window(window: object) -> None:
    if not isinstance(window, Window):
        raise TypeError(f"window must be an airflow_cdc.model.Window, got {type(window).__name__}")


def require_text(what: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")


def require_int(what: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer (an Iceberg snapshot id), got {value!r}")


def require_lease_seconds(value: object) -> timedelta:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < _MAX_LEASE_SECONDS
    ):
        raise ValueError(
            f"lease_seconds must be a positive number of seconds below one year, got {value!r}"
        )
    return timedelta(seconds=value)


def require_limit(limit: object) -> int:
    """A read's row limit: a whole number of at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit {limit!r} is not a positive whole number: ask for 1 or more rows")
    return limit


def require_json(what: str, value: object) -> None:
    try:
        dumps(value)
    except TypeError as exc:
        raise TypeError(f"{what} must hold JSON values (numbers, strings, lists): {exc}") from None


def check_initial_positions(window: Window, positions: tuple[PartitionPosition, ...]) -> None:
    seen: set[str] = set()
    for position in positions:
        if not isinstance(position, PartitionPosition):
            raise TypeError(
                f"initial positions must be PartitionPosition values, got "
                f"{type(position).__name__}: {position!r}"
            )
        require_text("partition id", position.partition_id)
        if position.partition_id in seen:
            raise InvalidPlanError(
                f"partition {position.partition_id!r} appears twice in the initial positions "
                f"of stream {window.stream_id!r}: the source adapter must plan each partition once"
            )
        seen.add(position.partition_id)
