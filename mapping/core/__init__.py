"""The floor everything stands on: key names (``keys``), the offset codec (``codec``), a
record's stream-entry fields (``records``), size marks, errors and Kafka's error codes, and
the RESP reader. Pure: no connection, no I/O. Imports nothing of ``mapping``."""
