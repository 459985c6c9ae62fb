"""The side-by-side benchmark: a raw redis-py baseline and the adapter on the same Redis.

Run ``python -m bench --help``. See ``bench/run.py`` for what runs where.
"""
