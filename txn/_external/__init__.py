"""External segments (CarbonData's ADD SEGMENT): existing Parquet, ORC, CSV and JSON folders
that join a table in place. This room checks the request, walks the folder, reads what each
file's footer (or one scan) says, and commits the files as segments; reading them is the
``_files`` room's (``ExternalReader``)."""

from ._add import add_segment

__all__ = ["add_segment"]
