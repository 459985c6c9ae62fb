"""The V1 line protocol front door: a sans-I/O core (protocol.py, escaping.py, answer.py),
the handler table (handlers/), the AUTH gate (auth_gate.py), the connection
(connection.py) and CONSUME's compiled reply text (raw_consume.py, _consume.c)."""
