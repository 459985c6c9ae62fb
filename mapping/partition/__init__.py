"""A partition's log: the produce and consume scripts and their calls
(``partition_scripts``, ``partitions``; ``lua/partition``), Kafka's produce with
idempotence (``kafka``, ``sequence_fence``; ``lua/kafka``), transactional markers and the
last stable offset (``partition_txns``; ``lua/txn``), reading records back (``record_reader``,
``record_walk``; ``formatted_records``: a page a reader formatted from the raw reply),
segments and compaction. Imports the floors below: ``core``, ``connection``, ``topic``."""
