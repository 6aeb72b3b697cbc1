"""The commit: the protocol every write goes through (begin, write, commit or roll back),
optimistic conflict checks, and how a write's change becomes one instant."""

from ._change import (
    AlreadyCommitted,
    Change,
    ExternalLoad,
    Merge,
    Progress,
    StreamStep,
    Written,
    check_generation,
    commit_begun,
    commit_change,
    committed,
    generation_of,
    in_range,
    producer_record,
    to_commit,
)
from ._conflicts import CompactedMeanwhileError
from ._conflicts import check as check_conflicts
from ._protocol import Admission, Builder, Pending, Protocol
from ._upkeep import maintain, protocol_of, wait_for_background_maintenance

__all__ = [
    "Admission",
    "AlreadyCommitted",
    "Builder",
    "Change",
    "CompactedMeanwhileError",
    "ExternalLoad",
    "Merge",
    "Pending",
    "Progress",
    "Protocol",
    "StreamStep",
    "Written",
    "check_conflicts",
    "check_generation",
    "commit_begun",
    "commit_change",
    "committed",
    "generation_of",
    "in_range",
    "maintain",
    "producer_record",
    "protocol_of",
    "to_commit",
    "wait_for_background_maintenance",
]
