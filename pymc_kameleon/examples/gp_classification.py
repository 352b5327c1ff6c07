"""Old import path of :mod:`pymc_kameleon.problems.gp_classification` (re-exported; use the new path)."""

from pymc_kameleon.problems.gp_classification import *  # noqa: F403
from pymc_kameleon.problems.gp_classification import __all__  # noqa: F401
