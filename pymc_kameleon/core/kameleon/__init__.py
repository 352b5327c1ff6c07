r"""The Kameleon proposal family and the kernels it is built from (NumPy/SciPy).

- :mod:`.kernels`: RKHS kernels (Gaussian, Matérn 3/2 and 5/2, linear) and their gradients.
- :mod:`.family`: :class:`~.family.KameleonProposal`, the covariance
  :math:`\gamma^2 I + \nu^2 M_y H M_y^\top` at a point for a fixed subsample :math:`Z` (batched
  for SMC), and :func:`~.family.fit_proposal` (one refresh of :math:`Z`, bandwidth and :math:`\gamma`);
  :mod:`._fused` its compiled loop for radial kernels.
- :mod:`.moves`: :class:`~.moves.KameleonMoves`, the family as a
  :class:`~pymc_kameleon.core.proposals.Proposal` with the current state's factor cached.
- :mod:`.whitened`: :class:`~.whitened.WhitenedFamily`, a family fitted in whitened coordinates and used in
  the model's.
"""
