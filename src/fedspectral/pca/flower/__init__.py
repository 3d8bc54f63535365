"""Locally private PCA collection as a Flower app (:mod:`.app`).

The PCA pillar's Flower glue.  It sits in the Flower layer (beside
:mod:`fedspectral.fed.flower`, above :mod:`fedspectral.pca`): it uses the Flower
adapters' message exchange, a node's privacy policy and the secure sum, which the
PCA algorithms themselves (layer ``pca``) never import.
"""
