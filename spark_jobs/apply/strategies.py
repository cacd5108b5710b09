"""The apply job's performance strategies: one named switch each, the plain path beside it.

A switch on (the default) takes the strategy; off takes the plain path, which makes the same
commits with the same rows (``tests/apply/test_strategies.py`` applies the same windows both
ways). The config's ``strategies`` object turns one off by name (``{"packed_flags": false}``),
to compare the two paths on a benchmark. Each field names what the strategy saves and the
benchmark that shows it; the figures are in docs/performance.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Strategies:
    """Which of the apply job's performance strategies a run takes (all, by default)."""

    #: Steps 1-5 of a table without history folded as one statement (``fold.folded_changes``),
    #: not steps 1-3 then 4-5. Saves one analysis of steps 1-3 per table (bench/window.py).
    fold_in_one_statement: bool = True
    #: A small window's fold reads the guard rows of its own keys only (``guard_keys.py``).
    #: Saves the shuffle of a large target in every small window (bench/guard.py).
    guard_rows_of_window_keys: bool = True
    #: The tables of a window folded, and committed, side by side (``commit_threads.py``).
    #: Saves the cores left idle while the driver plans each table (bench/window.py).
    tables_side_by_side: bool = True
    #: No truncate aggregate when the recorded declarations show no truncate
    #: (``truncates.window_truncates``). Saves one Spark job per window (bench/window.py).
    truncates_from_declarations: bool = True
    #: A new target's key columns guessed from any one change (``table_fold._some_keys``).
    #: Saves a read of the window's key maps per new target (bench/window.py).
    new_target_keys_guessed: bool = True
    #: A target MERGE that rewrites nearly every file skips the search for the files to
    #: rewrite (``targets.file_search``). Saves a join that prunes nothing (bench/apply.py).
    file_search_skipped: bool = True
    #: The fold's change flags packed into bigints before its shuffle (``fold._packed_flags``).
    #: Saves 8 bytes per flag per row shuffled, sorted and buffered (bench/apply.py).
    packed_flags: bool = True
    #: py4j finds ``pyspark.sql.functions``' classes by single-type imports
    #: (``job._import_function_classes``). Saves py4j's class search per expression (bench/apply.py).
    function_class_imports: bool = True

    @classmethod
    def from_dict(cls, data: object) -> Strategies:
        """The switches a config's ``strategies`` object names (absent: on).

        ValueError names an unknown switch or a value that is not true or false.
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f"strategies must map switch names to true or false, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        for name, value in data.items():
            if name not in known:
                raise ValueError(f"strategies: {name!r} is not one of {known}")
            if not isinstance(value, bool):
                raise ValueError(f"strategies: {name} {value!r} must be true or false")
        return cls(**dict(data))


#: Every switch off: the plain path of each strategy.
PLAIN = Strategies(**{f.name: False for f in fields(Strategies)})
