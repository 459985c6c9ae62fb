"""Topics: their settings hash and configs with Kafka's names and validation
(``topic_config``, ``topic_configs``, ``topic_rules``, ``broker_configs``), the per-pod cache
(``topic_cache``), creating and reading them (``topics``, the one writer of the topic keys;
``lua/topic``), the pods' registry as brokers (``brokers``) and the V1 partitioner.
Imports ``core``, ``connection``."""
