"""A change source outside airflow_cdc, written against the public seam only.

Its changes live in one JSON file (``spec["log"]``): ``{"split_at": <ts>, "changes": [...]}``.
The stream starts with one partition, ``root``; at ``split_at`` it ends and two children,
``even`` and ``odd``, carry on (keys by parity), as a Spanner partition splits once. Each
change is ``{"ts", "table", "op", "id", "values"}``.
"""

from split_once_source.source import SplitOnceSource

__all__ = ["SplitOnceSource"]
