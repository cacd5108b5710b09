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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from airflow_cdc.model import CHANGELOG_COLUMNS
from spark_jobs.apply.schema import TablePlan
from spark_jobs.apply.values import array_elements, bad_value, conversion_failed, typed_value

OPS = ("INSERT", "UPDATE", "DELETE", "READ")
IMAGES = ("FULL", "PARTIAL")
_RAW_COLUMNS = [name for name, _ in CHANGELOG_COLUMNS]
_REASON_TEXT_LIMIT = 200


def key_text(parts: list[tuple[Column, str]]) -> Column:
    """The canonical text of a key (its typed values), used to shuffle, sort, join and group.

    A string sorts and hashes much faster than a struct, and typed values give one text per
    key whatever their JSON spelling (``1`` and ``"1"``). NULL parts stay distinct. One key
    column: ``v<value>`` or ``n`` (NULL); several: a JSON array of the values as text.
    Rows that address no target row get keys starting with ``!`` (see :func:`parse_changes`).
    """
    texts = [F.base64(c) if t == "binary" else c.cast("string") for c, t in parts]
    if len(texts) == 1:
        return F.coalesce(F.concat(F.lit("v"), texts[0]), F.lit("n"))
    return F.to_json(F.array(*texts))


def key_columns(plan: TablePlan) -> list[Column]:
    """The typed key columns, named as in the target, recovered from ``__key``."""
    if len(plan.key_names) == 1:
        texts = [F.when(F.col("__key") != "n", F.expr("substring(__key, 2)"))]
    else:
        parsed = F.from_json(F.col("__key"), "array<string>")
        texts = [parsed.getItem(i) for i in range(len(plan.key_names))]
    columns = []
    for text, name in zip(texts, plan.key_names):
        kind = plan.key_types[name]
        columns.append((F.unbase64(text) if kind == "binary" else text.cast(kind)).alias(name))
    return columns


@dataclass(frozen=True)
class FoldColumns:
    """Internal names of the folded frame's value columns: business column -> (value, set flag)."""

    values: dict[str, tuple[str, str]]


def fold_columns(plan: TablePlan) -> FoldColumns:
    return FoldColumns(
        values={name: (f"__v{i}", f"__s{i}") for i, name in enumerate(plan.columns)},
    )


def _text(value: Column) -> Column:
    """A value quoted for a reason: 'text' (cut at 200 characters) or NULL."""
    return F.coalesce(F.concat(F.lit("'"), F.substring(value, 1, _REASON_TEXT_LIMIT), F.lit("'")), F.lit("NULL"))


def _names(values: Column) -> Column:
    return F.concat(F.lit("["), F.array_join(values, ", "), F.lit("]"))


FOLD_INPUT = ("op", "image", "keys", "new_values", "commit_ts", "ordering_key")


def fold_input(plan: TablePlan) -> tuple[str, ...]:
    """The changelog columns the fold reads (the dead-letter path reads them all)."""
    return FOLD_INPUT + (("column_types_json",) if plan.bad_declarations else ())


def parse_changes(
    rows: DataFrame,
    plan: TablePlan,
    carry: Sequence[str] = tuple(_RAW_COLUMNS),
    check_values: bool = True,
    reasons: bool = True,
) -> DataFrame:
    """Step 1: the ``carry`` columns plus the key, value texts, touched flags and row problems.

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
    names = fold_columns(plan)
    km, vm = F.col("keys"), F.col("new_values")
    expected_keys = sorted(plan.key_names)
    # Cheap (no sort, no lambda): as many keys as expected, and each expected one present.
    key_fits = F.coalesce(F.size(km) == len(expected_keys), F.lit(False))
    for name in expected_keys:
        key_fits = key_fits & F.coalesce(F.map_contains_key(km, name), F.lit(False))
    # Each key value is looked up and typed once; the key text and the bad-value test use it.
    parsed = rows.select(*carry, *[km.getItem(k).alias(f"__rk{i}") for i, k in enumerate(plan.key_names)])
    parsed = parsed.select(
        "*", *[typed_value(F.col(f"__rk{i}"), plan.key_types[k]).alias(f"__tk{i}") for i, k in enumerate(plan.key_names)]
    )
    typed_key = key_text([(F.col(f"__tk{i}"), plan.key_types[k]) for i, k in enumerate(plan.key_names)])
    # The text of a key map that is not the target's: names and values in the map's order
    # (the writers store names sorted), so one such map is one group.
    other_key = F.concat(F.lit("!"), F.concat_ws("\u0001", F.map_keys(km), F.map_values(km)))
    key = F.when(key_fits, typed_key).otherwise(other_key)
    known_columns = list(dict.fromkeys([*plan.columns, *plan.key_names]))
    # Each known column is looked up once: present when its value is not NULL, and only for
    # a NULL value (absent, or set to NULL) is the key searched for. The count of known
    # columns present is the cheap test for unknown ones, whose names only the reason lists.
    parsed = parsed.select(
        "*",
        key.alias("__key"),
        key_fits.alias("__key_fits"),
        *[vm.getItem(c).alias(f"__g{i}") for i, c in enumerate(known_columns)],
    )
    looked_up = {c: F.col(f"__g{i}") for i, c in enumerate(known_columns)}
    parsed = parsed.select(
        "*",
        *[
            (looked_up[c].isNotNull() | F.coalesce(F.map_contains_key(vm, c), F.lit(False))).alias(f"__p{i}")
            for i, c in enumerate(known_columns)
        ],
    )
    present = {c: F.col(f"__p{i}") for i, c in enumerate(known_columns)}
    op, image = F.col("op"), F.col("image")
    is_delete = op == "DELETE"
    is_reset = op.isin("INSERT", "READ", "DELETE") | (image == "FULL")
    problems = _row_problems(plan, known_columns, present, looked_up, check_values)
    if reasons:
        problem = F.coalesce(*[F.when(condition, text()) for condition, text in problems]).alias("__row_reason")
    else:
        flags = [F.coalesce(condition, F.lit(False)) for condition, _ in problems]
        problem = reduce(lambda a, b: a | b, flags).alias("__row_bad")
    return parsed.select(
        *carry,
        "__key",
        problem,
        is_delete.alias("__is_delete"),
        is_reset.alias("__is_reset"),
        F.xxhash64("op", "image", F.map_keys(vm), F.map_values(vm), "commit_ts").alias("__h"),
        *[(is_reset | present[name]).alias(names.values[name][1]) for name in plan.columns],
        *[F.when(~is_delete, looked_up[name]).alias(names.values[name][0]) for name in plan.columns],
    )


def _row_problems(
    plan: TablePlan,
    known_columns: list[str],
    present: dict[str, Column],
    looked_up: dict[str, Column],
    check_values: bool,
) -> list[tuple[Column, Callable[[], Column]]]:
    """The rules a change row must keep, in the order its reason names them: (broken, reason text).

    Conditions use the columns :func:`parse_changes` computed (``__key_fits``, ``__rk<i>``,
    ``__tk<i>``, ``__g<i>``, ``__p<i>``); texts are built only when reasons are asked for.
    """
    km, vm = F.col("keys"), F.col("new_values")
    op, image = F.col("op"), F.col("image")
    is_delete = op == "DELETE"
    expected_keys = sorted(plan.key_names)

    def other_keys() -> Column:
        return F.when(F.coalesce(F.size(km), F.lit(0)) <= 0, F.lit("keys is empty: the row names no key columns")).otherwise(
            F.concat(
                F.lit("key columns "),
                _names(F.sort_array(F.map_keys(km))),
                F.lit(
                    f" differ from the key columns {expected_keys} of target {plan.target}: the "
                    f"row cannot be matched to a target row"
                ),
            )
        )

    problems: list[tuple[Column, Callable[[], Column]]] = [
        (~F.col("__key_fits"), other_keys),
        (
            ~op.isin(*OPS) | op.isNull(),
            lambda: F.concat(F.lit("op "), _text(op), F.lit(" is not one of " + ", ".join(OPS))),
        ),
        (
            ~is_delete & (~image.isin(*IMAGES) | image.isNull()),
            lambda: F.concat(F.lit("image "), _text(image), F.lit(" is not FULL or PARTIAL")),
        ),
    ]
    for reason, declarations in _group_by_reason(plan.bad_declarations).items():
        known = [d for d in declarations if d is not None]
        condition = F.col("column_types_json").isin(*known) if known else F.lit(False)
        if None in declarations:
            condition = condition | F.col("column_types_json").isNull()
        problems.append((condition, lambda reason=reason: F.lit(reason)))
    known_present = sum(present[c].cast("int") for c in known_columns)
    problems.append(
        (
            F.coalesce(F.size(vm), F.lit(0)) > known_present,
            lambda: F.concat(
                F.lit("new_values has column(s) "),
                _names(F.array_except(F.map_keys(vm), F.array(*[F.lit(c) for c in known_columns]))),
                F.lit(f" that no column_types of {plan.source_table!r} in this window declares"),
            ),
        )
    )
    for i, name in enumerate(plan.key_names):
        raw, kind = F.col(f"__rk{i}"), plan.key_types[name]
        problems.append(
            (
                conversion_failed(raw, F.col(f"__tk{i}"), kind),
                lambda name=name, raw=raw, kind=kind: F.concat(
                    F.lit(f"key column {name!r} value "), _text(raw), F.lit(f" is not a {kind}")
                ),
            )
        )
    if check_values:
        for name, spark_type in plan.columns.items():
            raw = looked_up[name]
            problems.append(
                (
                    ~is_delete & bad_value(raw, spark_type),
                    lambda name=name, raw=raw, spark_type=spark_type: F.concat(
                        F.lit(f"column {name!r} value "), _text(raw), F.lit(f" is not a {spark_type}")
                    ),
                )
            )
    return problems


def _group_by_reason(bad: dict[str | None, str]) -> dict[str, list[str | None]]:
    grouped: dict[str, list[str | None]] = {}
    for declaration, reason in bad.items():
        grouped.setdefault(reason, []).append(declaration)
    return grouped


def ordered_changes(
    parsed: DataFrame, plan: TablePlan, target_before: DataFrame | None, tombstones_before: DataFrame | None
) -> DataFrame:
    """Steps 2-3: redelivery and clash flags, and liveness against the guard.

    The guard (each key's ordering key in the target and in its tombstones, as they were
    before this window) travels as extra rows of the changes' own shuffle: :func:`guard_rows`
    gives one row per key of either table, with a NULL ordering key, so it sorts before the
    key's changes. One exchange and one sort thus serve the guard, the redelivery test and
    the fold (a join would shuffle both tables and the join's output, and sort the changes
    again after it). The guard rows leave once their keys' changes carry the guard.
    """
    by_key = Window.partitionBy("__key").orderBy("ordering_key", "__h")
    whole = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    guard = guard_rows(plan, target_before, tombstones_before)
    rows = parsed.select("*", F.lit(True).alias("__change"))
    if guard is not None:
        rows = rows.unionByName(guard, allowMissingColumns=True)
    changes = rows.select(
        "*",
        F.lag("ordering_key").over(by_key).alias("__prev_seq"),
        F.lag("__h").over(by_key).alias("__prev_h"),
        *(
            []
            if guard is None
            else [F.max("__tseq").over(whole).alias("__key_tseq"), F.max("__dseq").over(whole).alias("__key_dseq")]
        ),
    )
    if guard is None:
        guard_seq, in_target, tombstoned = F.lit(None).cast("binary"), F.lit(False), F.lit(False)
    else:
        changes = changes.where(F.col("__change").isNotNull())
        guard_seq = F.greatest("__key_tseq", "__key_dseq")
        in_target, tombstoned = F.col("__key_tseq").isNotNull(), F.col("__key_dseq").isNotNull()
    same_seq = F.coalesce(F.col("__prev_seq") == F.col("ordering_key"), F.lit(False))
    same_content = F.coalesce(F.col("__prev_h") == F.col("__h"), F.lit(False))
    redelivered = same_seq & same_content
    live = (guard_seq.isNull() | (F.col("ordering_key") > guard_seq)) & ~redelivered
    return changes.select(
        *parsed.columns,
        redelivered.alias("__redelivered"),
        (same_seq & ~same_content).alias("__clash"),
        guard_seq.alias("__guard_seq"),
        in_target.alias("__in_target"),
        tombstoned.alias("__tombstoned"),
        live.alias("__live"),
    )


def guard_rows(plan: TablePlan, target_before: DataFrame | None, tombstones_before: DataFrame | None) -> DataFrame | None:
    """Per key of the target and of its tombstones: a row with that table's ordering key.

    ``__tseq`` (the target's ``_cdc_seq``) or ``__dseq`` (the tombstone's), the key's text as
    the changes have it, and a NULL ordering key; None when neither table has rows yet.
    """

    def keyed(frame: DataFrame, seq_name: str) -> DataFrame:
        key = key_text([(F.col(f"`{k}`").cast(plan.key_types[k]), plan.key_types[k]) for k in plan.key_names])
        seqs = {name: F.lit(None).cast("binary") for name in ("__tseq", "__dseq")}
        seqs[seq_name] = F.col("_cdc_seq")
        return frame.select(
            key.alias("__key"),
            F.lit(None).cast("binary").alias("ordering_key"),
            *[seq.alias(name) for name, seq in seqs.items()],
        )

    sides = []
    if target_before is not None:
        sides.append(keyed(target_before, "__tseq"))
    if tombstones_before is not None:
        sides.append(keyed(tombstones_before, "__dseq"))
    if not sides:
        return None
    return sides[0] if len(sides) == 1 else sides[0].unionByName(sides[1])


def fold_table(changes: DataFrame, plan: TablePlan) -> DataFrame:
    """Steps 4-5: one row per key with its action, reason, folded values and _cdc_* values.

    The fold runs as window functions over each key's changes in ordering-key order (the
    order :func:`ordered_changes` already sorted them in, so no second sort): the latest live
    change overall, among resets, and per column among the changes touching it, is the
    ``last`` non-null of a conditional struct over the key's whole frame; the key's last row
    then carries the outcome. This is one pass, where a grouped aggregate of structs would
    be two (Spark plans a partial and a final sort-based aggregate for it). Equal ordering
    keys are clashes, reported above, so the order within a key is never arbitrary.
    """
    names = fold_columns(plan)
    live = F.col("__live")
    by_key = Window.partitionBy("__key").orderBy("ordering_key", "__h")
    whole = by_key.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)

    def latest(condition: Column, *fields: Column) -> Column:
        return F.last(F.when(condition, F.struct(*fields)), ignorenulls=True).over(whole)

    per_key = [
        F.count(F.lit(1)).over(whole).alias("__changes"),
        F.count_if(~live).over(whole).alias("__not_live"),
        F.max("__clash").over(whole).alias("__clash"),
        F.max("__row_bad").over(whole).alias("__row_bad"),
        latest(
            live, F.col("ordering_key").alias("s"), F.col("__is_delete").alias("d"), F.col("commit_ts").alias("ts")
        ).alias("__last"),
        latest(live & F.col("__is_reset"), F.col("ordering_key").alias("s"), F.col("__is_delete").alias("d")).alias("__reset"),
    ]
    for name in plan.columns:
        value, touched = names.values[name]
        per_key.append(latest(live & F.col(touched), F.col(value).alias("v")).alias(value))
    last_row = F.lead(F.lit(True)).over(by_key).isNull()
    folded = changes.select("__key", "__in_target", "__tombstoned", *per_key, last_row.alias("__last_row"))
    # Type the folded values (one per key and column) and say why one does not convert.
    # Each value converts once: arrays are parsed into elements first, and a conversion
    # failed where a present value (or element) typed to NULL.
    value_names = {v for v, _ in names.values.values()}
    arrays = {name for name, kind in plan.columns.items() if kind.startswith("array<")}
    folded = folded.where("__last_row").select(
        "__key", "__changes", "__not_live", "__clash", "__row_bad", "__in_target", "__tombstoned",
        F.col("__last.s").alias("__seq"),
        F.col("__last.d").alias("__last_is_delete"),
        F.col("__last.ts").alias("__commit_ts"),
        F.col("__reset.s").alias("__reset_seq"),
        F.col("__reset.d").alias("__reset_is_delete"),
        *[F.col(value).isNotNull().alias(touched) for value, touched in names.values.values()],
        *[F.col(value).getField("v").alias(value) for value, _ in names.values.values()],
        *[
            array_elements(F.col(names.values[n][0]).getField("v")).alias(f"{names.values[n][0]}_e")
            for n in sorted(arrays)
        ],
    )
    typed = []
    failed = []
    for name, (value, touched) in names.values.items():
        raw, kind = F.col(value), plan.columns[name]
        elements = F.col(f"{value}_e") if name in arrays else None
        typed.append(typed_value(raw, kind, elements=elements).alias(f"{value}_t"))
        bad = conversion_failed(raw, F.col(f"{value}_t"), kind, elements)
        failed.append(
            F.when(
                F.col(touched) & bad,
                F.concat(F.lit(f"column {name!r} value "), _text(raw), F.lit(f" is not a {kind}")),
            )
        )
    folded = folded.select("*", *typed)
    folded = folded.select(
        *[c for c in folded.columns if c not in value_names and not c.endswith(("_e", "_t"))],
        *[F.col(f"{value}_t").alias(value) for value, _ in names.values.values()],
        F.coalesce(F.lit(None).cast("string"), *failed).alias("__value_problem"),
    )

    clash, row_bad = F.col("__clash"), F.col("__row_bad")
    in_target = F.col("__in_target")
    has_reset = F.col("__reset_seq").isNotNull()
    target_name = str(plan.target)
    key_reason = (
        F.when(
            clash,
            F.lit(
                "two different changes of this key have the same ordering key (a source bug): "
                "apply never orders them by arrival; fix the source's ordering key and replay"
            ),
        )
        .when(row_bad, F.lit(None))  # the text names the bad change: see dead_letter_rows
        .when(F.col("__seq").isNull(), F.lit(None))
        .when(F.col("__last_is_delete"), F.lit(None))
        .when(
            F.col("__value_problem").isNotNull(),
            F.concat(F.lit("the key's folded row is bad: "), F.col("__value_problem")),
        )
        .when(
            ~has_reset & ~in_target,
            F.lit(
                f"partial update (PARTIAL image) for a key that target {target_name} does not hold: "
                f"the row's other columns are unknown, so it cannot be applied (the source's "
                f"earlier changes of this key are missing)"
            ),
        )
        .when(
            F.col("__reset_is_delete"),
            F.lit("partial update (PARTIAL image) after a delete of the key in the same window: it cannot be applied"),
        )
    )
    action = (
        F.when(key_reason.isNotNull() | row_bad, F.lit("DEAD"))
        .when(F.col("__seq").isNull(), F.lit("STALE"))
        .when(F.col("__last_is_delete"), F.lit("DELETE"))
        .when(has_reset, F.lit("UPSERT"))
        .otherwise(F.lit("PATCH"))
    )
    return folded.select("*", key_reason.alias("__key_reason"), action.alias("__action"))


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
