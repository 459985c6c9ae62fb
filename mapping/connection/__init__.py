"""Redis itself: connecting (standalone, Sentinel, Cluster; ``client``, ``startup``), the
pipelining batchers, pub/sub and the waits built on it, the Lua script catalogue
(``scripts``: every ``lua/`` file loaded once, called by SHA), retries of background work
(``resilient``), Redis's errors sorted, and the embedded redis-server of ``make run``.
Imports ``core`` only."""
