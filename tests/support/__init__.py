"""What the tests share, and the benchmarks use too (``bench`` runs from the repository root):

- ``pods``: the pod launcher (``python -m adapter serve`` as a child process) and its options;
- ``waiting``: bounded polling until a condition holds;
- ``redis``, ``cluster``: the run's Redis (a container or a child process), Redis Cluster;
- ``v1``, ``kafka``, ``kafka_groups``: raw V1 exchanges, a raw Kafka client and the Kafka
  clients' helpers, in-process Kafka group coordinators;
- ``cli``, ``tls``, ``tls_proxy``, ``procfs``, ``topic_writer``: the command line pointed at
  one Redis, certificates and a TLS proxy, a process's resources, writing topics in-process;
- ``pubsub``: a stand-in for the pod's pub/sub connection, for in-process tests of waits.

The fixtures built on these are in ``tests/conftest.py``; ``tests/README.md`` says which.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root: child processes run there
