"""Benchmarks comparing metatxn with deltalake and pyiceberg.

Not part of the installed package and not a stable API: run the scripts, read ``bench/README.md``.
"""
