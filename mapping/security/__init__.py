"""Who may connect: the user store behind V1 AUTH and the Kafka port's SASL PLAIN and
SCRAM (``auth``). Imports ``core`` and ``connection``."""
