r"""Tempered SMC with Kameleon rejuvenation (KASS) without PyMC.

- :mod:`.population`: one Metropolis-Hastings move of every particle at once, the scale rule and
  the number of sweeps for a move probability.
- :mod:`.evidence`: the evidence's relative variance from the genealogy (Lee and Whiteley), the
  rise of the log-likelihood over a stage's sweeps and the evidence lag.
- :mod:`.mixtures`: the Kameleon moves mixed with a global walk and with independent draws.
- :mod:`.rejuvenation`: one KASS stage (fit the proposal, sweep, log poor mixing).
- :mod:`.reference`: a wide Gaussian around a density's mode, to temper from where there is no prior
  to draw from (``start="smc"`` on a ``pm.Flat`` model).
"""
