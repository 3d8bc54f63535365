"""Bad input on the node's side: policy files that fail closed, and sizes a server sends.

Every case is a clear error naming the file (or the node-config key) before any budget is
spent or any data read -- never a setting silently ignored, never a path that moves with
the working directory, never an allocation the server sized.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_node_policy import APP, _ctx, _pca_query

from fedspectral.fed.flower.node.policy import NodePolicy, PolicyRefusal, state_dir

pytestmark = pytest.mark.usefixtures("task_identity")  # conftest.py


def test_top_level_keys_beside_the_privacy_table_are_an_error(tmp_path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text("max-epsilon = 0.5\n[privacy]\nmax-epsilon-total = 4.0\n")
    with pytest.raises(ValueError, match=r"policy.toml.*'max-epsilon' beside the \[privacy\]"):
        NodePolicy.from_file(f)
    f.write_text("privacy = 3\n")
    with pytest.raises(ValueError, match="'privacy' must be a table"):
        NodePolicy.from_file(f)
    # all at top level, or all under [privacy]: both read
    f.write_text("max-epsilon = 0.5\n")
    assert NodePolicy.from_file(f).max_epsilon == 0.5
    f.write_text("[privacy]\nmax-epsilon = 0.5\n")
    assert NodePolicy.from_file(f).max_epsilon == 0.5


def test_a_relative_ledger_dir_is_the_policy_files_not_the_working_directorys(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "etc").mkdir()
    f = tmp_path / "etc" / "policy.toml"
    f.write_text('[privacy]\nledger-dir = "state/ledgers"\n')
    for cwd in (tmp_path, tmp_path / "etc", Path("/")):  # a restart elsewhere
        monkeypatch.chdir(cwd)
        pol = NodePolicy.from_file(f)
        assert state_dir(pol) == (tmp_path / "etc" / "state" / "ledgers").resolve()
    f.write_text('[privacy]\nledger-dir = "memory"\nsimulation = true\n')
    assert NodePolicy.from_file(f).ledger_dir == "memory"  # simulation only (round 5)
    # a node-config ledger-dir has no file to anchor it: it must be absolute
    with pytest.raises(ValueError, match="policy-ledger-dir 'led' is a relative path"):
        NodePolicy.from_node({"policy-ledger-dir": "led"})
    # nor may the state directory of the environment be relative
    monkeypatch.setenv("FEDSPECTRAL_NODE_STATE", "rel/state")
    with pytest.raises(PolicyRefusal, match="relative path"):
        state_dir(NodePolicy())


def test_unreadable_policy_files_are_named(tmp_path) -> None:
    f = tmp_path / "policy.toml"
    f.write_bytes(b"[privacy]\nmax-epsilon = 1.0 # \xff\xfe\n")
    with pytest.raises(ValueError, match=r"policy.toml' is not UTF-8 text \(invalid byte"):
        NodePolicy.from_file(f)
    f.write_text("[privacy\nmax-epsilon = 1\n")
    with pytest.raises(ValueError, match="policy.toml' is not valid TOML"):
        NodePolicy.from_file(f)
    with pytest.raises(IsADirectoryError, match="is a directory, not a file"):
        NodePolicy.from_file(tmp_path)
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError, match="'/dev/null' is a character device"):
            NodePolicy.from_file("/dev/null")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # would block a reader: refused without opening it
    with pytest.raises(ValueError, match="is a named pipe"):
        NodePolicy.from_file(fifo)
    with pytest.raises(FileNotFoundError, match="not found"):
        NodePolicy.from_file(tmp_path / "absent.toml")
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ValueError, match="more than a policy file may"):
        NodePolicy.from_file(big)
    # the same errors through the node's own lookup (node config, before anything else)
    with pytest.raises(IsADirectoryError):
        NodePolicy.from_node({"privacy-policy": str(tmp_path)})
    # the node's other trust files: the same rule
    from fedspectral.fed.flower.node.secure_sum import load_identity, load_roster

    with pytest.raises(IsADirectoryError, match="secagg-roster .* is a directory"):
        load_roster(tmp_path)
    with pytest.raises(ValueError, match="secagg-identity '/dev/null' is a character device"):
        load_identity("/dev/null")
    bad = tmp_path / "roster.toml"
    bad.write_bytes(b"client-0 = '\xff'\n")
    with pytest.raises(ValueError, match="roster.toml' is not UTF-8"):
        load_roster(bad)
    bad.write_text(f"client-9 = '{'00' * 32}'\n[secagg-roster]\nclient-0 = '{'11' * 32}'\n")
    with pytest.raises(ValueError, match="all at top level or all under"):
        load_roster(bad)


def test_relative_trust_files_are_the_policy_files(tmp_path, monkeypatch) -> None:
    f = tmp_path / "policy.toml"
    f.write_text('secagg-roster = "roster.toml"\nsecagg-identity = "keys/me.pem"\n')
    monkeypatch.chdir("/")
    pol = NodePolicy.from_file(f)
    assert pol.secagg_roster == str(tmp_path.resolve() / "roster.toml")
    assert pol.secagg_identity == str(tmp_path.resolve() / "keys" / "me.pem")


@pytest.mark.parametrize(
    ("over", "node", "match"),
    [
        ({"users": 10**10}, {}, "exceed this node's pca-max-users"),
        ({"users": 5000, "p": 400}, {}, "above this node's pca-max-bytes"),
        ({"p": 10**6, "k": 1}, {}, "exceeds this node's pca-max-dim"),
        ({"users": 50}, {"pca-max-users": 40}, "exceed this node's pca-max-users 40"),
        ({"users": 1.5}, {}, "pca-users must be an integer"),
    ],
)
def test_server_sent_sizes_are_bounded_by_the_node(tmp_path, over, node, match) -> None:
    """A server's ``pca-users = 10**10`` had the node allocate hundreds of GiB."""
    led = tmp_path / "led"
    ctx = _ctx({"policy-ledger-dir": str(led), **node})
    with pytest.raises(PolicyRefusal, match=match):
        APP(_pca_query(**over), ctx)
    assert not list(led.glob("ledger-*.json"))  # refused before any budget was spent


def test_a_declared_user_count_must_be_the_datas(tmp_path) -> None:
    import numpy as np

    np.save(tmp_path / "users.npy", np.full((20, 4), 0.25))
    led = tmp_path / "led"
    cfg = {"policy-ledger-dir": str(led), "pca-data": str(tmp_path / "users.npy")}
    with pytest.raises(ValueError, match="declared, public count"):
        APP(_pca_query(), _ctx({**cfg, "pca-users": 19}))
    assert not list(led.glob("ledger-*.json"))
    out = APP(_pca_query(), _ctx({**cfg, "pca-users": 20}))
    assert out.content.config_records["release"]["users"] == 20
