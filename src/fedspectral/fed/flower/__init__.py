"""Flower: the same methods as the in-process runner, over Flower's Message API.

Three subpackages, by concern:

* :mod:`.apps` -- the adapters: the ``ServerApp`` / ``ClientApp`` for any
  :class:`~fedspectral.fed.protocol.Method` (they move messages only), a
  :class:`~fedspectral.fed.protocol.Payload` as Flower records, the app's run-config keys,
  the Flower runner and ``run_flower_simulation(config)`` (Flower's simulation runtime);
* :mod:`.node` -- what protects a node's data: its own privacy policy
  (:mod:`.node.policy`), client-level DP on model updates (:mod:`.node.client_dp`) and
  the secure sum over Flower messages (:mod:`.node.secure_sum`);
* :mod:`.deploy` -- deployment tooling: a SuperLink and SuperNodes on loopback
  (:mod:`.deploy.local`), a deployed node's ClientApp runtime (:mod:`.deploy.node_runtime`)
  and stopping process trees (:mod:`.deploy.processes`).

The LDP-PCA app is beside the PCA pillar, :mod:`fedspectral.pca.flower`.
Submodules are imported on demand (importing Flower is not free).
"""
