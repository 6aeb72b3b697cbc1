"""Data files on storage: writing them (split, sort, statistics, markers), delete deltas, and
scanning a file by row position. The bottom room of ``txn``: it knows files, not tables."""

from ._deltas import (
    DELTA_SUFFIX,
    DeltaStatus,
    LiveDeltas,
    Positions,
    delete_rows,
    read_positions,
    reading_file,
    stage_deletes,
)
from ._scan import (
    DATA_FILE_EXPECTED,
    check_data_file,
    check_schema,
    raise_for_files,
    read_data_file,
    scan_file,
)
from ._sort import DEFAULT_SORT_MEMORY_BYTES, SORT_MEMORY_PROPERTY, sort_memory_bytes
from ._storage_io import DataStore
from ._writer import (
    MARKERS_FOLDER,
    ColumnStats,
    DataFileWriter,
    FileStatus,
    KeyLocations,
    marked_paths,
    marker_instant,
    marker_path,
    parse_hive_value,
    read_marker,
)

__all__ = [
    "DATA_FILE_EXPECTED",
    "DEFAULT_SORT_MEMORY_BYTES",
    "DELTA_SUFFIX",
    "MARKERS_FOLDER",
    "SORT_MEMORY_PROPERTY",
    "ColumnStats",
    "DataFileWriter",
    "DataStore",
    "DeltaStatus",
    "FileStatus",
    "KeyLocations",
    "LiveDeltas",
    "Positions",
    "check_data_file",
    "check_schema",
    "delete_rows",
    "marked_paths",
    "marker_instant",
    "marker_path",
    "parse_hive_value",
    "raise_for_files",
    "read_data_file",
    "read_marker",
    "read_positions",
    "reading_file",
    "scan_file",
    "sort_memory_bytes",
    "stage_deletes",
]
