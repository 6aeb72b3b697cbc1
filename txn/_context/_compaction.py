"""Table properties of the table services: compaction (CarbonData's ``COMPACTION_LEVEL_THRESHOLD``,
``MAJOR_COMPACTION_SIZE``, ``COMPACTION_PRESERVE_SEGMENTS``, ``AUTO_LOAD_MERGE``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from metatxn.timeline import InvalidOptionError

#: The table property holding the MINOR thresholds (CarbonData: ``COMPACTION_LEVEL_THRESHOLD``).
LEVEL_THRESHOLD_PROPERTY: Final = "compaction.level_threshold"
#: CarbonData's default: merge 4 fresh loads into ``x.1``, then 3 ``x.1`` segments into ``x.2``.
DEFAULT_LEVEL_THRESHOLD: Final = "4,3"
#: The largest level count CarbonData accepts (its docs say 100; its code checks 10000).
MAX_LEVEL_COUNT: Final = 10_000
_LEVEL_COUNT: Final = re.compile(r"\d+", re.ASCII)
AUTO_PROPERTY: Final = "compaction.auto"
MAJOR_SIZE_PROPERTY: Final = "compaction.major.size_mb"
PRESERVE_PROPERTY: Final = "compaction.preserve_segments"
#: CarbonData's defaults: major compaction merges segments together under 1024 MB; none preserved.
DEFAULT_MAJOR_SIZE_MB: Final = 1024
MAX_MAJOR_SIZE_MB: Final = 1024 * 1024
MAX_PRESERVE: Final = 100


@dataclass(frozen=True)
class CompactionOptions:
    level_threshold: tuple[int, int]
    major_size_bytes: int
    preserve_segments: int
    auto: bool


def compaction_options(properties: dict[str, str]) -> CompactionOptions:
    """The compaction settings of a table (its properties were checked when it was created:
    ``KNOWN_PROPERTIES``)."""
    return CompactionOptions(
        level_threshold=parse_level_threshold(properties.get(LEVEL_THRESHOLD_PROPERTY,
                                                             DEFAULT_LEVEL_THRESHOLD)),
        major_size_bytes=int(properties.get(MAJOR_SIZE_PROPERTY, DEFAULT_MAJOR_SIZE_MB)) * 1024 * 1024,
        preserve_segments=int(properties.get(PRESERVE_PROPERTY, 0)),
        auto=properties.get(AUTO_PROPERTY, "false").lower() == "true",
    )


def parse_level_threshold(text: str) -> tuple[int, int]:
    """Parse the ``compaction.level_threshold`` table property: ``"L1,L2"`` segment counts.

    Ports CarbonData's ``COMPACTION_LEVEL_THRESHOLD`` (``CarbonProperties.getIntArray`` and the
    head of ``identifySegmentsToBeMergedBasedOnSegCount``): two comma-separated whole numbers in
    0..10000, spaces around each allowed; an L2 count of 1 is read as 0 (disabled), because
    merging a single ``x.1`` segment would merge nothing.

    We differ on bad text: CarbonData logs and falls back to the default ``4,3``, so a typo
    silently changes how a table compacts. We raise :class:`timeline.InvalidOptionError` naming
    the property, the value and the expected form. A single number (which CarbonData reads as
    "L1 only") is refused too: write ``"5,0"`` to disable level 2.

    >>> parse_level_threshold("4,3")
    (4, 3)
    >>> parse_level_threshold(" 6 , 1 ")
    (6, 0)
    """
    try:
        return level_counts(text)
    except ValueError as exc:
        raise InvalidOptionError(
            f"table property {LEVEL_THRESHOLD_PROPERTY} = {text!r} is not valid: {exc}") from None


def level_counts(text: str) -> tuple[int, int]:
    """``parse_level_threshold`` without the property's name: ``ValueError`` saying what is
    wrong and what is expected (the check of ``KNOWN_PROPERTIES``)."""
    expected = (
        f"expected two comma-separated whole numbers from 0 to {MAX_LEVEL_COUNT} "
        f"(the level-1 and level-2 segment counts), such as {DEFAULT_LEVEL_THRESHOLD!r}"
    )

    def refuse(problem: str) -> ValueError:
        return ValueError(f"{problem}; {expected}")

    if not isinstance(text, str):
        raise refuse(f"it is a {type(text).__name__}, not text")
    if not text.strip():
        raise refuse("it is empty")
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != 2:
        raise refuse(f"it has {len(parts)} value{'s' if len(parts) != 1 else ''}")
    counts: list[int] = []
    for name, part in zip(("level-1", "level-2"), parts, strict=True):
        # Plain ASCII digits only: int() would also take "+4", "4_0" and other scripts' digits.
        if not _LEVEL_COUNT.fullmatch(part):
            raise refuse(f"the {name} count {part!r} is not a whole number")
        count = int(part)
        if count > MAX_LEVEL_COUNT:
            raise refuse(f"the {name} count {count} is above {MAX_LEVEL_COUNT}")
        counts.append(count)
    level1, level2 = counts
    return level1, 0 if level2 == 1 else level2
