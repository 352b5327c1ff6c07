"""Old import path of :mod:`pymc_kameleon.problems.table1` (re-exported; use the new path)."""

from pymc_kameleon.problems.table1 import *  # noqa: F403
from pymc_kameleon.problems.table1 import __all__  # noqa: F401
