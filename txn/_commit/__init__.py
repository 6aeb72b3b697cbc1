"""The commit: the protocol every write goes through (begin, write, commit or roll back),
optimistic conflict checks, and how a write's change becomes one instant."""

from ._change import Change, Written, commit_begun, commit_change
from ._conflicts import check as check_conflicts
from ._protocol import Builder, Pending, Protocol
from ._upkeep import protocol_of

__all__ = [
    "Builder",
    "Change",
    "Pending",
    "Protocol",
    "Written",
    "check_conflicts",
    "commit_begun",
    "commit_change",
    "protocol_of",
]
