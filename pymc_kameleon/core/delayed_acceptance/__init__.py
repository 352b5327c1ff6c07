r"""GP-surrogate delayed acceptance without PyMC: the two-stage ratios and the move.

- :mod:`.ratios`: stage 1 and stage 2 of delayed-acceptance MH (the exactness argument is in its
  docstring).
- :mod:`.mala`: the MALA version (Proposition 3.1's closed form, corrected).
"""
