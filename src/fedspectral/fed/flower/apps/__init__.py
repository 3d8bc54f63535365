"""The Flower adapters: the same methods as the in-process runner, over Flower's Message API.

* :mod:`.records` -- a :class:`~fedspectral.fed.protocol.Payload` as Flower records;
* :mod:`.grid` -- waiting for the nodes and one exchange of messages over a ``Grid``;
* :mod:`.server_app` / :mod:`.client_app` -- ``ServerApp`` / ``ClientApp`` for any
  :class:`~fedspectral.fed.protocol.Method` (the adapter moves messages only);
* :mod:`.runner` -- the in-process runner's round loop with a Flower transport;
* :mod:`.run_config` -- the app's run-config keys (``flwr run flower/ --run-config``)
  -> the experiment configuration;
* :mod:`.engine` -- ``run_flower_simulation(config)`` (Flower's simulation runtime:
  ``flwr run`` against a local simulation SuperLink).
"""
