"""pymc-kameleon: gradient-free, locally adaptive samplers for PyMC.

The public API::

    from pymc_kameleon import KameleonMetropolis

``pymc_kameleon.core`` holds the NumPy math (no PyMC imports), ``pymc_kameleon.targets``
the benchmark targets with exact references, and ``pymc_kameleon.plots`` plotting helpers.
"""

from pymc_kameleon.steps import KameleonMetropolis

__version__ = "0.1.0"

__all__ = ["KameleonMetropolis", "__version__"]
