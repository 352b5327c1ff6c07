r"""Scale-free adaptation: what a chain learns during tuning, and when (NumPy/SciPy).

- :mod:`.scales`: Robbins-Monro log-scales and vanishing adaptation probabilities.
- :mod:`.history`: a bounded, evenly thinned record of a chain's states.
- :mod:`.scan`: the coordinate scan that finds every coordinate's scale first.
- :mod:`.whitening`: the affine map to coordinates in which the learned covariance is the identity.
- :mod:`.covariance`: a window's mean and covariance, shrunk toward the diagonal.
- :mod:`.windows`: one adaptation window's draws and the signs that it should end.
- :mod:`.diagnostics`: the end-of-tuning checks (drift, climb, gradient spread).
"""
