"""Values as CarbonData shows them, for every place that prints them (the command line's tables,
``txn.spark.sql``'s SHOW SEGMENTS)."""

from __future__ import annotations

_UNITS = (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024))


def segment_size(num_bytes: int | None) -> str:
    """SHOW SEGMENTS' Data Size and Index Size (CarbonData's ``Strings.formatSize``): ``912.0B``,
    ``1.23KB``, ``4.50MB``, ...; ``NA`` when unknown (None or negative)."""
    if num_bytes is None or num_bytes < 0:
        return "NA"
    for unit, scale in _UNITS:
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f}{unit}"
    return f"{float(num_bytes):.1f}B"
