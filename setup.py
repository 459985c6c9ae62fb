"""The project is declared in pyproject.toml; this adds its one C extension, the Fetch's
compiled batch encoding (adapter/kafka/_walk.c). ``optional``: an install without a C
compiler still succeeds, and the pods use the pure-Python path (adapter/kafka/records.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "adapter.kafka._walk",
            sources=["adapter/kafka/_walk.c"],
            optional=True,
        )
    ]
)
