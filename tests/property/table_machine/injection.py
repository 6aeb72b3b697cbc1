"""Fault injection: which storage call of a write fails (``Fault``, a resolved ``FaultPlan``), the
storage every process of the machine goes through (``TableStorage``), and which part of the
protocol a storage call belongs to (``where``, for statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from metatxn.timeline import parse_file_name
from tests.faults import WRITE_OPS, Call, FaultyStorage
from tests.property.table_machine.actions import Counted, Mode


def is_instant_file(path: str) -> bool:
    """Whether ``path`` is a state file of an instant, on the data or the metadata timeline."""
    folder, _, name = path.rpartition("/")
    return folder in ("_timeline", "_metadata/_timeline") and parse_file_name(name) is not None


def counts(counted: Counted, call: Call) -> bool:
    if counted == "writes":
        return call.is_write
    if counted == "instants":
        return call.op == "put_if_absent" and is_instant_file(call.path)
    return True


@dataclass(frozen=True)
class Fault:
    """A resolved :class:`FaultPlan`: fail the ``nth`` counted call."""

    nth: int
    when: Literal["before", "after"]
    mode: Mode
    counted: Counted

    def arm(self, store: FaultyStorage) -> None:
        if self.counted == "instants":
            store.arm(self.nth, when=self.when, crash=self.mode == "death",
                      ops={"put_if_absent"}, match=is_instant_file)
        else:
            store.arm(self.nth, when=self.when, crash=self.mode == "death",
                      ops=WRITE_OPS if self.counted == "writes" else None)


class TableStorage(FaultyStorage):
    """A FaultyStorage a ``Table`` can use: it also hands out the inner pyarrow filesystem.

    Data files, delete deltas and record-index bases go through that filesystem, not the seam;
    after a ``death`` fault no data file or delta is written anyway, because each one is
    preceded by a (refused) marker put.
    """

    def arrow_filesystem(self):  # type: ignore[no-untyped-def]
        return self.inner.arrow_filesystem()  # type: ignore[attr-defined]


def where(call_path: str) -> str:
    """The part of the protocol a storage path belongs to, for statistics."""
    if call_path.startswith("_timeline/lock"):
        return "lock"
    if call_path.startswith("_timeline/heartbeats") or "/heartbeats/" in call_path:
        return "heartbeat"
    if call_path.startswith(("_timeline/archive", "_metadata/_timeline/archive")):
        return "archive"
    if call_path.startswith("_timeline"):
        return "data timeline"
    if call_path.startswith("_metadata/_timeline"):
        return "metadata timeline"
    if call_path.startswith("_metadata/record_index"):
        return "record index"
    if call_path.startswith("_metadata"):
        return "metadata files"
    if call_path.startswith("_markers"):
        return "markers"
    return "data files"
