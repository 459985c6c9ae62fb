"""V1 consumer groups (``groups``; ``lua/group``), the ``__consumer_offsets`` mirror
(``offsets_mirror``, ``offsets_topic``; ``lua/offsets_topic``), the V1 assignors, and the
end of a group's life (``deletion``: delete, expire). Imports ``replication`` and the floors
below it, never ``txn``."""
