"""``python -m bench.scale``: the scale-out benchmark. Throughput as pods and Redis Cluster
primaries are added, each row beside raw Redis doing the same work in the same run.

What runs where, for each configuration (primaries M, pods P, load processes L):

- Redis: one ``redis-server`` for M = 1, else a Redis Cluster of M primaries on loopback
  (``tests/support/cluster.py``, no replicas), AOF off: the benchmark measures CPU;
- P pods (``tests/support/pods.py``): RF 1 topics, replicator off;
- L load processes (Kafka fetch: C consumers), never inside a pod, started together once
  each is ready (``harness.py``); the raw side runs in as many processes;
- every process's CPU share of a core over each row's window (``/proc/<pid>/stat``), so a
  reader sees which process was the bottleneck.

Modules: ``deployment.py`` (Redis, pods, where keys live), ``harness.py`` (load processes),
``kafka_load.py`` and ``raw.py`` (their bodies), ``workloads.py`` (the rows),
``run.py`` (configurations in turn), ``report.py`` (table, JSON, plot), ``__main__.py``.
"""
