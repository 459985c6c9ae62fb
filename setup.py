"""The project is declared in pyproject.toml; this adds its C extensions, the Fetch's
compiled batch encoding (adapter/kafka/_walk.c), Produce's check of a batch's records
(adapter/kafka/_produce.c), the batcher's RESP scanner for raw replies
(mapping/connection/_resp_scan.c), V1 CONSUME's reply text (adapter/v1/_consume.c) and the V1
partitioner's hash (mapping/topic/_fnv.c); and the streamadapter Redis module
(mapping/connection/append_module.c), a shared library for ``redis-server --loadmodule``,
not for Python to import.
``optional``: an install without a C compiler still succeeds, and the pods use the
pure-Python paths (adapter/kafka/records.py, mapping/connection/raw_replies.py,
adapter/v1/raw_consume.py, mapping/topic/partitioner.py; and Redis without the module: the
scripts' own XADDs)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "adapter.kafka._walk",
            sources=["adapter/kafka/_walk.c"],
            include_dirs=["mapping/connection"],
            depends=["mapping/connection/raw_entries.h"],
            optional=True,
        ),
        Extension(
            "mapping.connection._resp_scan",
            sources=["mapping/connection/_resp_scan.c"],
            optional=True,
        ),
        Extension(
            "mapping.connection.streamadapter",
            sources=["mapping/connection/append_module.c"],
            depends=[
                "mapping/connection/module_api.h",
                "mapping/connection/kafka_record.h",
                "mapping/connection/produce_commands.h",
            ],
            optional=True,
        ),
        Extension(
            "adapter.kafka._produce",
            sources=["adapter/kafka/_produce.c"],
            include_dirs=["mapping/connection"],
            depends=["mapping/connection/kafka_record.h"],
            optional=True,
        ),
        Extension(
            "mapping.topic._fnv",
            sources=["mapping/topic/_fnv.c"],
            optional=True,
        ),
        Extension(
            "adapter.v1._consume",
            sources=["adapter/v1/_consume.c"],
            include_dirs=["mapping/connection"],
            depends=["mapping/connection/raw_entries.h"],
            optional=True,
        ),
    ]
)
