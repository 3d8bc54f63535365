"""The simulation app's components with the toy method registered (tests only).

Copied into a simulation app's folder beside ``toy_method.py``: the ``flwr-simulation``
process (ServerApp) and the Ray actors (ClientApps) import it, so the toy method is
registered in every process of the run, as an installed method module would be.
"""

from toy_method import register_toy

from fedspectral.fed.flower.apps.engine import client_app, server_app

register_toy()

__all__ = ["client_app", "server_app"]
