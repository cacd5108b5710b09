"""The errors of the Debezium source: each names the event, the value and the fix.

They live apart from :mod:`.records` and :mod:`.types` so that both raise them without
importing each other. Every line error (:class:`MalformedEventError` and its kinds) sends the
line it concerns to the dead-letter table (with its message as the reason): the source never
drops a line silently. :class:`IncompleteTransactionError` fails the window instead.
"""

from __future__ import annotations

from airflow_cdc.model import CdcError


class MalformedEventError(CdcError, ValueError):
    """A line of a sink file that cannot become a change: it goes to the dead-letter table."""


class KeylessTableError(MalformedEventError):
    """A change of a table the stream has no key columns for ("events for tables without a key")."""


class UnsupportedDebeziumTypeError(MalformedEventError):
    """A column whose Debezium/Kafka Connect type has no canonical type (an unknown logical type)."""


class UnsupportedConnectorError(MalformedEventError):
    """An event of a Debezium connector whose source position this source cannot order."""


class IncompleteTransactionError(CdcError):
    """A transaction's END counts more events of a table than the window and the changelog
    hold: the window cannot be proven complete and stays uncommitted."""


class InvalidSignalError(CdcError, ValueError):
    """A Debezium signal refused before any SQL is built (a table name, a filter, a key)."""


class SignalTargetError(CdcError):
    """The database cannot take a signal as asked: a table without a primary key, a signal
    table that is missing or has other columns."""
