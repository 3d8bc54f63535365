"""Node privacy on Flower: what a node releases is decided on the node.

* :mod:`.policy` -- the privacy policy a node owns (its largest ε/δ, allowed calibrations,
  its noise source and its own ledger), checked before its data is touched;
* :mod:`.failure` -- the one uniform failure a node shows once its data is open;
* :mod:`.client_dp` -- client-level DP on model updates (fixed clipping, Gaussian noise on
  the server or split over the clients);
* :mod:`.secure_sum` -- the secure sum over Flower messages (the node's stages and the
  server's driver of :mod:`fedspectral.fed.secagg`).
"""
