"""Where a table keeps its files: the folders metatxn reserves beside the table's data.

```
<table>/
  _timeline/        the timeline (``timeline``'s layout) and ``table.json``, the configuration
  _metadata/        the metadata table (``indexes``'s layout)
  _markers/         a marker per data file or delete delta being written (``_writer``)
  _trash/<T>/       what CLEAN FILES ``T`` moved aside (orphans), until ``clean.trash_hours``
  _staging/<T>/     the Spark native writer's files of instant ``T`` before they move into place
  <partition folders>/...   data files and delete deltas, the only files a table reads as data
```

Each name is spelled here (or by the package that owns the folder) and nowhere else.
"""

from __future__ import annotations

from typing import Final

from metatxn.indexes import METADATA_FOLDER
from metatxn.timeline import TIMELINE_FOLDER

MARKERS_FOLDER: Final = "_markers"
TRASH_FOLDER: Final = "_trash"
STAGING_FOLDER: Final = "_staging"

#: Folders only metatxn writes, in which no data file of the table is.
RESERVED_FOLDERS: Final = (TIMELINE_FOLDER, METADATA_FOLDER, MARKERS_FOLDER, TRASH_FOLDER,
                           STAGING_FOLDER)

#: Folders where a put stages its temporaries (data files are written in place, under markers).
PUT_FOLDERS: Final = (TIMELINE_FOLDER, METADATA_FOLDER, MARKERS_FOLDER)


def prefixes(folders: tuple[str, ...]) -> tuple[str, ...]:
    """The key prefixes of ``folders`` (for ``str.startswith``)."""
    return tuple(f"{folder}/" for folder in folders)


def trash_folder(instant_time: str) -> str:
    """Where clean ``instant_time`` moves files: ``_trash/<T>/<table-relative path>``."""
    return f"{TRASH_FOLDER}/{instant_time}"
