"""Old import path of :mod:`pymc_kameleon.problems.gp_classification` (re-exported; use the new path)."""

import sys as _sys

from pymc_kameleon.problems import gp_classification as _module

# The old path is the new module itself: every name (module constants too) stays importable.
_sys.modules[__name__] = _module
