"""A seeded, deterministic history of tables with commit timestamp columns.

:func:`generate_commit_timestamp_tables` writes, from a seed alone, a few thousand transactions
over about two hours (defaults) into a :class:`VersionedDatabase` through its own
``commit(mutations, at=...)``, with the schema :data:`COMMIT_TIMESTAMP_SCHEMA`:

* ``Orders`` (key ``OrderId``): every column type (STRING, INT64, FLOAT64, BOOL, NUMERIC, JSON,
  DATE, BYTES, ARRAY<STRING>, ARRAY<INT64>), a plain TIMESTAMP ``PlacedAt`` without the option,
  and ``LastUpdateTime`` (allow_commit_timestamp) written on every insert and update; rows are
  inserted, updated and HARD deleted.
* ``Documents`` (key ``UserId, DocumentId``) and its change log ``DocumentHistory`` (key
  ``UserId, DocumentId, Ts``, ``Ts`` the commit timestamp), interleaved in Documents ON DELETE
  NO ACTION: every insert or update of a document writes a history row in the same
  transaction; now and then a document is deleted together with its history.
* ``Customers`` (key ``CustomerId``), soft-deleted now and then (``Deleted = true`` with
  ``UpdatedAt`` the commit timestamp; some are undeleted later), with the secondary index
  ``CustomersByUpdatedAt`` that a commit timestamp leads (a hotspot, as the docs warn).
* ``Events`` with ``PRIMARY KEY (EventTime, EventId)``: the commit timestamp leads the key.

Some transactions commit exactly on whole minutes (window boundaries) and some pairs of
transactions on disjoint rows share one commit timestamp; ``database.seeded_facts`` (also in
``summary()``) lists them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from airflow_cdc_emulators.common import EmulatorError, ensure_utc

from ..clock import wall_micros
from ..history import DEFAULT_START
from ..timeline import to_datetime, to_micros
from .definition import (
    DEFAULT_VERSION_RETENTION_PERIOD,
    ColumnSpec,
    DatabaseSchema,
    IndexSpec,
    TableSpec,
)
from .mutations import KeyRange, delete, insert, update
from .store import VersionedDatabase
from .values import COMMIT_TIMESTAMP


def _c(name: str, type_text: str, nullable: bool = True, commit_ts: bool = False) -> ColumnSpec:
    return ColumnSpec(name, type_text, nullable, commit_ts)


ORDERS = TableSpec(
    "Orders",
    (
        _c("OrderId", "INT64", nullable=False),
        _c("CustomerName", "STRING"),
        _c("Quantity", "INT64"),
        _c("Amount", "FLOAT64"),
        _c("Paid", "BOOL"),
        _c("Total", "NUMERIC"),
        _c("Details", "JSON"),
        _c("DeliveryDate", "DATE"),
        _c("Receipt", "BYTES"),
        _c("Tags", "ARRAY<STRING>"),
        _c("ItemCounts", "ARRAY<INT64>"),
        _c("PlacedAt", "TIMESTAMP"),
        _c("LastUpdateTime", "TIMESTAMP", nullable=False, commit_ts=True),
    ),
    ("OrderId",),
)
DOCUMENTS = TableSpec(
    "Documents",
    (
        _c("UserId", "INT64", nullable=False),
        _c("DocumentId", "INT64", nullable=False),
        _c("Contents", "STRING", nullable=False),
        _c("LastUpdateTime", "TIMESTAMP", nullable=False, commit_ts=True),
    ),
    ("UserId", "DocumentId"),
)
DOCUMENT_HISTORY = TableSpec(
    "DocumentHistory",
    (
        _c("UserId", "INT64", nullable=False),
        _c("DocumentId", "INT64", nullable=False),
        _c("Ts", "TIMESTAMP", nullable=False, commit_ts=True),
        _c("Delta", "STRING"),
    ),
    ("UserId", "DocumentId", "Ts"),
    parent="Documents",
    on_delete="NO ACTION",
)
CUSTOMERS = TableSpec(
    "Customers",
    (
        _c("CustomerId", "STRING", nullable=False),
        _c("Name", "STRING"),
        _c("Tier", "STRING"),
        _c("Deleted", "BOOL", nullable=False),
        _c("UpdatedAt", "TIMESTAMP", nullable=False, commit_ts=True),
    ),
    ("CustomerId",),
)
EVENTS = TableSpec(
    "Events",
    (
        _c("EventTime", "TIMESTAMP", nullable=False, commit_ts=True),
        _c("EventId", "STRING", nullable=False),
        _c("Kind", "STRING"),
        _c("Payload", "JSON"),
    ),
    ("EventTime", "EventId"),
)
COMMIT_TIMESTAMP_SCHEMA = DatabaseSchema(
    (ORDERS, DOCUMENTS, DOCUMENT_HISTORY, CUSTOMERS, EVENTS),
    (IndexSpec("CustomersByUpdatedAt", "Customers", ("UpdatedAt",)),),
)

_WORDS = (
    "amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "juniper",
    "kestrel", "lumen", "maple", "nectar", "onyx", "pine", "quartz", "raven", "sage", "tundra",
)  # fmt: skip
_TIERS = ("FREE", "SILVER", "GOLD", "PLATINUM")
_EVENT_KINDS = ("login", "logout", "search", "checkout", "refund")
_KINDS = (
    ("order_insert", 0.28),
    ("order_update", 0.24),
    ("order_delete", 0.05),
    ("document_write", 0.16),
    ("document_delete", 0.01),
    ("customer_write", 0.125),
    ("customer_soft_delete", 0.025),
    ("customer_undelete", 0.01),
    ("event_insert", 0.10),
)
_ORDER_VALUE_COLUMNS = tuple(c.name for c in ORDERS.columns[1:-1])


class CommitTimestampHistoryError(EmulatorError, ValueError):
    """A parameter of the seeded commit timestamp history is out of range."""


@dataclass(frozen=True)
class CommitTimestampHistoryConfig:
    """Everything the seeded tables depend on; the defaults give ~2 h and ~3,000 transactions.

    ``wall_clock``: the database's clock follows real time (the history must end by now).
    """

    seed: int = 7
    start: datetime = DEFAULT_START
    duration: timedelta = timedelta(hours=2)
    transactions_per_minute: float = 25.0
    version_retention_period: str | timedelta = DEFAULT_VERSION_RETENTION_PERIOD
    whole_minute_commits: int = 15
    shared_commit_pairs: int = 8
    users: int = 12
    documents_per_user: int = 10
    customers: int = 150
    wall_clock: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", ensure_utc("history start", self.start))
        if self.duration <= timedelta(0):
            raise CommitTimestampHistoryError(f"duration {self.duration} must be positive")
        if self.transactions_per_minute <= 0:
            raise CommitTimestampHistoryError(
                f"transactions_per_minute {self.transactions_per_minute} must be positive"
            )
        if min(self.whole_minute_commits, self.shared_commit_pairs) < 0:
            raise CommitTimestampHistoryError(
                "whole_minute_commits and shared_commit_pairs must not be negative"
            )
        if min(self.users, self.documents_per_user, self.customers) < 1:
            raise CommitTimestampHistoryError("users, documents_per_user, customers must be >= 1")

    @property
    def end(self) -> datetime:
        return self.start + self.duration


def generate_commit_timestamp_tables(**overrides) -> VersionedDatabase:
    """``commit_timestamp_tables(CommitTimestampHistoryConfig(**overrides))``."""
    return commit_timestamp_tables(CommitTimestampHistoryConfig(**overrides))


def commit_timestamp_tables(config: CommitTimestampHistoryConfig) -> VersionedDatabase:
    """The seeded tables; the clock stands at the end of the history (or follows wall time)."""
    start_us, end_us = to_micros(config.start), to_micros(config.end)
    if config.wall_clock:
        if end_us > wall_micros():
            raise CommitTimestampHistoryError(
                f"a wall-clock history must end by now: {config.end.isoformat()} is in the "
                f"future; start it earlier"
            )
        database = VersionedDatabase(
            COMMIT_TIMESTAMP_SCHEMA,
            created_at=config.start,
            version_retention_period=config.version_retention_period,
            clock="wall",
        )
    else:
        database = VersionedDatabase(
            COMMIT_TIMESTAMP_SCHEMA,
            created_at=config.start,
            version_retention_period=config.version_retention_period,
            now=config.end,
        )
    _Writer(database, config).run(start_us, end_us)
    return database


class _Writer:
    """Plans and commits the transactions, in commit order, keeping which rows exist."""

    def __init__(self, database: VersionedDatabase, config: CommitTimestampHistoryConfig) -> None:
        self.database = database
        self.config = config
        self.rng = random.Random(f"commit-timestamps/{config.seed}")
        self.next_order_id = 1
        self.orders: list[int] = []
        self.documents: set[tuple[int, int]] = set()
        self.customers: dict[str, bool] = {}  # id -> soft-deleted
        self.events = 0
        self.soft_deletes = 0
        self.undeletes = 0

    def run(self, start_us: int, end_us: int) -> None:
        rng, config = self.rng, self.config
        mean_gap = 60_000_000 / config.transactions_per_minute
        times: set[int] = set()
        at = start_us
        while True:
            at += max(1, int(rng.expovariate(1.0 / mean_gap)))
            if at >= end_us:
                break
            times.add(at)
        minutes = list(range(start_us + 60_000_000 - start_us % 60_000_000, end_us, 60_000_000))
        whole_minutes = set(rng.sample(minutes, min(config.whole_minute_commits, len(minutes))))
        ordered = sorted(times | whole_minutes)
        shared = set(rng.sample(range(len(ordered)), min(config.shared_commit_pairs, len(ordered))))
        kinds = [k for k, _ in _KINDS]
        weights = [w for _, w in _KINDS]
        for index, commit_us in enumerate(ordered):
            when = to_datetime(commit_us)
            if commit_us in whole_minutes:
                kind = "order_update" if self.orders and rng.random() < 0.5 else "order_insert"
            else:
                kind = rng.choices(kinds, weights)[0]
            self.database.commit(self._plan(kind, when), at=commit_us)
            if index in shared:  # a second transaction, on other rows, at the same timestamp
                second = "event_insert" if rng.random() < 0.5 else "order_insert"
                self.database.commit(self._plan(second, when), at=commit_us)
        self.database.seeded_facts = {
            "seed": config.seed,
            "soft_deletes": self.soft_deletes,
            "undeletes": self.undeletes,
            "whole_minute_commits": [to_datetime(t).isoformat() for t in sorted(whole_minutes)],
            "shared_commit_pairs": len(shared),
        }

    def _plan(self, kind: str, when: datetime) -> list:
        if kind == "order_update" and self.orders:
            return self._order_update(when)
        if kind == "order_delete" and len(self.orders) > 10:
            order_id = self.orders.pop(self.rng.randrange(len(self.orders)))
            return [delete("Orders", keys=[(order_id,)])]
        if kind == "document_write":
            return self._document_write()
        if kind == "document_delete" and self.documents:
            key = self.rng.choice(sorted(self.documents))
            self.documents.discard(key)
            return [
                delete("DocumentHistory", ranges=[KeyRange(key, key)]),
                delete("Documents", keys=[key]),
            ]
        if kind in ("customer_write", "customer_soft_delete", "customer_undelete"):
            planned = self._customer(kind)
            if planned:
                return planned
        if kind == "event_insert":
            return self._events()
        return self._order_insert(when)

    # --- Orders -------------------------------------------------------------------------
    def _order_insert(self, when: datetime) -> list:
        order_id = self.next_order_id
        self.next_order_id += 1
        self.orders.append(order_id)
        values = [self._order_value(name, when) for name in _ORDER_VALUE_COLUMNS]
        return [
            insert(
                "Orders",
                ("OrderId", *_ORDER_VALUE_COLUMNS, "LastUpdateTime"),
                [(order_id, *values, COMMIT_TIMESTAMP)],
            )
        ]

    def _order_update(self, when: datetime) -> list:
        rng = self.rng
        order_id = rng.choice(self.orders)
        columns = rng.sample(_ORDER_VALUE_COLUMNS, rng.randint(1, 3))
        values = [self._order_value(name, when) for name in columns]
        return [
            update(
                "Orders",
                ("OrderId", *columns, "LastUpdateTime"),
                [(order_id, *values, COMMIT_TIMESTAMP)],
            )
        ]

    def _order_value(self, name: str, when: datetime):
        rng = self.rng
        if rng.random() < 0.05:
            return None
        if name == "CustomerName":
            return f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}"
        if name == "Quantity":
            # Now and then beyond 2**53, where a JSON number would lose digits.
            return rng.randint(2**53, 2**62) if rng.random() < 0.05 else rng.randint(1, 500)
        if name == "Amount":
            return round(rng.uniform(-50.0, 5_000.0), 2)
        if name == "Paid":
            return rng.random() < 0.6
        if name == "Total":
            return Decimal(rng.randint(-(10**12), 10**13)).scaleb(-rng.choice((0, 2, 4, 9)))
        if name == "Details":
            return {
                "sku": f"{rng.choice(_WORDS)}-{rng.randint(1, 999)}",
                "qty": rng.randint(1, 20),
                "gift": rng.random() < 0.2,
                "notes": None if rng.random() < 0.5 else [rng.choice(_WORDS)],
            }
        if name == "DeliveryDate":
            return date(2025, 1, 1) + timedelta(days=rng.randint(0, 90))
        if name == "Receipt":
            return rng.randbytes(rng.randint(1, 24))
        if name == "Tags":
            tags = [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))]
            if tags and rng.random() < 0.15:
                tags[rng.randrange(len(tags))] = None  # arrays may hold NULL elements
            return tags
        if name == "ItemCounts":
            counts = [rng.randint(0, 9) for _ in range(rng.randint(0, 4))]
            if counts and rng.random() < 0.15:
                counts[rng.randrange(len(counts))] = None
            return counts
        # PlacedAt: a plain TIMESTAMP, in the past of the commit, microseconds included
        return when - timedelta(microseconds=rng.randint(0, 86_400_000_000))

    # --- Documents and their change log ---------------------------------------------------
    def _document_write(self) -> list:
        rng, config = self.rng, self.config
        key = (rng.randint(1, config.users), rng.randint(1, config.documents_per_user))
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12)))
        history = insert(
            "DocumentHistory",
            ("UserId", "DocumentId", "Ts", "Delta"),
            [(*key, COMMIT_TIMESTAMP, f"{'~' if key in self.documents else '+'}{text}")],
        )
        operation = update if key in self.documents else insert
        self.documents.add(key)
        document = operation(
            "Documents",
            ("UserId", "DocumentId", "Contents", "LastUpdateTime"),
            [(*key, text, COMMIT_TIMESTAMP)],
        )
        return [document, history]

    # --- Customers (soft deletes) ---------------------------------------------------------
    def _customer(self, kind: str) -> list:
        rng = self.rng
        columns = ("CustomerId", "Deleted", "UpdatedAt")
        if kind == "customer_soft_delete":
            live = sorted(c for c, deleted in self.customers.items() if not deleted)
            if not live:
                return []
            customer = rng.choice(live)
            self.customers[customer] = True
            self.soft_deletes += 1
            return [update("Customers", columns, [(customer, True, COMMIT_TIMESTAMP)])]
        if kind == "customer_undelete":
            gone = sorted(c for c, deleted in self.customers.items() if deleted)
            if not gone:
                return []
            customer = rng.choice(gone)
            self.customers[customer] = False
            self.undeletes += 1
            return [update("Customers", columns, [(customer, False, COMMIT_TIMESTAMP)])]
        customer = f"cust-{rng.randint(1, self.config.customers):04d}"
        name = f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS).title()}"
        tier = rng.choice(_TIERS)
        if customer in self.customers:
            return [
                update(
                    "Customers",
                    ("CustomerId", "Tier", "UpdatedAt"),
                    [(customer, tier, COMMIT_TIMESTAMP)],
                )
            ]
        self.customers[customer] = False
        return [
            insert(
                "Customers",
                ("CustomerId", "Name", "Tier", "Deleted", "UpdatedAt"),
                [(customer, name, tier, False, COMMIT_TIMESTAMP)],
            )
        ]

    # --- Events (commit timestamp leading the key) ----------------------------------------
    def _events(self) -> list:
        rng = self.rng
        rows = []
        for _ in range(rng.randint(1, 3)):
            self.events += 1
            payload = {"user": rng.randint(1, 500), "ok": rng.random() < 0.9}
            rows.append(
                (COMMIT_TIMESTAMP, f"evt-{self.events:06d}", rng.choice(_EVENT_KINDS), payload)
            )
        return [insert("Events", ("EventTime", "EventId", "Kind", "Payload"), rows)]
