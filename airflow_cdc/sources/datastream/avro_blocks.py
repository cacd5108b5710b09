"""Reading an Avro object container file block by block, past a corrupt block.

An Avro file is a header (schema, codec, a 16-byte sync marker) and blocks of records, each
ending in that sync marker. A block that cannot be read (damaged bytes, a codec error, a
missing sync marker) costs only its own records: reading resumes after the next sync marker,
as Avro's sync markers exist for, and the damaged block is reported with its number and byte
range so it can be dead-lettered whole. A header that cannot be read makes the whole file
unreadable (:func:`read_avro_blocks` raises).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

SYNC_SIZE = 16


@dataclass(frozen=True)
class CorruptBlock:
    """A block that could not be read: its number in the file (0 = first), its bytes
    ``[start, end)`` (up to and with the sync marker that follows it) and why."""

    index: int
    start: int
    end: int
    error: str


@dataclass
class AvroBlocks:
    writer_schema: dict
    records: list = field(default_factory=list)  # every record of the readable blocks, in order
    corrupt: list[CorruptBlock] = field(default_factory=list)


def read_avro_blocks(content: bytes) -> AvroBlocks:
    """The records of every readable block of ``content`` and the blocks that are not."""
    import fastavro

    header = io.BytesIO(content)
    writer_schema = fastavro.block_reader(header).writer_schema
    header_end = header.tell()
    sync = content[header_end - SYNC_SIZE:header_end]
    found = AvroBlocks(writer_schema)
    start, index = header_end, 0  # where the blocks still to read begin in ``content``
    while start < len(content):
        stream = io.BytesIO(content[:header_end] + content[start:])
        blocks = iter(fastavro.block_reader(stream))
        while True:
            at = stream.tell()
            try:
                block = next(blocks)
            except StopIteration:
                return found
            except Exception as error:  # noqa: BLE001 - any damage is this block's
                broken = error
            else:
                try:
                    found.records.extend(list(block))  # all of a block, or none of it
                    index += 1
                    continue
                except Exception as error:  # noqa: BLE001
                    broken = error
            block_start = start + at - header_end
            marker = content.find(sync, block_start)
            block_end = len(content) if marker < 0 else marker + SYNC_SIZE
            found.corrupt.append(CorruptBlock(index, block_start, block_end,
                                              f"{type(broken).__name__}: {broken}"))
            index += 1
            start = block_end
            break
    return found
