"""Before the first Spark job of a write, read or stream: can Spark's Python workers run metatxn?

Executors unpickle metatxn's task functions, so their Python must import metatxn and pyarrow.
When it cannot (typically a virtual environment that is not activated: the workers start
``python3`` from the PATH), every task would die with ``ModuleNotFoundError`` deep inside a Java
stack trace. One tiny job per SparkContext and worker interpreter finds out first; it is shipped
by value, so it runs even where metatxn is missing and names the interpreter the workers use.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from typing import Any

from .. import WorkerEnvironmentError
from . import _probe

log = logging.getLogger("metatxn")

_checked: set[tuple[str, str]] = set()
_checking = threading.Lock()
#: The last "SomeError: message" line of a Python traceback inside Spark's error text.
_PYTHON_ERROR = re.compile(r"^\s*(\w+(?:Error|Exception): .+)$", re.MULTILINE)


def ensure_workers_run_metatxn(spark: Any) -> None:
    """Raise WorkerEnvironmentError unless Spark's Python workers can import metatxn.

    Runs one single-task job the first time per SparkContext and worker interpreter; free after.
    """
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect: the server's workers are not this client's to probe
        log.debug("no SparkContext (Spark Connect?): the workers' interpreter is not checked")
        return
    key = (context.applicationId, context.pythonExec)
    if key in _checked:
        return
    with _checking:
        if key in _checked:
            return
        executable, version, problem = _probe_workers(context)
        if problem:
            raise WorkerEnvironmentError(f"{executable} (Python {version})" if version else executable,
                                         sys.executable, problem)
        _checked.add(key)


def _probe_workers(context: Any) -> tuple[str, str, str]:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(_probe)  # type: ignore[no-untyped-call]
    try:
        reported = context.parallelize([0], 1).map(_probe.report).collect()
    except Exception as exc:  # the worker could not even start, or not run Python code
        found = _PYTHON_ERROR.findall(str(exc))
        reason = found[-1].strip() if found else str(exc).strip().splitlines()[0]
        return str(context.pythonExec), "", f"a Spark job fails: {reason}"
    finally:
        cloudpickle.unregister_pickle_by_value(_probe)  # type: ignore[no-untyped-call]
    executable, version, problem = reported[0]
    return str(executable), str(version), str(problem)
