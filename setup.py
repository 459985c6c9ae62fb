"""The project is declared in pyproject.toml; this adds its C extensions, the Fetch's
compiled batch encoding (adapter/kafka/_walk.c), the batcher's RESP scanner for raw
replies (mapping/connection/_resp_scan.c) and V1 CONSUME's reply text (adapter/v1/_consume.c).
``optional``: an install without a C compiler still succeeds, and the pods use the
pure-Python paths (adapter/kafka/records.py, mapping/connection/raw_replies.py,
adapter/v1/raw_consume.py)."""

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
            "adapter.v1._consume",
            sources=["adapter/v1/_consume.c"],
            include_dirs=["mapping/connection"],
            depends=["mapping/connection/raw_entries.h"],
            optional=True,
        ),
    ]
)
