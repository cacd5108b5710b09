"""Bigtable's cell values as typed columns: what ``targets.decode`` names and how a value decodes.

A Bigtable cell holds bytes; ``targets.decode`` (``{"cf:price": "double", ...}``) names the
columns a ``<t>_rows`` table holds, each decoded by one of :data:`DECODERS`: ``string``
(UTF-8), ``int64`` (8 bytes big-endian, as Bigtable's increments write), ``double`` (8-byte
IEEE 754 big-endian), ``bool`` (one byte), ``bytes``. A value that does not decode is NULL and
counted by the apply.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping

from airflow_cdc.model import validate_identifier

DECODERS = ("string", "int64", "double", "bool", "bytes")
# Each decoder's Spark SQL type (the column of the ``<t>_rows`` table).
SPARK_TYPES = {"string": "string", "int64": "bigint", "double": "double", "bool": "boolean",
               "bytes": "binary"}
_WIDTHS = {"int64": (8, ">q"), "double": (8, ">d")}


def decode_columns(decode: Mapping[str, str] | None) -> list[tuple[str, str, bytes, str]]:
    """``{"cf:price": "double"}`` -> [(column name, family, qualifier, decoder)]; refused
    naming the entry and the fix before any table is touched."""
    columns = []
    for entry, decoder in sorted((decode or {}).items()):
        family, sep, qualifier = str(entry).partition(":")
        if not sep or not family or not qualifier:
            raise ValueError(f"targets.decode entry {entry!r} is not 'family:qualifier'")
        if decoder not in DECODERS:
            raise ValueError(f"targets.decode[{entry!r}] = {decoder!r} is not one of {list(DECODERS)}")
        name = validate_identifier(
            f"decoded column for {entry!r} (family and qualifier joined by _)",
            re.sub(r"[^A-Za-z0-9_]", "_", f"{family}_{qualifier}"))
        columns.append((name, family, qualifier.encode(), decoder))
    return columns


def decode_value(raw: bytes | None, decoder: str):
    """``raw`` (a cell's bytes, or None) decoded by ``decoder``; ValueError when it cannot be."""
    if raw is None:
        return None
    if decoder == "bytes":
        return raw
    if decoder == "string":
        return raw.decode("utf-8")
    if decoder in _WIDTHS:
        width, layout = _WIDTHS[decoder]
        if len(raw) != width:
            raise ValueError(f"{len(raw)} bytes, not {width}")
        return struct.unpack(layout, raw)[0]
    if decoder == "bool":
        if len(raw) != 1:
            raise ValueError(f"{len(raw)} bytes, not 1")
        return raw != b"\x00"
    raise ValueError(decoder)


def decoded_row(cells_after: Mapping, decoded) -> tuple[list, int]:
    """The ``decoded`` columns' values of one row from its cells (``(family, qualifier, ts) ->
    (value, ...)``), each the newest version's, and how many did not decode (NULL)."""
    newest: dict = {}
    for (family, qualifier, ts), cell in cells_after.items():
        if (family, qualifier) not in newest or ts > newest[(family, qualifier)][0]:
            newest[(family, qualifier)] = (ts, cell[0])
    values, bad = [], 0
    for _, family, qualifier, decoder in decoded:
        found = newest.get((family, qualifier))
        try:
            values.append(decode_value(found[1] if found else None, decoder))
        except (ValueError, UnicodeDecodeError):
            values.append(None)
            bad += 1
    return values, bad
