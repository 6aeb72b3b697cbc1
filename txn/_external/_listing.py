"""Walking the folder an ADD SEGMENT names: its data files, grouped into one segment per
partition folder (a partitioned table) or one segment for everything (an unpartitioned one).

Files whose name starts with ``_`` or ``.`` (Spark's ``_SUCCESS``, ``.crc`` checksums, Hive's
``_temporary``) and everything below such folders are not data, as Spark and Hive see it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from metatxn.timeline import InvalidOptionError

from .._files import (
    canonical_url,
    file_version,
    modified_ms,
    parse_hive_folder,
    typed_value,
    url_filesystem,
)


@dataclass(frozen=True)
class ListedFile:
    url: str
    size: int
    modified_ms: int | None
    #: What the storage changes whenever the bytes change (``file_version``).
    version: str | None
    #: Not a regular file: a link to a folder (not followed, as the walk does not), a pipe.
    special: bool = False


@dataclass(frozen=True)
class PartitionFolder:
    """The files of one segment: a partition folder's (``partition`` its path below the added
    folder, ``day=20211123/hour=12``), or the whole folder's (``partition`` empty)."""

    partition: str
    files: list[ListedFile]


def _hidden(relative: str) -> bool:
    """Spark's rule (``shouldFilterOutPathName``): names starting with ``.``, or with ``_`` unless
    they hold ``=`` (a partition folder of a column named ``_x``), and ``._COPYING_`` files; and
    CarbonData's: ``*.crc`` checksums."""
    return any(part.startswith(".") or (part.startswith("_") and "=" not in part)
               or part.endswith(("._COPYING_", ".crc")) for part in relative.split("/"))


def list_folder(url: str, options: dict[str, Any], schema: pa.Schema,
                partition_by: Sequence[str]) -> tuple[str, list[PartitionFolder]]:
    """The folder's canonical URL (the one its files are keyed under: the filesystem's own
    spelling, so that one file has one key), and its data files, one group per segment to
    create, in folder order.

    Raises:
        InvalidOptionError: the path does not exist or is not a folder, holds no data file, or
            (a partitioned table) a file does not sit in ``col=value`` folders of the table's
            partition columns, in order, right below the path.
    """
    try:
        filesystem, root = url_filesystem(url, options)
        if not filesystem.isdir(root):
            what = "is a file" if filesystem.exists(root) else "does not exist"
            raise InvalidOptionError(f"add_segment path {url!r} {what}; expected a folder of "
                                     "existing data files")
        found = filesystem.find(root, detail=True, withdirs=False)
    except InvalidOptionError:
        raise
    except Exception as exc:  # any backend's failure to open or list: the user's path or options
        raise InvalidOptionError(f"add_segment path {url!r} cannot be listed: {type(exc).__name__}: "
                                 f"{exc}; expected a readable folder (and storage_options that "
                                 "open it)") from None
    canonical = canonical_url(url)
    groups: dict[str, list[ListedFile]] = {}
    levels = len(partition_by)
    for path, info in sorted(found.items()):
        relative = posixpath.relpath(path, root)
        if _hidden(relative):
            continue
        folders = posixpath.dirname(relative)
        partition = folders if levels else ""
        if info.get("islink"):
            info = _followed(filesystem, path)
        special = info.get("type", "file") != "file"
        if levels and not special:  # a link to a folder is refused for what it links to
            _check_levels(url, relative, folders, schema, partition_by)
        groups.setdefault(partition, []).append(
            ListedFile(f"{canonical}/{relative}", int(info.get("size") or 0), modified_ms(info),
                       file_version(info), special))
    if not groups:
        raise InvalidOptionError(f"add_segment path {url!r} holds no data files (no partition data "
                                 "is found); expected files of the given format below it")
    return canonical, [PartitionFolder(partition, files) for partition, files in groups.items()]


def _followed(filesystem: Any, path: str) -> dict[str, Any]:
    """The listing entry of the file a symbolic link names (a walk describes the link itself:
    its own modification time, which later reads, following it, would never see again)."""
    try:
        info: dict[str, Any] = filesystem.info(path)
    except OSError:  # a dangling link
        return {"type": "other", "size": 0}
    return info


def _check_levels(url: str, relative: str, folders: str, schema: pa.Schema,
                  partition_by: Sequence[str]) -> None:
    names = folders.split("/") if folders and folders != "." else []
    expected = "/".join(f"{name}=<value>" for name in partition_by)
    if len(names) != len(partition_by) or any(
            parse_hive_folder(folder, partition_by)[0] != name or "=" not in folder
            for folder, name in zip(names, partition_by, strict=False)):
        raise InvalidOptionError(
            f"add_segment path {url!r} does not comply with the table's partitions: file "
            f"{relative!r} should sit in folders {expected}/ right below the path; give the "
            "folder that holds the partition folders")
    for folder, name in zip(names, partition_by, strict=True):
        value = parse_hive_folder(folder)[1]
        if value is None and not schema.field(name).nullable:
            raise InvalidOptionError(
                f"add_segment: partition folder {folder!r} below {url!r} holds null (Hive's null "
                f"folder), but the table's column {name!r} is not nullable")
        try:
            typed_value(value, schema.field(name).type)
        except ValueError as exc:
            raise InvalidOptionError(
                f"add_segment: partition folder {folder!r} below {url!r} does not hold a value "
                f"of column {name!r}: {exc}") from None

