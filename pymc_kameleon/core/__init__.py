"""NumPy/SciPy core of pymc-kameleon.

Nothing in this sub-package imports PyMC or PyTensor, so every formula can be
tested on plain arrays.
"""

from pymc_kameleon.core.kameleon.family import KameleonProposal, ProposalAtPoint
from pymc_kameleon.core.kameleon.kernels import (
    GaussianKernel,
    Kernel,
    LinearKernel,
    Matern32Kernel,
    Matern52Kernel,
    make_kernel,
    median_heuristic_bandwidth,
)
from pymc_kameleon.core.linalg import SingularCovarianceError, jittered_cholesky
from pymc_kameleon.core.mh import accept_probability, metropolis_accept, mh_log_ratio

__all__ = [
    "GaussianKernel",
    "Kernel",
    "KameleonProposal",
    "LinearKernel",
    "Matern32Kernel",
    "Matern52Kernel",
    "ProposalAtPoint",
    "SingularCovarianceError",
    "accept_probability",
    "jittered_cholesky",
    "make_kernel",
    "median_heuristic_bandwidth",
    "metropolis_accept",
    "mh_log_ratio",
]
