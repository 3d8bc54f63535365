r"""``flower-supernode`` with a short idle poll: ``python -m fedspectral.fed.flower.supernode``.

Flower 1.42's SuperNode (``flwr.supernode.start_client_internal``) pulls messages from
the SuperLink in a loop and, when none is waiting, sleeps a fixed **3 s** before it asks
again; it waits for a reply, and for a message's objects, in fixed 0.5 s sleeps.  No
option or environment variable changes these intervals.  A node that has just answered
a phase therefore picks the next phase's message up 1.5 s later on average (3 s at
worst), and a FedSC round has two phases: on a loopback deployment of
``configs/digits_smoke.yaml`` that is most of a round (see
``benchmarks/flower_overhead.py --deployment``).

This launcher runs Flower's own ``flower-supernode`` entry point, unchanged, in this
process, with one difference: every sleep of that module's polling loop is capped at
``--idle-poll`` seconds (default 0.2).  The cap replaces the module's reference to
:mod:`time` with a copy whose ``sleep`` is capped; nothing else of Flower is touched,
and a Flower whose module no longer sleeps through ``time.sleep`` makes the launcher
refuse to start rather than run uncapped silently.  Everything else (TLS, SuperNode
authentication, ``--node-config``, the isolation modes) is Flower's::

    python -m fedspectral.fed.flower.supernode [--idle-poll 0.2] --superlink HOST:PORT ...

A shorter poll costs one ``PullMessages`` call to the SuperLink per interval while
the node is idle.
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable

__all__ = ["DEFAULT_IDLE_POLL", "cap_sleeps", "capped_time", "main"]

#: seconds: the longest a patched SuperNode sleeps between two polls
DEFAULT_IDLE_POLL = 0.2


def capped_time(cap: float, sleep: Callable[[float], None] = time.sleep) -> types.ModuleType:
    """A stand-in for the :mod:`time` module whose ``sleep(s)`` sleeps ``min(s, cap)``
    (through ``sleep``); every other attribute is :mod:`time`'s own."""
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not 0 < cap <= 3:
        raise ValueError(f"idle poll must be a number of seconds in (0, 3], got {cap!r}")
    stand_in = types.ModuleType("time")
    stand_in.__dict__.update({k: v for k, v in vars(time).items() if not k.startswith("__")})

    def capped(seconds: float) -> None:
        sleep(min(float(seconds), float(cap)))

    stand_in.sleep = capped
    return stand_in


def cap_sleeps(cap: float) -> types.ModuleType:
    """Cap the sleeps of Flower's SuperNode loop at ``cap`` seconds; return its module."""
    from flwr.supernode import start_client_internal as loop

    if getattr(loop, "time", None) is not time:
        raise RuntimeError("flwr.supernode.start_client_internal no longer sleeps through "
                           "the time module: this Flower is not the one the idle-poll cap "
                           "was written for (run flower-supernode instead)")
    loop.time = capped_time(cap)
    return loop


def _pop_idle_poll(argv: list[str]) -> tuple[float, list[str]]:
    rest, value = [], str(DEFAULT_IDLE_POLL)
    it = iter(argv)
    for arg in it:
        if arg == "--idle-poll":
            value = next(it, "")
        elif arg.startswith("--idle-poll="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    try:
        cap = float(value)
    except ValueError:
        raise ValueError(f"--idle-poll must be a number of seconds in (0, 3], got "
                         f"{value!r}") from None
    return cap, rest


def main(argv: list[str] | None = None) -> None:
    """Parse ``--idle-poll``, cap the sleeps, then run ``flower-supernode`` on the rest."""
    try:
        cap, rest = _pop_idle_poll(list(sys.argv[1:] if argv is None else argv))
        capped_time(cap)  # validates
    except ValueError as exc:
        print(f"python -m fedspectral.fed.flower.supernode: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    cap_sleeps(cap)
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *rest]
    flower_supernode()


if __name__ == "__main__":
    main()
