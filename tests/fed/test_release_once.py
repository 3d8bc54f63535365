"""One release, parsed once (issue 47, deliverable 1): a reply carries its release as the
object; the ``release.*`` wire keys are that object's serialisation, written and parsed in
one place (:class:`~fedspectral.fed.protocol.Payload`), and every ledger entry the round
loop, the node's client-level DP share and the distributed Gaussian make comes from a
mechanism object.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from fedspectral.fed.protocol import Payload
from fedspectral.fed.records import RELEASE_KEYS, PhaseRelease
from fedspectral.fed.releases import record_release
from fedspectral.privacy import PrivacyLedger
from fedspectral.privacy.gaussian_shares import distributed_gaussian
from fedspectral.privacy.mechanism import Gaussian

SRC = Path(__file__).resolve().parents[2] / "src" / "fedspectral"
REL = PhaseRelease("toy/mean", 0.7, 0.25, "replace_one", count=3, threat="fallback", values=12)


def test_a_payload_writes_its_release_as_the_wire_keys_and_parses_them_once() -> None:
    sent = Payload(arrays={"x": np.zeros(2)}, config={"other": 1}, release=REL)
    assert {k: sent.config[k] for k in REL.config()} == REL.config()
    assert sent.config["other"] == 1
    got = Payload(arrays=dict(sent.arrays), config=dict(sent.config))  # as decoded
    assert got.release is not None
    assert got.release.config() == REL.config()
    assert got.release.values is None  # not part of the report
    assert Payload(config={"other": 1}).release is None


def test_a_malformed_release_report_is_an_undecodable_reply() -> None:
    """A reply reporting σ without its sensitivity is refused where it is parsed (the
    Flower decoder turns it into the client's failure), never recorded half-read."""
    from fedspectral.fed.flower.apps.records import payload_to_recorddict

    with pytest.raises(ValueError, match="malformed release report"):
        Payload(config={"release.sigma": 1.0})
    from flwr.app import ConfigRecord

    rd = payload_to_recorddict(Payload(), phase="p", round=1)
    rd["config"] = ConfigRecord({"release.sigma": 1.0})

    class _Reply:
        content = rd

        def has_error(self) -> bool:
            return False

    from fedspectral.fed.flower.apps.records import decode_replies

    out = decode_replies({7: _Reply()}, {7: "client-0"})
    assert isinstance(out["client-0"], ValueError)


def test_the_wire_round_trip_keeps_the_release() -> None:
    from fedspectral.fed.flower.apps.records import payload_from_recorddict, payload_to_recorddict

    back = payload_from_recorddict(payload_to_recorddict(Payload(release=REL), phase="p", round=1))
    assert back.release is not None and back.release.config() == REL.config()


def test_the_ledger_entry_of_an_object_and_of_its_keys_is_the_same() -> None:
    a, b = PrivacyLedger(), PrivacyLedger()
    ea = record_release(a, "client-0", REL, 4)
    eb = record_release(b, "client-0", REL.config(), 4)
    assert ea == eb
    assert (ea.sigma, ea.sensitivity, ea.count, ea.neighbouring, ea.threat, ea.step) == (
        0.7,
        0.25,
        3,
        "replace_one",
        "fallback",
        4,
    )


def test_only_the_payload_and_the_release_record_name_the_wire_keys() -> None:
    """No module besides ``fed/records.py`` (where the keys are defined) and
    ``fed/protocol.py`` (the payload that writes and parses them) spells a ``release.*``
    key: a second reader of the wire form could disagree with the object."""
    keys = set(RELEASE_KEYS) | {"release.threat"}
    readers = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in keys:
                readers.append(rel)
    assert sorted(set(readers)) == ["fed/protocol.py", "fed/records.py"]


def test_a_release_of_a_mechanism_object_keeps_its_numbers() -> None:
    mech = Gaussian(1.5, 0.5, "add_remove")
    rel = PhaseRelease.of(mech, "m", count=2, threat="secagg", values=7)
    assert (rel.sigma, rel.sensitivity, rel.neighbouring, rel.count, rel.threat, rel.values) == (
        1.5,
        0.5,
        "add_remove",
        2,
        "secagg",
        7,
    )
    assert rel.gaussian == mech


def test_the_distributed_gaussians_shares_are_mechanism_objects() -> None:
    noise = distributed_gaussian(1.0, 1e-5, 2.0**0.5, 3)
    share, secagg = noise.share(), noise.secagg(5)
    assert (share.sigma, share.sensitivity) == (noise.share_sigma, noise.sensitivity)
    assert secagg.sigma == noise.secagg_sigma(5)
    with pytest.raises(ValueError, match="must abort"):
        noise.secagg(2)


def test_the_client_level_share_entry_and_noise_come_from_one_mechanism() -> None:
    from fedspectral.fed.flower.node.client_dp import (
        privatise_update,
        share_mechanism,
        share_release,
    )

    entry = share_release("client-1", 3, 2.0, 0.5, values=4)
    assert (entry.sigma, entry.sensitivity, entry.neighbouring, entry.unit) == (
        0.5,
        2.0,
        "add_remove",
        "client",
    )
    ref = {"a": np.zeros(4, dtype=np.float32)}
    reply = Payload.with_weights({"a": np.full(4, 0.1, dtype=np.float32)})
    out = privatise_update(reply, ref, 2.0, 0.5, np.random.default_rng(3))
    want = share_mechanism(2.0, 0.5).add(
        np.full(4, 0.1, dtype=np.float32).astype(np.float64), np.random.default_rng(3)
    )
    assert np.array_equal(out.arrays["w.a"], want.astype(np.float32))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("release.sigma", True),  # a bool is not a noise scale (float(True) == 1.0)
        ("release.sigma", "0.5"),
        ("release.sigma", float("nan")),
        ("release.sensitivity", False),
        ("release.count", 2.5),  # never truncated to 2
        ("release.count", True),
        ("release.mechanism", 7),  # a name, not a number made text
        ("release.neighbouring", 1),
    ],
)
def test_a_release_report_of_the_wrong_type_is_refused_where_it_is_parsed(key, value) -> None:
    """A reply whose report holds a bool, text, NaN or a fraction where a number belongs,
    or a number where a name belongs, is undecodable: before, ``float``/``int``/``str``
    turned ``True`` into σ = 1, 2.5 into 2 releases and 7 into a mechanism "7"."""
    cfg = {**REL.config(), key: value}
    with pytest.raises(ValueError, match="malformed release report"):
        Payload(config=cfg)
    loose = PhaseRelease(  # what the old parse made of it
        str(cfg["release.mechanism"]),
        float(cfg["release.sigma"]),
        float(cfg["release.sensitivity"]),
        str(cfg["release.neighbouring"]),
        int(cfg["release.count"]),
    )
    assert loose is not None  # accepted silently by the weakened parse
