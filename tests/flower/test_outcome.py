"""A failed Flower run reads as one (issue 46): one ``fedspectral: run FAILED`` line and no
traceback, a misspelt method or key named with the nearest valid one, a node's refusal
sent back as an error reply (no Ray traceback), the folder marked failed and read back by
``fedspectral status``.  In process, without Ray (the whole ``flwr run`` path is
test_flwr_run's)."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest
from flwr.app import Context, Message, RecordDict
from flwr.common.config import flatten_dict

from fedspectral.fed.flower.apps.outcome import (
    QuietFlower,
    RunFailed,
    error_reply_mod,
    mark_failed,
    run_status,
)

REPO = Path(__file__).resolve().parents[2]


def _defaults() -> dict:
    doc = tomllib.loads((REPO / "flower" / "pyproject.toml").read_text())
    return flatten_dict(doc["tool"]["flwr"]["app"]["config"])


def _ctx(**run_config) -> Context:
    return Context(
        run_id=5,
        node_id=1,
        node_config={},
        state=RecordDict(),
        run_config={**_defaults(), **run_config},
    )


def test_a_misspelt_method_fails_in_one_line_naming_the_nearest(monkeypatch) -> None:
    from fedspectral.fed.flower.apps.server_app import make_server_app

    logged: list[tuple[int, str]] = []
    monkeypatch.setattr("flwr.common.log", lambda lvl, fmt, *a: logged.append((lvl, fmt % a)))
    app = make_server_app()
    with pytest.raises(RunFailed, match=r"method='fedcs'.*did you mean 'fedsc'\?") as e:
        app._main(None, _ctx(method="fedcs"))
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert logged == [(logging.ERROR, f"fedspectral: run FAILED: {e.value}")]
    # debug=true: the original exception, with its traceback
    with pytest.raises(ValueError, match="fedcs"):
        make_server_app()._main(None, _ctx(method="fedcs", debug=True))


def test_flowers_log_drops_a_run_failed_traceback_and_the_actor_notice() -> None:
    quiet = QuietFlower()

    def record(msg: str, exc: BaseException | None, *args) -> logging.LogRecord:
        info = (type(exc), exc, None) if exc is not None else None
        return logging.LogRecord("flwr", logging.ERROR, __file__, 1, msg, args, info)

    rec = record("%s raised an exception", RunFailed("round 1: ..."), "Simulation")
    assert quiet.filter(rec) and rec.exc_info is None
    assert "see the fedspectral line above" in rec.getMessage()
    other = record("%s raised an exception", KeyError("a bug"), "Simulation")
    assert quiet.filter(other) and other.exc_info is not None  # a bug keeps its traceback
    assert not quiet.filter(record("Manually terminating %s", None, "ClientAppActor"))


@pytest.mark.usefixtures("task_identity")
def test_a_refusal_is_an_error_reply_not_a_crash() -> None:
    from fedspectral.fed.flower.node.policy import PolicyRefusal

    msg = Message(RecordDict(), dst_node_id=1, message_type="query")
    msg.metadata.__dict__["_message_id"] = "m1"

    def refuse(m, c):
        raise PolicyRefusal("would be released without noise (policy allow-nonprivate: false)")

    reply = error_reply_mod(msg, _ctx(), refuse)
    assert reply.has_error()
    assert reply.error.reason == (
        "PolicyRefusal: would be released without noise (policy allow-nonprivate: false)"
    )
    with pytest.raises(PolicyRefusal):  # debug=true: raised (the node's traceback)
        error_reply_mod(msg, _ctx(debug=True), refuse)
    with pytest.raises(KeyError):  # anything else is a bug, raised as before
        error_reply_mod(msg, _ctx(), lambda m, c: {}["x"])


def test_status_reads_a_run_folder(tmp_path, capsys) -> None:
    from fedspectral.cli import main

    run = tmp_path / "run-1"
    run.mkdir()
    assert run_status(run)[0] == "incomplete"
    assert main(["status", str(run)]) == 3
    assert capsys.readouterr().out.startswith("incomplete: ")
    mark_failed(run, "round 1: every client asked in fedsc's 'share' phase (2) refused")
    assert main(["status", str(run)]) == 1
    assert capsys.readouterr().out.startswith("failed: round 1: every client asked")
    (run / "FAILED").unlink()
    (run / "results.json").write_text('{"rounds_done": 3, "config": {"method": {"rounds": 3}}}')
    assert main(["status", str(run)]) == 0
    assert "completed: 3/3 rounds" in capsys.readouterr().out
    assert main(["status", str(tmp_path / "nope")]) == 2
    assert "no run folder" in capsys.readouterr().err


def test_ldp_pca_writes_a_folder_of_its_own_as_a_training_run(tmp_path, monkeypatch) -> None:
    from fedspectral.fed.flower.apps.server_app import _pca_context

    monkeypatch.chdir(tmp_path)
    ctx = _pca_context(_ctx(task="ldp-pca"))
    assert ctx.run_config["out-dir"] == str(tmp_path / "results" / "flower_app" / "run-5")
    given = _ctx(task="ldp-pca", **{"out-dir": "/somewhere"})
    assert _pca_context(given) is given
    run = tmp_path / "run"
    run.mkdir()
    (run / "ldp_pca.json").write_text("{}")
    assert run_status(run) == (
        "completed",
        f"completed: ldp-pca, results in {str(run / 'ldp_pca.json')!r}",
    )
