"""Old import path of :mod:`pymc_kameleon.problems.targets` (re-exported; the README and notebooks use it)."""

import sys as _sys

from pymc_kameleon.problems import targets as _module

# The old path is the new module itself: every name (module constants too) stays importable.
_sys.modules[__name__] = _module
