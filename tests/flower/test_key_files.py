"""Key files are written by the one atomic writer (:func:`fedspectral.atomic.atomic_write_bytes`):
a private key is mode 0600 from its first byte, also when it replaces a readable file."""

from __future__ import annotations

import os
import stat

from fedspectral.atomic import current_umask
from fedspectral.fed.flower.deploy.certs import make_node_key, make_tls_certificates
from fedspectral.fed.flower.node.secure_sum import write_identities


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_private_keys_are_0600_and_public_files_are_not_hidden(tmp_path):
    old = tmp_path / "n0.key"
    old.write_text("old")
    old.chmod(0o644)  # a readable key left from before: replaced, not reused
    files = make_tls_certificates(tmp_path) | make_node_key(tmp_path, "n0")
    roster, keys = write_identities(tmp_path, ["client-0", "client-1"])
    assert _mode(files["key"]) == _mode(old) == 0o600
    assert all(_mode(p) == 0o600 for p in keys.values())
    public = 0o666 & ~current_umask()  # as open() makes them
    assert all(_mode(p) == public for p in (files["ca"], files["cert"], files["pub"], roster))
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
