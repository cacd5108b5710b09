"""The order of a key's Debezium changes: the source database's log position, never ``ts_ms``.

``ts_ms`` is a wall-clock reading in milliseconds (the commit time, or when the connector
processed the event): two changes of one key in one millisecond tie, and clocks step back.
The ``source`` block of every change event carries the position in the database's log
instead, and the ordering key (:func:`airflow_cdc.model.encode_ordering_key` bytes) is built
from it alone:

* **PostgreSQL** (connector ``postgresql``): ``source.sequence`` is JSON text of two LSNs as
  decimal strings, ``["<last commit LSN>", "<event LSN>"]`` (either may be null). pgoutput
  delivers transactions in commit order, and the first LSN is the commit LSN of the last
  transaction the connector had completed when it emitted the event, so it grows with each
  commit; the event LSN orders the changes inside one transaction (a transaction's changes can
  have LSNs below those of a transaction that committed before it, which is why the event LSN
  alone is not the order). Position: (commit LSN, event LSN); the key adds a rank between
  them (see "Snapshots"). Without ``sequence`` (older connectors) the event's ``lsn`` is all
  there is: (None, lsn). A null sorts first.
* **MySQL / MariaDB** (connectors ``mysql``, ``mariadb``): (binlog file number, ``pos``,
  ``row``): ``file`` is ``<base name>.<number>`` (``mysql-bin.000003``), ``pos`` the event's
  position in it, ``row`` the row within a multi-row event. The GTID is kept in the change's
  metadata but does not order: GTIDs of different servers (after a fail-over, or multi-source
  replication) have no common order, and binlog coordinates belong to the one server the
  connector reads (``server_id``); after the connector moves to another server, positions of
  the two servers do not compare, so such a stream is re-snapshotted.
* **MariaDB** (connector ``mariadb``, Debezium's MariaDB connector) follows the same rule,
  (binlog file number, ``pos``, ``row``), because MariaDB, like MySQL, writes a transaction
  to its binlog at commit, so the coordinates of one server are commit order. What its
  events carry (seen on MariaDB 10.11): each row event of a transaction has its own ``pos``
  (where the event starts in the file), rising through the transaction; the rows of one
  multi-row statement share ``pos`` and count ``row`` 0, 1, ...; a file number grows at each
  rotation (``max_binlog_size``, a server restart). The GTID ``<domain>-<server>-<sequence>``
  names the transaction (it is the transaction id) but does not order: sequences count per
  replication domain, and two domains have no common order. A ``RESET MASTER`` numbers the
  files from 1 again: like a change of server, that needs a new snapshot. A change delivered
  twice (a restarted capture) has the same coordinates, so the same event id.

**Snapshots** sort by their position too, never by being snapshots. Debezium gives every
READ of an initial (or blocking) snapshot the position where the snapshot began: PostgreSQL
the commit LSN the connector resumed from (null on a first start) and, as event LSN, the WAL
position read when the snapshot transaction started; MySQL the binlog coordinates read under
the snapshot's lock (``row`` 0). A PostgreSQL snapshot sits *between* transactions: it sees
every transaction committed up to the commit LSN it carries and none after, while a
transaction committed after it (the ones whose events carry that same commit LSN) may have
written WAL before the snapshot began (it was in flight), so its event LSNs can be below the
READ's. The PostgreSQL key is therefore (commit LSN, READ before change, event LSN, op rank):
a READ precedes the changes of the transaction that follows its commit LSN, whatever their
event LSNs. MySQL writes a transaction to the binlog when it commits, so binlog coordinates
are already commit order, and a READ's coordinates precede every change streamed after the
snapshot (MariaDB's READs carry those coordinates with ``row`` 0, ``server_id`` 0 and no
GTID). Incremental snapshot READs (``snapshot: "incremental"``) are emitted while
streaming, when a chunk's window closes, with the streaming position of that moment (after
Debezium dropped the chunk's READs of keys changed inside the window), so later changes of
the key sort after them by the same rules.

At one position, a READ sorts before any change (:func:`op_rank`), then deletes before inserts
and updates, so a key-changing update (a delete of the old key and a create of the new one at
the same position: PostgreSQL's event LSN, MySQL's and MariaDB's (file, pos, row) of the one
row event) resolves the same way on every run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_cdc.model import encode_ordering_key
from airflow_cdc.sources.debezium.errors import MalformedEventError, UnsupportedConnectorError

POSTGRESQL = "postgresql"
MYSQL_CONNECTORS = ("mysql", "mariadb")
CONNECTORS = (POSTGRESQL, *MYSQL_CONNECTORS)
# At one position: a READ first, then a delete, then an insert or update.
_OP_RANKS = {"r": 0, "d": 1, "c": 2, "u": 2, "t": 3}
_BINLOG_FILE = re.compile(r"^(.*?)\.?(\d+)$")


@dataclass(frozen=True)
class SourcePosition:
    """Where an event is in its database's log: ``parts`` order it (None sorts first), ``text``
    is a stable spelling for event ids (``<commit lsn>:<event lsn>``, ``<file>:<pos>:<row>``)."""

    connector: str
    parts: tuple
    text: str


def connector_of(source: Mapping) -> str:
    """``source.connector`` of a change event (``postgresql``, ``mysql``, ``mariadb``), refused
    with the fix when it is missing or not one this source orders."""
    connector = source.get("connector")
    if connector not in CONNECTORS:
        raise UnsupportedConnectorError(
            f"source.connector {connector!r} is not one whose log position this source can order "
            f"({', '.join(CONNECTORS)}): capture with Debezium's PostgreSQL, MySQL or MariaDB "
            f"connector"
        )
    return str(connector)


def source_position(source: Mapping) -> SourcePosition:
    """The log position in ``source`` (module docstring), by its connector."""
    connector = connector_of(source)
    if connector == POSTGRESQL:
        commit_lsn, event_lsn = postgresql_lsns(source)
        text = f"{'' if commit_lsn is None else commit_lsn}:{'' if event_lsn is None else event_lsn}"
        return SourcePosition(connector, (commit_lsn, event_lsn), text)
    number, pos, row = binlog_position(source)
    return SourcePosition(connector, (number, pos, row), f"{source.get('file')}:{pos}:{row}")


def postgresql_lsns(source: Mapping) -> tuple[int | None, int | None]:
    """(last commit LSN, event LSN) from ``source.sequence``, else (None, ``source.lsn``)."""
    sequence = source.get("sequence")
    if sequence is not None:
        try:
            parsed = json.loads(sequence) if isinstance(sequence, str) else sequence
        except ValueError:
            parsed = None
        if not (isinstance(parsed, list) and len(parsed) == 2):
            raise MalformedEventError(
                f"source.sequence {sequence!r} is not a JSON array of two LSNs "
                f'(["<last commit lsn>", "<event lsn>"]) as the PostgreSQL connector writes it'
            )
        commit_lsn, event_lsn = (_lsn(f"source.sequence[{i}]", v) for i, v in enumerate(parsed))
        if commit_lsn is not None or event_lsn is not None:
            return commit_lsn, event_lsn
    lsn = _lsn("source.lsn", source.get("lsn"))
    if lsn is None:
        raise MalformedEventError(
            "PostgreSQL event has neither source.sequence nor source.lsn: its position is unknown"
        )
    return None, lsn


def binlog_position(source: Mapping) -> tuple[int, int, int]:
    """(binlog file number, ``pos``, ``row``) of a MySQL/MariaDB event."""
    file_name = source.get("file")
    match = _BINLOG_FILE.match(str(file_name or ""))
    if not file_name or not match:
        raise MalformedEventError(
            f"source.file {file_name!r} is not a binlog file name like mysql-bin.000003: the "
            f"MySQL connector sets it on every event"
        )
    pos = _whole("source.pos", source.get("pos"))
    number = _whole(f"source.file {file_name!r}'s number", match.group(2))
    return number, pos, _whole("source.row", source.get("row") or 0)


def op_rank(op: str) -> int:
    """The rank of ``op`` among events at one position: READ 0, delete 1, create/update 2."""
    try:
        return _OP_RANKS[op]
    except KeyError:
        raise MalformedEventError(f"op {op!r} has no place in the order (expected c, u, d, r, t)") from None


def ordering_key(position: SourcePosition, op: str) -> bytes:
    """The ordering key of an event at ``position`` with ``op`` (module docstring):
    PostgreSQL (commit LSN, 0 for a READ else 1, event LSN, op rank); MySQL/MariaDB
    (binlog file number, pos, row, op rank)."""
    rank = op_rank(op)
    if position.connector == POSTGRESQL:
        commit_lsn, event_lsn = position.parts
        return encode_ordering_key(commit_lsn, 0 if op == "r" else 1, event_lsn, rank)
    return encode_ordering_key(*position.parts, rank)


#: The parts of the ordering key, per connector (``ChangeSource.ordering_key_parts``).
ORDERING_KEY_PARTS = {
    POSTGRESQL: ("commit_lsn", "read_before_change", "event_lsn", "op_rank"),
    "mysql": ("binlog_file_number", "pos", "row", "op_rank"),
    "mariadb": ("binlog_file_number", "pos", "row", "op_rank"),
}


def _lsn(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise MalformedEventError(f"{name} {value!r} is not an LSN")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip()
        try:
            if "/" in text:  # X/Y, as PostgreSQL prints LSNs
                high, low = text.split("/", 1)
                number = (int(high, 16) << 32) | int(low, 16)
            else:
                number = int(text)
        except ValueError:
            raise MalformedEventError(
                f"{name} {value!r} is not an LSN (a decimal number, as Debezium writes LSNs)"
            ) from None
    if not 0 <= number < (1 << 63):
        raise MalformedEventError(f"{name} {value!r} is out of the LSN range")
    return number


def _whole(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise MalformedEventError(f"{name} {value!r} is not a non-negative integer")
    try:
        number = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MalformedEventError(f"{name} {value!r} is not a non-negative integer") from None
    if number < 0 or number >= (1 << 63):
        raise MalformedEventError(f"{name} {value!r} is not a non-negative integer")
    return number
