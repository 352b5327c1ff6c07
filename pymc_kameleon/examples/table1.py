"""Old import path of :mod:`pymc_kameleon.problems.table1` (re-exported; use the new path)."""

import sys as _sys

from pymc_kameleon.problems import table1 as _module

# The old path is the new module itself: every name (module constants too, e.g. SIR_TIMES) stays importable.
_sys.modules[__name__] = _module
