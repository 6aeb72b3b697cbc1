"""The change feed (``Table.changes``): the rows a window of completed instants changed, planned
from the timeline's commit metadata and read from the files and delete deltas those instants
wrote (design/changes.md)."""

from ._open import changes
from ._plan import ChangePart
from ._scanner import ChangeScanner
from ._window import EARLIEST

__all__ = ["EARLIEST", "ChangePart", "ChangeScanner", "changes"]
