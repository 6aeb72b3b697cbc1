"""Locations handed to Spark's other processes."""

from __future__ import annotations

import os
import re

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:")


def absolute_location(location: str) -> str:
    """``location`` with a plain local path made absolute (``~`` expanded); anything with a
    scheme (``s3a://``, ``memory://``, Java's ``file:/abs``) as given.

    Spark's Python workers run in folders of their own, where a relative path names another
    folder than in the driver. (A scheme has two characters at least, so ``C:`` stays a path.)
    """
    if _SCHEME.match(location):
        return location
    return os.path.abspath(os.path.expanduser(location))
