r"""The GP surrogate of the log-likelihood and the schedule by which it learns (NumPy/SciPy).

- :mod:`.surrogate`: :class:`~.surrogate.GPSurrogate`, the only entry point (values, optional
  gradients, whitened inputs), built from :mod:`.covariance` (SE-ARD and its derivatives),
  :mod:`.factor` (the stored points and their growing Cholesky factor, :mod:`.triangular`),
  :mod:`.predict` (mean, variance, gradient, joint law) and :mod:`.fit` (marginal likelihood).
- :mod:`.options` and :mod:`.training`: which exact evaluations the GP of GP delayed acceptance
  is given and when its hyperparameters are fitted.
"""
