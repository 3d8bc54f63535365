"""A training ServerApp that holds between two rounds (tests only).

fedspectral's ``task = "train"`` ServerApp body
(:func:`fedspectral.fed.flower.apps.runner.train_server_main`) with one more callback,
:class:`PauseAfter`: after round ``pause-after-round`` is checkpointed the server writes
``<out-dir>/paused-<round>`` and waits (at most ``node-wait`` s) until that file is
removed, so that a test can act between two rounds deterministically (e.g. kill a
SuperNode); ``resume-round-timeout``, if not 0, then replaces ``round-timeout`` for
the phases after the pause (a short wait for a node the test killed, a long one for
the first, slower, rounds).
"""

from __future__ import annotations

import time
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedspectral.fed.callbacks import Callback
from fedspectral.fed.flower.apps.runner import train_server_main

app = ServerApp()


class PauseAfter(Callback):
    """Hold after round ``rnd`` until ``flag`` is removed (at most ``wait`` s); then give
    the grid transport the timeout ``resume_timeout`` (``None``: unchanged)."""

    def __init__(
        self, rnd: int, flag: Path, wait: float, resume_timeout: float | None = None
    ) -> None:
        self.rnd, self.flag, self.wait = int(rnd), Path(flag), float(wait)
        self.resume_timeout = resume_timeout

    def on_round_end(self, sim, rnd, record) -> None:
        if rnd != self.rnd:
            return
        self.flag.write_text("remove this file to continue\n")
        deadline = time.monotonic() + self.wait
        while self.flag.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.flag.unlink(missing_ok=True)
        if self.resume_timeout is not None and sim.grid_transport is not None:
            sim.grid_transport.timeout = float(self.resume_timeout)


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    rnd = int(rc["pause-after-round"])
    pause = PauseAfter(
        rnd,
        Path(str(rc["out-dir"])) / f"paused-{rnd}",
        wait=float(rc["node-wait"]),
        resume_timeout=float(rc["resume-round-timeout"]) or None,
    )
    train_server_main(grid, context, callbacks=[pause])
