"""Values as CarbonData shows them, for every place that prints them (the command line's tables,
``txn.spark.sql``'s SHOW SEGMENTS)."""

from __future__ import annotations

from datetime import datetime

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


def load_time_taken(start: datetime | None, end: datetime | None) -> str:
    """SHOW SEGMENTS' Load Time Taken, ``end - start`` as ``java.time.Duration.toString`` without
    ``PT``: ``7.026S``, ``1M3.2S``, ``2H5S``, ``0S``; ``NA`` when the load has not ended, or ended
    before it started by the clocks of two writers that disagree."""
    if start is None or end is None or end < start:
        return "NA"
    millis = round((end - start).total_seconds() * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    seconds, millis = divmod(millis, 1000)
    text = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or millis or not text:  # as java.time.Duration: 0S alone, never 1M0S
        fraction = f".{millis:03d}".rstrip("0") if millis else ""
        text += f"{seconds}{fraction}S"
    return text
