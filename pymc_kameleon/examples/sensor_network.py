"""Old import path of :mod:`pymc_kameleon.problems.sensor_network` (re-exported; use the new path)."""

import sys as _sys

from pymc_kameleon.problems import sensor_network as _module

# The old path is the new module itself: every name (module constants too) stays importable.
_sys.modules[__name__] = _module
