"""Who may connect and what they may do: the user store behind V1 AUTH and the Kafka port's
SASL PLAIN and SCRAM (``auth``; ``lua/users``), Kafka's ACL model and decision (``acls``,
pure) with the bindings' store (``acl_store``), and client quotas (``quotas``: entities,
precedence, their store). Imports ``core`` and ``connection``."""
