"""The SuperNode launcher: Flower's flower-supernode with its polling sleeps capped."""

from __future__ import annotations

import time

import pytest

from fedspectral.fed.flower import supernode


def test_capped_time_caps_sleep_and_keeps_the_rest_of_time() -> None:
    slept: list[float] = []
    stand_in = supernode.capped_time(0.2, sleep=slept.append)
    stand_in.sleep(3)      # Flower's idle poll
    stand_in.sleep(0.5)    # its reply wait
    stand_in.sleep(0.05)   # shorter than the cap: unchanged
    assert slept == [0.2, 0.2, 0.05]
    assert stand_in.monotonic is time.monotonic and stand_in.time is time.time


@pytest.mark.parametrize("bad", [0, -1, 3.5, True, "0.2", float("nan")])
def test_capped_time_refuses_a_bad_cap(bad) -> None:
    with pytest.raises(ValueError, match="idle poll"):
        supernode.capped_time(bad)


def test_cap_sleeps_patches_only_the_supernode_loop(monkeypatch) -> None:
    from flwr.supernode import start_client_internal as loop

    monkeypatch.setattr(loop, "time", time)  # restored after the test
    patched = supernode.cap_sleeps(0.1)
    assert patched is loop and loop.time is not time and time.sleep is not loop.time.sleep
    # a Flower whose loop no longer sleeps through the time module is refused
    with pytest.raises(RuntimeError, match="no longer sleeps"):
        supernode.cap_sleeps(0.1)


def test_launcher_parses_idle_poll_and_passes_the_rest() -> None:
    assert supernode._pop_idle_poll(["--insecure", "--idle-poll", "0.5", "--port", "1"]) \
        == (0.5, ["--insecure", "--port", "1"])
    assert supernode._pop_idle_poll(["--idle-poll=1"]) == (1.0, [])
    assert supernode._pop_idle_poll([]) == (supernode.DEFAULT_IDLE_POLL, [])


@pytest.mark.parametrize("argv", [["--idle-poll", "fast"], ["--idle-poll", "9"],
                                  ["--idle-poll"]])
def test_launcher_refuses_a_bad_idle_poll_before_starting(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        supernode.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "idle" in err and repr(argv[-1] if len(argv) > 1 else "")[1:-1] in err
