"""The categories of the warnings this package raises, so that a user can filter them by category.

Every warning pymc-kameleon raises is a :class:`KameleonWarning`; the ones Python's convention
makes a ``RuntimeWarning`` (numerical trouble met and handled on the way) are a
:class:`KameleonRuntimeWarning`, which is both. Filters written for ``UserWarning`` or
``RuntimeWarning`` therefore still match. Pure Python: the NumPy core and the adapters import it.
"""

__all__ = ["KameleonRuntimeWarning", "KameleonWarning"]


class KameleonWarning(UserWarning):
    """The category of every warning pymc-kameleon raises.

    Its text begins with the name of what raised it ("KameleonMetropolis: ...", "KASS: ...",
    "MLDA: ..."), names the figure that prompted it and the remedy. Sampling runs inside PyMC, so
    Python shows the warning at PyMC's line, not at the user's: filter by category, or by category
    and text, not by module.

    Examples
    --------
    >>> import warnings
    >>> from pymc_kameleon import KameleonWarning
    >>> warnings.filterwarnings("ignore", category=KameleonWarning)  # all of this package's
    >>> warnings.filterwarnings(
    ...     "ignore", message="KameleonMetropolis: the chains disagree", category=KameleonWarning
    ... )  # one of them (a regular expression matched at the start of the text)
    """


class KameleonRuntimeWarning(KameleonWarning, RuntimeWarning):
    """A :class:`KameleonWarning` about numerical trouble met and handled on the way.

    For example a proposal covariance that needed jitter, a vectorised log density that disagreed
    with PyMC's and was replaced by a slower exact path, or an inner solve that did not converge.
    It is also a ``RuntimeWarning``.
    """
