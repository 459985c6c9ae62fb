"""The Kafka wire protocol front door: a sans-I/O core (framing.py, protocol.py,
versions.py, records.py), one module per API family, and the connection (connection.py)."""
