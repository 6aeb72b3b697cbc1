"""Where a timeline keeps its files, under the root of its storage.

```
_timeline/
  <T>.<action>.requested | .inflight | .rolledback, <T>_<C>.<action>   instants (``_instant``)
  lock/<seq>                    the table lock's records (``_lock``)
  heartbeats/<T>                heartbeats of running instants (``_heartbeat``)
  archive/<first>_<last>.archive  archived instants (``_archive``)
```

The layers above add their own files and folders beside and inside it (``txn``'s table layout).
"""

from __future__ import annotations

from typing import Final

TIMELINE_FOLDER: Final = "_timeline"
LOCK_FOLDER: Final = f"{TIMELINE_FOLDER}/lock"
HEARTBEAT_FOLDER: Final = f"{TIMELINE_FOLDER}/heartbeats"
ARCHIVE_FOLDER: Final = f"{TIMELINE_FOLDER}/archive"
