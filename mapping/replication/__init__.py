"""Copies and what is safe to read: the replicator playing replica streams
(``replicator``; ``lua/replicator``), acks=all waits (``acks``), --redis-wait-replicas rounds
and durable reads (``durable``, ``durable_reads``), the high watermark's views and waits
(``hw_views``), Kafka leader epochs per Redis primary (``leader_epochs``), and the pod's
wiring of them (``pod_replication``). Imports ``partition`` and the floors below it."""
