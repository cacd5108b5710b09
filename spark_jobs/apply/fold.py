"""Fold one source table's window of changes into one outcome per key, in one Spark pass.

Procedure (:func:`fold_table`):

1. Parse (:func:`parse_changes`): keys and new values are read as ``map<string,string>``, so a
   column set to NULL (present, null) differs from a column a partial image leaves out
   (absent). Keys become the target's key types. A row is bad when it cannot be applied as
   written: key columns other than the target's, unknown op or image, a bad
   ``column_types`` declaration (see ``schema.py``), a column no declaration types. The fold
   carries only that flag; the dead-letter path says why (:func:`dead_letter_rows`).
2. Order (one shuffle by key, one sort by ordering key, which the guard's rows share):
   each change is compared with the previous change of its key. The same ordering key with
   the same content is a redelivery (applied once); with different content it is a clash, a
   source bug that is reported and never resolved by arrival order.
3. Guard: the key's ordering key in the target or its tombstone (read as they were before
   this window). Only changes with a greater ordering key are *live*; the others lost already
   (re-runs, late older changes: I2, I3).
4. Fold (one aggregate per key): a *reset* (INSERT, READ, DELETE, or any FULL image) replaces
   the whole row; a PARTIAL image sets only the columns it carries. So each column's folded
   value is the value from the live change with the greatest ordering key among the resets
   and the partial images carrying that column, and a column no live change touches keeps
   the target's value. The folded values are then typed; one that does not convert makes
   the key dead (values of superseded changes are never applied, so they are checked only
   where every change is kept: with history on).
5. Decide, per key: ``DELETE`` when the last live change is a delete; ``UPSERT`` when a
   non-delete reset is the latest reset; ``PATCH`` (partial images onto the target row) when
   there is no reset and the target holds the key; ``STALE`` when nothing is live; ``DEAD``
   when the changes cannot be applied correctly: a clash, a row with a reason, partial
   images for a key the target does not hold, or partial images after a delete. A dead key
   sends all of its window's rows to the dead-letter table and changes nothing, so a target
   row never reflects half of a key's changes.

Steps 1-3 (:func:`ordered_changes`) and steps 4-5 (:func:`fold_table`) are each one Spark SQL
statement, built as text in stages (``sql.py``): one py4j call and one analysis each, where the
same plan built from ``Column`` objects costs thousands of round trips per window. A table
without history folds with one statement for all five (:func:`folded_changes`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from airflow_cdc.model import CHANGELOG_COLUMNS
from airflow_cdc.spark_jobs.apply.schema import TablePlan
from airflow_cdc.spark_jobs.apply.sql import Query, any_of, case_when, coalesce_false, name, string, temp_views
from airflow_cdc.spark_jobs.apply.sql import frame as sql_frame
from airflow_cdc.spark_jobs.apply.values import array_elements, bad_value, conversion_failed, typed_value

OPS = ("INSERT", "UPDATE", "DELETE", "READ")
IMAGES = ("FULL", "PARTIAL")
_RAW_COLUMNS = [column for column, _ in CHANGELOG_COLUMNS]
_REASON_TEXT_LIMIT = 200
# A key's changes in ordering-key order (the guard's rows, with a NULL ordering key, first),
# and the whole of them.
_BY_KEY = "PARTITION BY __key ORDER BY ordering_key, __h"
_WHOLE_KEY = f"{_BY_KEY} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
_WINDOWS = {"k": _BY_KEY, "w": _WHOLE_KEY}
_IS_DELETE = "(op = 'DELETE')"
_IS_RESET = "(op IN ('INSERT', 'READ', 'DELETE') OR image = 'FULL')"  # replaces the whole row


def key_text(parts: list[tuple[str, str]]) -> str:
    """SQL text: the canonical text of a key (its typed values), to shuffle, sort, join and group.

    ``parts`` are (SQL text of a typed key value, its Spark type). A string sorts and hashes
    much faster than a struct, and typed values give one text per key whatever their JSON
    spelling (``1`` and ``"1"``). NULL parts stay distinct. One key column: ``v<value>`` or
    ``n`` (NULL); several: a JSON array of the values as text. Rows that address no target
    row get keys starting with ``!`` (see :func:`parse_changes`).
    """
    texts = [f"base64({c})" if t == "binary" else f"CAST({c} AS STRING)" for c, t in parts]
    if len(texts) == 1:
        return f"coalesce(concat('v', {texts[0]}), 'n')"
    return f"to_json(array({', '.join(texts)}))"


def stored_key_text(plan: TablePlan, qualifier: str = "") -> str:
    """SQL text: :func:`key_text` of a row of the target (or its tombstones, or history);
    ``qualifier`` (``"g."``) names the row's relation."""
    return key_text(
        [(f"CAST({qualifier}{name(k)} AS {plan.key_types[k]})", plan.key_types[k]) for k in plan.key_names]
    )


def key_columns(plan: TablePlan) -> list[str]:
    """SQL texts: the typed key columns, named as in the target, recovered from ``__key``."""
    if len(plan.key_names) == 1:
        texts = ["CASE WHEN __key != 'n' THEN substring(__key, 2) END"]
    else:
        texts = [f"from_json(__key, 'array<string>')[{i}]" for i in range(len(plan.key_names))]
    columns = []
    for text, key in zip(texts, plan.key_names):
        kind = plan.key_types[key]
        columns.append(f"{f'unbase64({text})' if kind == 'binary' else f'CAST({text} AS {kind})'} AS {name(key)}")
    return columns


@dataclass(frozen=True)
class FoldColumns:
    """Internal names of the folded frame's value columns: business column -> (value, set flag)."""

    values: dict[str, tuple[str, str]]


def fold_columns(plan: TablePlan) -> FoldColumns:
    return FoldColumns(
        values={column: (f"__v{i}", f"__s{i}") for i, column in enumerate(plan.columns)},
    )


def _text(value: str) -> str:
    """SQL text: a value quoted for a reason: 'text' (cut at 200 characters) or NULL."""
    return f"coalesce(concat('\\'', substring({value}, 1, {_REASON_TEXT_LIMIT}), '\\''), 'NULL')"


def _names(values: str) -> str:
    return f"concat('[', array_join({values}, ', '), ']')"


FOLD_INPUT = ("op", "image", "keys", "new_values", "commit_ts", "ordering_key")


def fold_input(plan: TablePlan) -> tuple[str, ...]:
    """The changelog columns the fold reads (the dead-letter path reads them all)."""
    return FOLD_INPUT + (("column_types_json",) if plan.bad_declarations else ())


def _parse(
    query: Query, plan: TablePlan, carry: Sequence[str], check_values: bool, reasons: bool
) -> list[str]:
    """Step 1 as stages of ``query`` (which reads the changelog rows); returns the output's columns.

    ``keys`` and ``new_values`` are maps of column name -> value text (``value_text`` in the
    model), so nothing is parsed here: a column is *touched* when its name is in the map
    (present, possibly NULL), and the key's text is built from the typed key values.

    Values stay text here; :func:`fold_table` types the folded values only (one per key and
    column, not one per change). With ``check_values``, every change's values are checked
    too (for the history, which keeps every change, and for dead-letter reasons).

    A row that cannot be applied as written is flagged by the rules of :func:`_row_problems`.
    With ``reasons`` the row gets ``__row_reason``, the text of the first rule it breaks (the
    dead-letter path); without, only ``__row_bad`` (the fold, which needs no more). The flag
    keeps the whole parse in the scan's generated code: some reason texts (sorted or filtered
    name lists) are expressions Spark only interprets, and one such expression anywhere in a
    projection makes Spark interpret the whole of it, for every row.

    Rows whose key columns are not the target's get a key starting with ``!``: they fold into
    groups of their own, which are dead-lettered.

    All of it runs before the fold's one shuffle, which then carries only the columns the
    fold reads (Spark prunes the others).
    """
    known_columns = list(dict.fromkeys([*plan.columns, *plan.key_names]))
    looked_up = _look_up_keys_and_values(query, plan, carry, known_columns)
    present = _presence(query, known_columns)
    problems = _row_problems(plan, known_columns, present, looked_up, check_values)
    if reasons:
        problem = f"coalesce({', '.join(f'CASE WHEN {c} THEN {text()} END' for c, text in problems)}) AS __row_reason"
    else:
        problem = f"({' OR '.join(coalesce_false(c) for c, _ in problems)}) AS __row_bad"
    names = fold_columns(plan)
    is_delete, is_reset = _IS_DELETE, _IS_RESET
    columns = [
        *carry,
        "__key",
        problem,
        f"{is_delete} AS __is_delete",
        f"{is_reset} AS __is_reset",
        "xxhash64(op, image, map_keys(new_values), map_values(new_values), commit_ts) AS __h",
        *[f"({is_reset} OR {present[c]}) AS {names.values[c][1]}" for c in plan.columns],
        *[f"CASE WHEN NOT {is_delete} THEN {looked_up[c]} END AS {names.values[c][0]}" for c in plan.columns],
    ]
    query.select(columns)
    return [column.rsplit(" AS ", 1)[-1] for column in columns]  # the output's names


def _look_up_keys_and_values(
    query: Query, plan: TablePlan, carry: Sequence[str], known_columns: list[str]
) -> dict[str, str]:
    """Stages of :func:`_parse`: the key's text and each known column's value, looked up once.

    Adds ``__rk<i>`` and ``__tk<i>`` (each key value as text and typed: the key text and the
    bad-value test use them), ``__key``, ``__key_fits`` (the key map names the target's key
    columns) and ``__g<i>`` (each known column's value text). Returns column -> ``__g<i>``.
    """
    expected_keys = sorted(plan.key_names)
    # Cheap (no sort, no lambda): as many keys as expected, and each expected one present.
    key_fits = " AND ".join(
        [coalesce_false(f"size(keys) = {len(expected_keys)}")]
        + [coalesce_false(f"map_contains_key(keys, {string(k)})") for k in expected_keys]
    )
    query.select([*carry, *[f"keys[{string(k)}] AS __rk{i}" for i, k in enumerate(plan.key_names)]])
    query.select(["*", *[f"{typed_value(f'__rk{i}', plan.key_types[k])} AS __tk{i}" for i, k in enumerate(plan.key_names)]])
    typed_key = key_text([(f"__tk{i}", plan.key_types[k]) for i, k in enumerate(plan.key_names)])
    # The text of a key map that is not the target's: names and values in the map's order
    # (the writers store names sorted), so one such map is one group.
    other_key = "concat('!', concat_ws('\\u0001', map_keys(keys), map_values(keys)))"
    query.select(
        [
            "*",
            f"CASE WHEN {key_fits} THEN {typed_key} ELSE {other_key} END AS __key",
            f"{key_fits} AS __key_fits",
            *[f"new_values[{string(c)}] AS __g{i}" for i, c in enumerate(known_columns)],
        ]
    )
    return {c: f"__g{i}" for i, c in enumerate(known_columns)}


def _presence(query: Query, known_columns: list[str]) -> dict[str, str]:
    """A stage of :func:`_parse`: whether each known column is present in the new values.

    Each known column was looked up once: present when its value is not NULL, and only for
    a NULL value (absent, or set to NULL) is the key searched for. The count of known
    columns present is the cheap test for unknown ones, whose names only the reason lists.
    Returns column -> ``__p<i>``.
    """
    query.select(
        [
            "*",
            *[
                f"(__g{i} IS NOT NULL OR {coalesce_false(f'map_contains_key(new_values, {string(c)})')}) AS __p{i}"
                for i, c in enumerate(known_columns)
            ],
        ]
    )
    return {c: f"__p{i}" for i, c in enumerate(known_columns)}


def parse_changes(
    rows: DataFrame,
    plan: TablePlan,
    carry: Sequence[str] = tuple(_RAW_COLUMNS),
    check_values: bool = True,
    reasons: bool = True,
) -> DataFrame:
    """Step 1: the ``carry`` columns plus the key, value texts, touched flags and row problems.

    See :func:`_parse`; this is the frame of it (the dead-letter path's, with reasons).
    """
    spark = rows.sparkSession
    with temp_views(spark, {"rows": rows}) as views:
        query = Query(views["rows"])
        _parse(query, plan, carry, check_values, reasons)
        return sql_frame(spark, query.sql())


def _row_problems(
    plan: TablePlan,
    known_columns: list[str],
    present: dict[str, str],
    looked_up: dict[str, str],
    check_values: bool,
) -> list[tuple[str, Callable[[], str]]]:
    """The rules a change row must keep, in the order its reason names them: (broken, reason text).

    Conditions (SQL text) use the columns :func:`_parse` computed (``__key_fits``,
    ``__rk<i>``, ``__tk<i>``, ``__g<i>``, ``__p<i>``); texts are built only when reasons
    are asked for.
    """
    is_delete = _IS_DELETE
    expected_keys = sorted(plan.key_names)

    def other_keys() -> str:
        differ = string(
            f" differ from the key columns {expected_keys} of target {plan.target}: the "
            f"row cannot be matched to a target row"
        )
        return case_when(
            [("coalesce(size(keys), 0) <= 0", string("keys is empty: the row names no key columns"))],
            f"concat('key columns ', {_names('sort_array(map_keys(keys))')}, {differ})",
        )

    problems: list[tuple[str, Callable[[], str]]] = [
        ("NOT __key_fits", other_keys),
        (
            f"(NOT op IN ({', '.join(map(string, OPS))}) OR op IS NULL)",
            lambda: f"concat('op ', {_text('op')}, {string(' is not one of ' + ', '.join(OPS))})",
        ),
        (
            f"(NOT {is_delete} AND (NOT image IN ({', '.join(map(string, IMAGES))}) OR image IS NULL))",
            lambda: f"concat('image ', {_text('image')}, ' is not FULL or PARTIAL')",
        ),
    ]
    for reason, declarations in _group_by_reason(plan.bad_declarations).items():
        known = [d for d in declarations if d is not None]
        conditions = [f"column_types_json IN ({', '.join(map(string, known))})"] if known else []
        if None in declarations:
            conditions.append("column_types_json IS NULL")
        problems.append((any_of(conditions), lambda reason=reason: string(reason)))
    known_present = " + ".join(f"CAST({present[c]} AS INT)" for c in known_columns) or "0"
    unknown = f"array_except(map_keys(new_values), array({', '.join(map(string, known_columns))}))"
    unknown_reason = string(f" that no column_types of {plan.source_table!r} in this window declares")
    problems.append(
        (
            f"coalesce(size(new_values), 0) > ({known_present})",
            lambda: f"concat('new_values has column(s) ', {_names(unknown)}, {unknown_reason})",
        )
    )
    for i, key in enumerate(plan.key_names):
        kind = plan.key_types[key]
        problems.append(
            (
                conversion_failed(f"__rk{i}", f"__tk{i}", kind),
                lambda key=key, i=i, kind=kind: (
                    f"concat({string(f'key column {key!r} value ')}, {_text(f'__rk{i}')}, {string(f' is not a {kind}')})"
                ),
            )
        )
    if check_values:
        for column, spark_type in plan.columns.items():
            raw = looked_up[column]
            problems.append(
                (
                    f"(NOT {is_delete} AND {bad_value(raw, spark_type)})",
                    lambda column=column, raw=raw, spark_type=spark_type: (
                        f"concat({string(f'column {column!r} value ')}, {_text(raw)}, {string(f' is not a {spark_type}')})"
                    ),
                )
            )
    return problems


def _group_by_reason(bad: dict[str | None, str]) -> dict[str, list[str | None]]:
    grouped: dict[str, list[str | None]] = {}
    for declaration, reason in bad.items():
        grouped.setdefault(reason, []).append(declaration)
    return grouped


# --- Packed flags ---------------------------------------------------------------------------
# A performance strategy (switch ``Strategies.packed_flags``; :func:`_packed_flags`, with
# :func:`_plain_flags` its plain path): the flags are packed before the fold's shuffle and
# unpacked after its window pass. Saves 8 bytes per flag in every row the shuffle, sort and
# window buffers copy (bench/apply.py).

_FLAGS_PER_WORD = 62


def _packed_flags(flags: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """``flags`` (boolean columns) packed into bigints: SQL texts that pack them, the packed
    columns' names (``__f<i>``), and SQL texts that unpack them again.

    The fold's shuffle, sort and window buffers copy every row several times, and Spark's
    rows give each column 8 bytes: packed, a table's change flags (bad, delete, reset, one
    per column) take one column per 62 of them. A NULL flag (a row whose op or image is NULL)
    packs as false: such a row is bad, and a bad row makes its key dead whatever its flags.
    """
    packed, names, unpacked = [], [], []
    for word in range(0, len(flags), _FLAGS_PER_WORD):
        column = f"__f{word // _FLAGS_PER_WORD}"
        chunk = flags[word : word + _FLAGS_PER_WORD]
        bits = " | ".join(f"CASE WHEN {flag} THEN {1 << bit} ELSE 0 END" for bit, flag in enumerate(chunk))
        packed.append(f"CAST({bits} AS BIGINT) AS {column}")
        names.append(column)
        unpacked += [f"(({column} & {1 << bit}) != 0) AS {flag}" for bit, flag in enumerate(chunk)]
    return packed, names, unpacked


def _plain_flags(flags: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """``flags`` carried through the shuffle as they are, in :func:`_packed_flags`' shape.

    A NULL flag becomes false, as a packed one does.
    """
    carried = [f"coalesce({flag}, false) AS {flag}" for flag in flags]
    return carried, list(flags), list(flags)


# --- End of packed flags --------------------------------------------------------------------


def ordered_changes(
    rows: DataFrame,
    plan: TablePlan,
    target_before: DataFrame | None,
    tombstones_before: DataFrame | None,
    check_values: bool = False,
    partitions: int | None = None,
    guard_keys_only: bool = False,
    packed_flags: bool = True,
) -> DataFrame:
    """Steps 1-3: the parsed changes (``rows`` are the table's changelog rows) with redelivery
    and clash flags, and liveness against the guard. One statement.

    The guard (each key's ordering key in the target and in its tombstones, as they were
    before this window) travels as extra rows of the changes' own shuffle: one row per key of
    either table, with a NULL ordering key, so it sorts before the key's changes. One
    exchange and one sort thus serve the guard, the redelivery test and the fold (a join
    would shuffle both tables and the join's output, and sort the changes again after it).
    The guard rows leave once their keys' changes carry the guard.

    ``partitions`` fixes the number of that exchange's partitions (``partitioning.py``);
    None leaves it to Spark. The checkpointed fold keeps them, so it is also the number of
    files a target's first commit writes.

    ``guard_keys_only`` (``guard_keys.py``): each guard side keeps only the rows of keys the
    window's changes have (a left semi join with their keys, broadcast), so a small window
    does not shuffle and sort every key of a large target. The rows it drops are those the
    window pass would drop anyway (keys without a change), so the outcome is the same.
    """
    spark = rows.sparkSession
    with temp_views(spark, _guarded_frames(rows, target_before, tombstones_before)) as views:
        query = Query(views["rows"])
        _order(query, views, plan, check_values, partitions, guard_keys_only, packed_flags)
        return sql_frame(spark, query.sql())


def folded_changes(
    rows: DataFrame,
    plan: TablePlan,
    target_before: DataFrame | None,
    tombstones_before: DataFrame | None,
    partitions: int | None = None,
    guard_keys_only: bool = False,
    packed_flags: bool = True,
) -> DataFrame:
    """Steps 1-5 in one statement: :func:`fold_table` of :func:`ordered_changes` (the same
    arguments, without ``check_values``), for a table whose ordered changes nothing else
    reads (no history).

    A performance strategy (switch ``Strategies.fold_in_one_statement``; off, the two
    statements). Saves one analysis of steps 1-3 per table and window, which Spark would
    analyse once as their own statement and again, whole, under the fold's (bench/window.py).
    """
    spark = rows.sparkSession
    with temp_views(spark, _guarded_frames(rows, target_before, tombstones_before)) as views:
        query = Query(views["rows"])
        _order(query, views, plan, False, partitions, guard_keys_only, packed_flags)
        _fold(query, plan)
        return sql_frame(spark, query.sql())


def _guarded_frames(
    rows: DataFrame, target_before: DataFrame | None, tombstones_before: DataFrame | None
) -> dict[str, DataFrame]:
    frames = {"rows": rows}
    if target_before is not None:
        frames["target"] = target_before
    if tombstones_before is not None:
        frames["tombstones"] = tombstones_before
    return frames


def _order(
    query: Query,
    views: Mapping[str, str],
    plan: TablePlan,
    check_values: bool,
    partitions: int | None,
    guard_keys_only: bool,
    packed_flags: bool = True,
) -> None:
    """Steps 1-3 as stages of ``query`` (which reads ``views["rows"]``); see :func:`ordered_changes`."""
    parsed = _parse(query, plan, fold_input(plan), check_values, reasons=False)
    flags = ["__row_bad", "__is_delete", "__is_reset", *[touched for _, touched in fold_columns(plan).values.values()]]
    packed, words, unpacked = _packed_flags(flags) if packed_flags else _plain_flags(flags)
    unflagged = [c for c in parsed if c not in flags]
    query.select([*unflagged, *packed])
    shuffled = unflagged + words
    guarded = "target" in views or "tombstones" in views
    # Read twice when each guard side keeps the window's keys only.
    changes = query.share() if guarded and guard_keys_only else query.last
    if guarded:
        # Guard rows: the key, a NULL ordering key, the table's ordering key as __tseq
        # (target) or __dseq (tombstones), NULL for every other column.
        sides = [
            f"SELECT {', '.join(shuffled)}, true AS __change, "
            f"CAST(NULL AS BINARY) AS __tseq, CAST(NULL AS BINARY) AS __dseq FROM {changes}"
        ]
        for role, seq in (("target", "__tseq"), ("tombstones", "__dseq")):
            if role not in views:
                continue
            guard = {"__key": stored_key_text(plan), "ordering_key": "CAST(NULL AS BINARY)"}
            columns = [f"{guard.get(c, 'NULL')} AS {c}" for c in shuffled]
            seqs = [f"{'_cdc_seq' if s == seq else 'NULL'} AS {s}" for s in ("__tseq", "__dseq")]
            source = views[role]
            if guard_keys_only:
                window_keys = f"(SELECT __key FROM {changes}) __wk"
                source = (
                    f"(SELECT /*+ BROADCAST(__wk) */ g.* FROM {source} g "
                    f"LEFT SEMI JOIN {window_keys} ON {stored_key_text(plan, 'g.')} = __wk.__key)"
                )
            sides.append(f"SELECT {', '.join(columns)}, NULL AS __change, {', '.join(seqs)} FROM {source}")
        query.stage(" UNION ALL ".join(sides))
        _repartition(query, partitions)
        query.select(
            [
                "*",
                "lag(ordering_key) OVER k AS __prev_seq",
                "lag(__h) OVER k AS __prev_h",
                "max(__tseq) OVER w AS __key_tseq",
                "max(__dseq) OVER w AS __key_dseq",
            ],
            windows=_WINDOWS,
        )
        where = "__change IS NOT NULL"
        guard_seq, in_target, tombstoned = "greatest(__key_tseq, __key_dseq)", "__key_tseq IS NOT NULL", "__key_dseq IS NOT NULL"
    else:
        _repartition(query, partitions)
        query.select(["*", "lag(ordering_key) OVER k AS __prev_seq", "lag(__h) OVER k AS __prev_h"], windows=_WINDOWS)
        where = None
        guard_seq, in_target, tombstoned = "CAST(NULL AS BINARY)", "false", "false"
    same_seq = coalesce_false("__prev_seq = ordering_key")
    same_content = coalesce_false("__prev_h = __h")
    redelivered = f"({same_seq} AND {same_content})"
    query.select(
        [
            *unflagged,
            *unpacked,
            f"{redelivered} AS __redelivered",
            f"({same_seq} AND NOT {same_content}) AS __clash",
            f"{guard_seq} AS __guard_seq",
            f"{in_target} AS __in_target",
            f"{tombstoned} AS __tombstoned",
            f"(({guard_seq}) IS NULL OR ordering_key > {guard_seq}) AND NOT {redelivered} AS __live",
        ],
        where=where,
    )


def _repartition(query: Query, partitions: int | None) -> None:
    """Hash the stage's rows by key into ``partitions`` (None: as Spark plans the window pass).

    The window pass needs its rows clustered by key: this exchange is the one it uses, and a
    number given in a hint is one adaptive execution keeps.
    """
    if partitions is not None:
        query.stage(f"SELECT /*+ REPARTITION({int(partitions)}, __key) */ * FROM {query.last}")


def fold_table(changes: DataFrame, plan: TablePlan) -> DataFrame:
    """Steps 4-5: one row per key with its action, reason, folded values and _cdc_* values.

    The fold runs as window functions over each key's changes in ordering-key order (the
    order :func:`ordered_changes` already sorted them in, so no second sort): the latest live
    change overall, among resets, and per column among the changes touching it, is the
    ``last`` non-null of a conditional struct over the key's whole frame; the key's last row
    then carries the outcome. This is one pass, where a grouped aggregate of structs would
    be two (Spark plans a partial and a final sort-based aggregate for it). Equal ordering
    keys are clashes, reported above, so the order within a key is never arbitrary.

    Measured and not taken, each slower on bench/apply.py (figures in docs/performance.md):
    a ``GROUP BY __key`` of ``max_by`` structs instead of this pass; this pass and the one of
    :func:`ordered_changes` merged into one (liveness tested against the guard after the
    pass, redeliveries and clashes from a ``collect_set`` of (ordering key, hash) pairs); this
    pass's ``last`` aggregates as a ``GROUP BY __key`` (sort aggregates over the rows already
    sorted by key), with and without Spark's code generation for sort aggregates. The outcome
    is the same each way.
    """
    spark = changes.sparkSession
    with temp_views(spark, {"changes": changes}) as views:
        query = Query(views["changes"])
        _fold(query, plan)
        return sql_frame(spark, query.sql())


# The folded frame's per-key columns, before its values.
_FOLDED = (
    "__key", "__changes", "__not_live", "__clash", "__row_bad", "__in_target", "__tombstoned",
    "__seq", "__last_is_delete", "__commit_ts", "__reset_seq", "__reset_is_delete",
)
_ACTION = case_when(
    [
        ("__key_reason IS NOT NULL OR __row_bad", "'DEAD'"),
        ("__seq IS NULL", "'STALE'"),
        ("__last_is_delete", "'DELETE'"),
        ("__reset_seq IS NOT NULL", "'UPSERT'"),
    ],
    "'PATCH'",
)


def _fold(query: Query, plan: TablePlan) -> None:
    """Steps 4-5 as stages of ``query`` (which reads ordered changes); see :func:`fold_table`."""
    _latest_per_key(query, plan)
    _typed_folded_values(query, plan)
    query.select(["*", f"{_key_reason(plan)} AS __key_reason"])
    query.select(["*", f"{_ACTION} AS __action"])


def _latest_per_key(query: Query, plan: TablePlan) -> None:
    """Step 4's window pass, then each key's last row: the key's counts, its latest live
    change, latest live reset, and per column the latest live change touching it."""
    names = fold_columns(plan)
    values = list(names.values.values())

    def latest(condition: str, **fields: str) -> str:
        struct = ", ".join(f"{string(f)}, {v}" for f, v in fields.items())
        return f"last(CASE WHEN {condition} THEN named_struct({struct}) END, true) OVER w"

    query.select(
        [
            "__key", "__in_target", "__tombstoned",
            "count(1) OVER w AS __changes",
            "count_if(NOT __live) OVER w AS __not_live",
            "max(__clash) OVER w AS __clash",
            "max(__row_bad) OVER w AS __row_bad",
            f"{latest('__live', s='ordering_key', d='__is_delete', ts='commit_ts')} AS __last",
            f"{latest('__live AND __is_reset', s='ordering_key', d='__is_delete')} AS __reset",
            *[f"{latest(f'__live AND {touched}', v=value)} AS {value}" for value, touched in values],
            "lead(true) OVER k IS NULL AS __last_row",
        ],
        windows=_WINDOWS,
    )
    arrays = {column for column, kind in plan.columns.items() if kind.startswith("array<")}
    query.select(
        [
            *_FOLDED[:7],
            "__last.s AS __seq", "__last.d AS __last_is_delete", "__last.ts AS __commit_ts",
            "__reset.s AS __reset_seq", "__reset.d AS __reset_is_delete",
            *[f"{value} IS NOT NULL AS {touched}" for value, touched in values],
            *[f"{value}.v AS {value}" for value, _ in values],
            *[f"{array_elements(f'{names.values[c][0]}.v')} AS {names.values[c][0]}_e" for c in sorted(arrays)],
        ],
        where="__last_row",
    )


def _typed_folded_values(query: Query, plan: TablePlan) -> None:
    """Step 4's end: the folded values typed (one per key and column), and ``__value_problem``,
    why the first that does not convert fails.

    Each value converts once: arrays are parsed into elements first, and a conversion
    failed where a present value (or element) typed to NULL.
    """
    names = fold_columns(plan)
    typed, failed = [], []
    for column, (value, touched) in names.values.items():
        kind = plan.columns[column]
        elements = f"{value}_e" if kind.startswith("array<") else None
        typed.append(f"{typed_value(value, kind, elements=elements)} AS {value}_t")
        bad = conversion_failed(value, f"{value}_t", kind, elements)
        reason = f"concat({string(f'column {column!r} value ')}, {_text(value)}, {string(f' is not a {kind}')})"
        failed.append(f"CASE WHEN {touched} AND {bad} THEN {reason} END")
    query.select(["*", *typed])
    query.select(
        [
            *_FOLDED,
            *[touched for _, touched in names.values.values()],
            *[f"{value}_t AS {value}" for value, _ in names.values.values()],
            f"coalesce(CAST(NULL AS STRING), {', '.join(failed) or 'NULL'}) AS __value_problem",
        ]
    )


def _key_reason(plan: TablePlan) -> str:
    """SQL text: step 5's reason a key is dead (NULL: not dead, or dead of a bad row, whose
    text names the bad change: see :func:`dead_letter_rows`)."""
    folded_bad = string("the key's folded row is bad: ")
    return case_when(
        [
            (
                "__clash",
                string(
                    "two different changes of this key have the same ordering key (a source bug): "
                    "apply never orders them by arrival; fix the source's ordering key and replay"
                ),
            ),
            ("__row_bad", "NULL"),  # the text names the bad change: see dead_letter_rows
            ("__seq IS NULL", "NULL"),
            ("__last_is_delete", "NULL"),
            ("__value_problem IS NOT NULL", f"concat({folded_bad}, __value_problem)"),
            (
                "__reset_seq IS NULL AND NOT __in_target",
                string(
                    f"partial update (PARTIAL image) for a key that target {plan.target} does not hold: "
                    f"the row's other columns are unknown, so it cannot be applied (the source's "
                    f"earlier changes of this key are missing)"
                ),
            ),
            (
                "__reset_is_delete",
                string("partial update (PARTIAL image) after a delete of the key in the same window: it cannot be applied"),
            ),
        ]
    )


def dead_letter_rows(parsed: DataFrame, folded: DataFrame) -> DataFrame:
    """The raw rows of dead keys, each with its reason (changelog columns + reason).

    ``parsed`` is :func:`parse_changes` with reasons. A row gives its own reason when it has
    one; the other rows of a key that died of a bad change name that change's reason.
    """
    dead_keys = folded.where(F.col("__action") == "DEAD").select("__key", "__key_reason")
    first_bad = F.min("__row_reason").over(Window.partitionBy("__key"))
    return parsed.join(dead_keys, "__key", "inner").select(
        *_RAW_COLUMNS,
        F.coalesce(
            "__row_reason", "__key_reason", F.concat(F.lit("a change of this key in the window is bad: "), first_bad)
        ).alias("reason"),
    )
