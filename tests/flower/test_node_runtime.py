"""The node runtime (Flower's ``process`` isolation mode) without processes: which
ClientApp it runs, what a failure leaves behind, and its parent check.

The runtime itself serves every loopback deployment test (``LocalDeployment``
starts each SuperNode with ``--isolation process`` and a runtime beside it)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.cli.build import build_fab_from_disk
from flwr.common.constant import ErrorCode, SubStatus
from flwr.supercore.fab import Fab

from fedspectral.fed.flower.deploy.node_runtime import CLIENT_APP, NodeRuntime, alive

REPO = Path(__file__).resolve().parents[2]
# flwr's FAB builder reads .gitignore with pathspec's deprecated pattern name
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")


class RecordingApp:
    """Stands for the ClientApp: records the call, marks the state, maybe raises."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self, message: Message, context: Context) -> Message:
        self.calls += 1
        context.state["touched"] = ConfigRecord({"by": "app"})
        if self.fail:
            raise ValueError("handler failed")
        return Message(RecordDict({"ok": ConfigRecord({"v": 1})}), reply_to=message)


def _fab(app_dir: Path) -> Fab:
    return Fab("0" * 64, build_fab_from_disk(app_dir), {})


def _task() -> tuple[Message, Context]:
    msg = Message(RecordDict(), dst_node_id=1, message_type="query")
    ctx = Context(
        run_id=1, node_id=1, node_config={"partition-id": 0}, state=RecordDict(), run_config={}
    )
    return msg, ctx


def _foreign_app(tmp_path: Path) -> Path:
    text = (REPO / "flower" / "pyproject.toml").read_text()
    assert f'clientapp = "{CLIENT_APP}"' in text
    (tmp_path / "pyproject.toml").write_text(
        text.replace(f'clientapp = "{CLIENT_APP}"', 'clientapp = "evil_client:app"')
    )
    (tmp_path / "evil_client.py").write_text("app = None\n")
    return tmp_path


def test_the_node_runs_its_own_client_app_only(tmp_path, task_identity) -> None:
    app = RecordingApp()
    rt = NodeRuntime("127.0.0.1:9094", app=app)
    msg, ctx = _task()
    reply, ctx2, status, _ = rt.handle(msg, ctx, _fab(REPO / "flower"))
    assert app.calls == 1 and status == SubStatus.COMPLETED and not reply.has_error()
    assert "touched" in ctx2.state
    # a server shipping another ClientApp in its FAB: refused, the app is not called
    msg, ctx = _task()
    reply, ctx2, status, details = rt.handle(msg, ctx, _fab(_foreign_app(tmp_path)))
    assert app.calls == 1 and status == SubStatus.FAILED
    assert reply.has_error() and reply.error.code == ErrorCode.LOAD_CLIENT_APP_EXCEPTION
    assert "evil_client:app" in reply.error.reason and CLIENT_APP in details
    assert "touched" not in ctx2.state


def test_a_failing_client_app_leaves_the_node_state_as_it_was(task_identity) -> None:
    rt = NodeRuntime("127.0.0.1:9094", app=RecordingApp(fail=True))
    msg, ctx = _task()
    ctx.state["kept"] = ConfigRecord({"x": 1})
    reply, ctx2, status, _ = rt.handle(msg, ctx, _fab(REPO / "flower"))
    assert status == SubStatus.FAILED
    assert reply.has_error() and reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert "handler failed" in reply.error.reason  # the app's own (data-free) reason
    assert "touched" not in ctx2.state and dict(ctx2.state["kept"]) == {"x": 1}


def test_a_finished_parent_counts_as_gone_even_as_a_zombie() -> None:
    assert alive(os.getpid())
    p = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(p.pid)  # exited, not yet reaped: a zombie
    p.wait()
    assert not alive(p.pid)


@pytest.mark.parametrize("app_dir", ["flower", "tests/flower/hostile_app"])
def test_the_apps_of_this_repository_name_the_node_client_app(app_dir) -> None:
    from fedspectral.fed.flower.deploy.node_runtime import _fab_client_app

    assert _fab_client_app(_fab(REPO / app_dir)) == CLIENT_APP
