"""V1 CONSUME's records as reply text straight from the XRANGE reply's RESP bytes.

The CONSUME reads ask for their pages raw (mapping/connection/raw_replies.py) when given a
formatter: ``format_values`` (adapter/v1/_consume.c) writes the ``<offset>:<escaped
value>,...`` list from those bytes without a Python object per record, exactly as
``adapter.v1.escaping.escape`` over ``mapping.core.records.entry_values`` would
(tests/v1/test_compiled_consume.py checks it byte for byte). A page it does not take (a
transactional record, a marker, a layout it does not read) is parsed and goes the pure way.
Where the install did not build it, or ADAPTER_PURE_PYTHON is set, there is no formatter and
the pages come parsed, as before.
"""

from __future__ import annotations

from mapping.core.compiled import compiled
from mapping.partition.formatted_records import FormatValues

# read per call: tests swap it
format_values: FormatValues | None = compiled("adapter.v1._consume", "format_values")
