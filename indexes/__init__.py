"""The metadata table: file listings, column statistics, the record-level index and segments.

It sits between ``txn`` and ``timeline`` (``txn -> indexes -> timeline``) and is updated in the
same commit as each data write. Its partitions arrive with the commit-protocol work; until then
this package exports nothing.
"""

__all__: list[str] = []


def __dir__() -> list[str]:
    return list(__all__)
