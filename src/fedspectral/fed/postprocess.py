r"""Post-processors: privacy applied around a method's ``train`` phases, outside the method.

A :class:`PostProcessor` changes what a ``train`` phase releases without the method
knowing (client-level DP on model updates is one: :class:`~.flower.node.client_dp.ClientDP`,
as pfl-research keeps DP in a backend post-processor and Flower in a strategy wrapper
and a client mod).  The method stays the one the registry built; a runner takes the
post-processor as a constructor argument
(:class:`~fedspectral.fed.simulation.Simulation` and the Flower runner: ``client_dp=``)
and three places apply it, to phases of kind ``"train"`` only:

``on_configure(phase, rnd, state, payloads)`` -- the server, in :func:`~.protocol.run_round`
    after :meth:`Method.configure`: what it asks of the nodes (client-side noise: the clip
    and the share of noise, in each request's config).
``on_reply(payload, rt, handler)`` -- the node, around the method's client handler (the
    in-process transport; a Flower node's ClientApp): ``handler(reference)`` computes
    the reply, which the post-processor may clip and noise before it leaves; what it does
    is read from the request alone, so a node needs no object of the server's.
``on_aggregate(phase, rnd, state, asked, replies, aggregate)`` -- the server, in
    :func:`~.protocol.run_round` in place of the method's fold: ``aggregate(replies)`` is
    :meth:`Method.aggregate`, which the post-processor calls on the replies it prepared
    (server-side noise: clipped) before it adds noise to the new state, and ledgers the
    release.

A node applies its own list of post-processors (a Flower node's:
:data:`fedspectral.fed.flower.node.client_dp.NODE_POST_PROCESSORS`) through the node-side
hooks alone, before any data is read: ``requested(payload)`` (does the request ask for
it), ``check_request(payload)`` (its parameters parsed, or refused naming the key) and
``node_releases(payload, cid, rnd, net, noise)`` (the releases its reply makes, for the
node's ledger); then ``on_reply``.  ``variant`` names the reply manifest its replies
need (:mod:`fedspectral.fed.manifest`).

A post-processor is a :class:`~fedspectral.fed.callbacks.Callback` too: the runner calls
its ``on_state`` (the run's state, fresh or resumed: its client-level ledger) and its
``on_results`` before the caller's callbacks.  Every hook's default changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedspectral.fed.callbacks import Callback

if TYPE_CHECKING:
    from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState
    from fedspectral.privacy import Release

__all__ = ["Aggregate", "Handler", "PostProcessor"]

#: ``aggregate(replies) -> metrics``: the method's fold of a phase's replies into the state
Aggregate = Callable[[Mapping[str, "Payload"]], dict[str, float]]
#: ``handler(reference) -> reply``: the method's client handler; ``reference`` is the weights
#: the request sent, as the node keyed them (``{}`` when the post-processor needs none)
Handler = Callable[[Mapping[str, np.ndarray]], "Payload"]


class PostProcessor(Callback):
    """Base of a post-processor of ``train`` phases: every hook leaves the phase as the
    method makes it (module docstring)."""

    #: the reply manifest a node's reply needs when this post-processor shapes it
    #: (``""``: it never acts on a node)
    variant: ClassVar[str] = ""

    def check(self, method: Method) -> None:
        """Refuse (``ValueError``) a method this post-processor cannot apply to, before
        the run starts."""

    def on_configure(
        self, phase: str, rnd: int, state: ServerState, payloads: Mapping[str, Payload]
    ) -> None:
        """Server: complete the requests of a ``train`` phase (in place) before they go."""

    # -- node side: read from the request alone, before any data ---------------------------
    def requested(self, payload: Payload) -> bool:
        """Node: whether the request ``payload`` asks this post-processor to shape the reply."""
        return False

    def check_request(self, payload: Payload) -> None:
        """Node: refuse (``ValueError``/``TypeError`` naming the key) a request whose
        parameters for this post-processor are not what they must be."""

    def node_releases(
        self, payload: Payload, cid: str, rnd: int, net: Any, noise: str | None
    ) -> list[Release]:
        """Node: the releases the reply to ``payload`` makes once this post-processor shaped
        it (``net``: the node's model; ``noise``: the node's noise mechanism), as the
        node's ledger records them before the computation starts."""
        return []

    def on_reply(self, payload: Payload, rt: ClientRuntime, handler: Handler) -> Payload:
        """Node: the reply to ``payload`` (``handler``'s), as it may leave the node."""
        return handler({})

    def on_aggregate(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        asked: Sequence[str],
        replies: Mapping[str, Payload],
        aggregate: Aggregate,
    ) -> dict[str, float]:
        """Server: fold the replies of the clients ``asked`` that answered into ``state``
        through ``aggregate``; return the phase's metrics."""
        return aggregate(replies)
