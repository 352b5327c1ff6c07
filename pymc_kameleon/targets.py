"""Old import path of :mod:`pymc_kameleon.problems.targets` (re-exported; the README and notebooks use it)."""

from pymc_kameleon.problems.targets import *  # noqa: F403
from pymc_kameleon.problems.targets import __all__  # noqa: F401
