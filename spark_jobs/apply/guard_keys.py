"""Guard rows for the window's own keys: a small window's fold does not shuffle the whole target.

A performance strategy (switch ``Strategies.guard_rows_of_window_keys``) with one interface,
:func:`guard_keys_only` (``table_fold`` asks it; ``fold.ordered_changes`` then joins each
guard side with the window's keys). Saves the shuffle of a large target for a small window;
against a small target the join's own job costs more than it saves, hence the floor below
(``bench/guard.py``; figures in docs/performance.md).

The fold's guard (``fold.ordered_changes``) is one row per key of the target and of its
tombstones, shuffled and sorted with the window's changes. Without this strategy that is
every key of the target, in every window: a window of 1,000 changes against a target of
2,000,000 rows shuffles and sorts 2,001,000 rows, so a window's cost grows with its target.
Only the guard rows of keys the window changes are read by the fold (the others leave
right after its window pass), so when the window is small against its guard, each guard
side is first joined (left semi, broadcast) with the keys of the window's changes: the
target is still scanned (two columns), but only the window's keys reach the shuffle.

Not taken for a window as large as its target (the bench's 1M changes over 200,000 keys):
the window's keys would be read twice and broadcast to spare few guard rows.

What still grows with the target (bench/guard.py) is the copy-on-write MERGE: it rewrites
every target file a changed key falls in, and a window's keys fall into nearly all of them
(``targets.rewrites_nearly_every_file``).
"""

from __future__ import annotations

#: A window of more change rows than this never broadcasts its keys (each is a key text of
#: a few tens of bytes in the broadcast relation, duplicates included).
DEFAULT_GUARD_FILTER_MAX_ROWS = 500_000
#: The guard must be at least this many times the window's rows for the join to pay...
GUARD_ROWS_PER_WINDOW_ROW = 4
#: ...and at least this large: below it, sorting the whole guard costs less than the join.
MIN_GUARD_ROWS = 200_000


def guard_keys_only(window_rows: int, guard_rows: int, max_rows: int) -> bool:
    """Whether a table's fold reads the guard rows of its window's keys only.

    ``window_rows``: the table's change rows in the window; ``guard_rows``: an estimate of the
    target's and tombstones' rows (their snapshots' record counts); ``max_rows``: the
    config's ``guard_filter_max_rows`` (0 turns the strategy off).
    """
    if max_rows <= 0 or window_rows > max_rows:
        return False
    return guard_rows >= max(MIN_GUARD_ROWS, GUARD_ROWS_PER_WINDOW_ROW * max(1, window_rows))
