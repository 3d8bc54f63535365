"""A ClientApp that fails on request (tests only): fedspectral's ClientApp, except that a
node raises on the messages its run config lists, before the real handler runs.

``fail`` (run config, ``;``-separated, or the ``fail`` argument): entries
``"client-1|2|train"`` -- client-1 raises on its ``train`` message of round 2; the phase
``*`` matches every message of that round; the stages 1-4 of a secure sum are the phases
``secagg-1`` ... ``secagg-4`` (stage 0 is the ``share`` phase itself).

Used two ways:

* in process, ``FakeGrid(3, app=faulty_client_app(fail=[...]))`` (``test_adapter.py``);
* on Flower's simulation runtime, copied into an app written by
  :func:`fedspectral.fed.flower.apps.engine.write_app` with ``clientapp="faulty_client:app"``
  and ``extra_config={"fail": ...}`` (a Flower app's own modules are importable on
  its nodes; this folder is not).
"""

from __future__ import annotations

from collections.abc import Sequence

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedspectral.fed.flower.apps.client_app import SIMULATION_POLICY, client_id, make_client_app
from fedspectral.fed.flower.apps.records import meta_of

#: the message types fedspectral's ClientApp serves (category, action)
_HANDLERS = (
    ("train", None),
    ("query", None),
    ("query", "hello"),
    ("query", "secagg"),
    ("query", "ldp_pca"),
)


class InjectedFault(RuntimeError):
    """The failure this test ClientApp raises (no data involved)."""


def _where(msg: Message) -> tuple[str, int] | None:
    """(phase, round) of a fedspectral message (``None`` for the handshake)."""
    if msg.metadata.message_type == "query.hello":
        return None
    meta = meta_of(msg.content)
    stage = int(meta.get("secagg-stage", 0))
    phase = str(meta["phase"]) if stage == 0 else f"secagg-{stage}"
    return phase, int(meta["round"])


def faulty_client_app(
    inner: ClientApp | None = None, fail: Sequence[str] | None = None
) -> ClientApp:
    """``inner`` (default: the simulation engine's ClientApp) raising
    :class:`InjectedFault` on the messages ``fail`` lists (``None``: the run config's
    ``fail``), before ``inner`` sees them."""
    inner = inner if inner is not None else make_client_app(policy=SIMULATION_POLICY)

    def fault_mod(msg: Message, context: Context, call_next):
        spec = fail if fail is not None else str(context.run_config.get("fail", "")).split(";")
        where = _where(msg)
        if where is not None:
            cid, (phase, rnd) = client_id(context), where
            for item in (s for s in spec if s):
                c, r, ph = str(item).split("|")
                if c == cid and int(r) == rnd and ph in (phase, "*"):
                    raise InjectedFault(f"injected failure of {cid} in {phase} round {rnd}")
        return call_next(msg, context)

    app = ClientApp(mods=[fault_mod])

    def forward(msg: Message, context: Context) -> Message:
        return inner(msg, context)

    for category, action in _HANDLERS:
        register = getattr(app, category)
        (register() if action is None else register(action))(forward)
    return app


#: the ``clientapp`` component of a simulation app written with ``write_app(...,
#: clientapp="faulty_client:app", extra_config={"fail": ...})``
app = faulty_client_app()
