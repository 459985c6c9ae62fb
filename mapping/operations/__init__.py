"""What operators and the pods' background tasks do across the floors below: deleting and
growing topics (``topic_lifecycle``), retention and compaction runs (``retention``),
``inspect`` and lag (``inspection``, ``group_overview``), offset resets, and the metrics
snapshot. The top floor: imports any other, is imported by none."""
