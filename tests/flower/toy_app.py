"""The simulation app's components with the toy method registered (tests only).

Copied into a simulation app's folder beside ``toy_method.py`` (a Flower app's own
modules are importable in its processes): the ``flwr-simulation`` process imports it
for the ServerApp, and the ClientApp's handler, a function of this module, brings it
into every Ray actor that unpickles the ClientApp -- so the toy method is registered
wherever the run needs it, as an installed method module would be.  Otherwise the
simulation engine's own ServerApp and ClientApp.
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from toy_method import register_toy

from fedspectral.fed.flower.apps import engine

register_toy()
server_app = engine.server_app
client_app = ClientApp()


def _forward(msg: Message, context: Context) -> Message:
    register_toy()  # this process has the toy method (a no-op once registered)
    return engine.client_app(msg, context)


for _category, _action in (("train", None), ("query", None), ("query", "hello")):
    _register = getattr(client_app, _category)
    (_register() if _action is None else _register(_action))(_forward)

__all__ = ["client_app", "server_app"]
