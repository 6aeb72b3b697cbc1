"""Segment maintenance: SHOW SEGMENTS and PARTITIONS, and checking the metadata table against
storage."""

from ._show import partitions, segments
from ._validate import validate

__all__ = ["partitions", "segments", "validate"]
