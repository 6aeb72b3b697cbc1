"""The private names of ``txn`` the machine reaches into, imported in this one place: the table's
config file and the records it reads off the timeline, and the read of a write's state that the
racing delete (``writes``) hooks to let a second writer in between its read and its commit.
"""

from txn._context import TABLE_CONFIG_PATH, CommitMetadata, WritePlan, decode_config
from txn._write import _state as write_state

__all__ = ["TABLE_CONFIG_PATH", "CommitMetadata", "WritePlan", "decode_config", "write_state"]
