"""Streams: exactly-once producers writing streaming segments (``t.stream``), SHOW STREAMS and
DROP STREAM (design/streaming.md)."""

from ._drop import drop_stream
from ._show import StreamInfo, streams
from ._stream import Stream, generation, record_of

__all__ = ["Stream", "StreamInfo", "drop_stream", "generation", "record_of", "streams"]
