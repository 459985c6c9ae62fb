"""Kafka share groups (KIP-932): membership with the simple assignor, and each
share-partition's records in flight, kept on a Redis consumer group of the partition's log
stream (docs/share-groups.md). Imports the floors below it: core, connection, topic."""
