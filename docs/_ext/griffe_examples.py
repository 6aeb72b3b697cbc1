"""A griffe extension for the API reference: metatxn's docstrings head their doctests with
Google style's ``Example:``, which griffe reads as an admonition of Markdown (the ``>>>`` lines
become nested quotes); ``Examples:`` is the section griffe renders as Python console code."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class DoctestExamples(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
