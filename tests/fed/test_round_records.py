"""The typed records' dict form: the keys and their order results.json has always had, for
each shape a phase takes, and the release report's ``release.*`` keys both ways."""

from __future__ import annotations

import pytest

from fedspectral.fed.records import RELEASE_KEYS, PhaseRecord, PhaseRelease
from fedspectral.fed.releases import release_config
from fedspectral.kinds import PhaseKind

BASE = ["failures", "bytes_down", "bytes_up", "seconds", "seconds_clients", "metrics"]


def _phase(**kw):
    args = dict(
        kind=PhaseKind.TRAIN,
        participants=("a", "b"),
        failures={},
        bytes_down={"a": 1, "b": 1},
        bytes_up={"a": 2},
        seconds=0.5,
        seconds_clients=0.25,
        metrics={"train_loss": 1.0},
    )
    return PhaseRecord(**{**args, **kw})


@pytest.mark.parametrize(
    ("phase", "keys"),
    [
        (_phase(), ["kind", "participants", *BASE]),
        (
            _phase(releases_sent=2, budget_stopped=("c",)),
            ["kind", "participants", *BASE, "releases_sent", "budget_stopped"],
        ),
        (  # every participant stopped by its budget: no exchange ran
            _phase(participants=(), budget_stopped=("a", "b"), bytes_down={}, bytes_up={}),
            ["kind", "participants", "budget_stopped", *BASE],
        ),
        (
            _phase(kind=PhaseKind.SECURE_SUM, contributors=("a",), releases_sent=2),
            ["kind", "participants", "contributors", "aborted", *BASE, "releases_sent"],
        ),
    ],
)
def test_a_phase_writes_its_keys_in_the_order_runs_always_wrote_them(phase, keys):
    d = phase.to_dict()
    assert list(d) == keys
    assert isinstance(d["kind"], str) and type(d["kind"]) is str  # plain JSON strings
    assert PhaseRecord.from_dict(d) == phase


def test_answered_is_the_contributors_of_a_secure_sum_else_who_did_not_fail():
    assert _phase(failures={"b": "no reply"}).answered() == ["a"]
    assert _phase(kind=PhaseKind.SECURE_SUM, contributors=("b",)).answered() == ["b"]


def test_a_release_report_reads_back_and_release_config_is_its_form():
    rel = PhaseRelease("fedsc/dp-calr", 0.5, 0.25, "add_remove", 2, "secagg", values=3)
    cfg = rel.config()
    assert list(cfg) == list(RELEASE_KEYS)
    assert cfg == release_config(0.5, 0.25, "fedsc/dp-calr", "add_remove", 2, "secagg")
    back = PhaseRelease.from_config(cfg)
    assert back is not None and back.config() == cfg and back.values is None
    assert "release.threat" not in PhaseRelease("m", 1.0, 1.0).config()
    assert PhaseRelease.from_config({"loss": 1.0}) is None
    minimal = PhaseRelease.from_config({"release.sigma": 1.0, "release.sensitivity": 2.0})
    assert minimal == PhaseRelease("gaussian", 1.0, 2.0, "zero_out", 1, "any")
