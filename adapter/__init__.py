"""The pod and its two front doors, V1 (v1/) and Kafka (kafka/). What both doors share sits
at this level: the pod (server.py, workers.py, settings.py), accepting and draining sockets
(sockets.py), the connections' common base (served.py), limits, users (auth.py), the append
budget (backpressure.py), TLS, logging and metrics. Also here: the command lines (cli/) and
the Python V1 client (client/, which imports nothing of the pod)."""
