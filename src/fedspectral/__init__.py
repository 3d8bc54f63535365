"""fedspectral: private spectral learning from distributed data.

Two pillars share one privacy core:

* :mod:`fedspectral.pca` -- locally private PCA (one-shot, non-interactive);
* :mod:`fedspectral.fed` -- federated spectral contrastive learning (FedSC) and baselines;
* :mod:`fedspectral.privacy` -- Gaussian-mechanism calibration and the privacy ledger,
  the only place where noise scales are computed.
"""

__version__ = "0.1.0"
