"""Old import path of :mod:`pymc_kameleon.problems.sensor_network` (re-exported; use the new path)."""

from pymc_kameleon.problems.sensor_network import *  # noqa: F403
from pymc_kameleon.problems.sensor_network import __all__  # noqa: F401
