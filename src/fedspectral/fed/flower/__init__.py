"""Flower adapters: the same methods as the in-process runner, over Flower's Message API.

* :mod:`.records` -- a :class:`~fedspectral.fed.protocol.Payload` as Flower records;
* :mod:`.server_app` / :mod:`.client_app` -- ``ServerApp`` / ``ClientApp`` for any
  :class:`~fedspectral.fed.protocol.Method` (the adapter moves messages only);
* :mod:`.run_config` -- the app's run-config keys (``flwr run flower/ --run-config``)
  -> the experiment configuration;
* :mod:`.engine` -- ``run_flower_simulation(config)`` (Flower's simulation runtime:
  ``flwr run`` against a local simulation SuperLink);
* :mod:`.pca_app` -- locally private PCA collection as a Flower app;
* :mod:`.deploy` -- a SuperLink and SuperNodes on loopback, for tests and demos;
* :mod:`.node_runtime` -- a deployed node's ClientApp runtime (``--isolation process``):
  one long-lived process for all the node's messages.

Submodules are imported on demand (importing Flower is not free).
"""
