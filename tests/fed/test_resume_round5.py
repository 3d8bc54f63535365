"""Resume must not lie (issue 48, item 8): a checkpoint edited by hand, its digest
recomputed (``save_checkpoint`` does it for anyone), reads as a valid file.  Each attack
below works on a weakened runner (the check monkeypatched away: the resumed run reports
a smaller ε, or writes a NaN as a measurement) and is refused by the real one, with an
error naming the checkpoint file (``fedspectral.fed.ledger_check``,
``RoundRecord.from_dict``)."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from fedspectral.config import ExperimentConfig, save_config
from fedspectral.fed import ledger_check, records
from fedspectral.fed.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_fingerprint,
    save_checkpoint,
)
from fedspectral.fed.simulation import Simulation
from fedspectral.results import write_results


def _cfg() -> ExperimentConfig:
    cfg = ExperimentConfig(name="resume-r5")
    cfg.data.dataset = "digits"
    cfg.data.max_train = 300
    cfg.partition.num_clients = 5
    cfg.partition.classes_per_client = 2
    cfg.model.width = 4
    cfg.model.projector_hidden = 16
    cfg.model.projector_out = 8
    cfg.method.name = "fedsc"
    cfg.method.rounds = 2
    cfg.method.clients_per_round = 2
    cfg.method.params = {"share_views": 2, "alpha": "linear"}
    cfg.optim.batch_size = 32
    cfg.eval.every = 1
    cfg.eval.knn_k = 5
    cfg.eval.test_size = 100
    cfg.run.progress = False
    cfg.run.threads = 1
    cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 4.0, 1e-3
    return cfg


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 2-round DP run: its folder and its results."""
    out = tmp_path_factory.mktemp("finished")
    res = Simulation(_cfg(), out_dir=out).run()
    write_results(res, out)
    return out, res


def _edited(finished, tmp_path, edit):
    """A copy of the finished run's folder whose checkpoint state went through ``edit``
    and was saved again with a valid digest (what anyone can do)."""
    src, _ = finished
    out = tmp_path / "run"
    shutil.copytree(src, out)
    ck = out / "checkpoint.pt"
    fp = read_fingerprint(ck)
    state = load_checkpoint(ck, fp)
    edit(state)
    save_checkpoint(ck, state, fp)
    return out


def _weaken_ledger_check(monkeypatch):
    monkeypatch.setattr(ledger_check, "check_ledger", lambda *a, **k: None)
    monkeypatch.setattr(ledger_check, "check_client_sizes", lambda *a, **k: None)


def _drop_round_1(state):
    state["ledger"]["releases"] = [r for r in state["ledger"]["releases"] if r["step"] != 1]


def test_a_resumed_run_cannot_forget_round_1s_releases(finished, tmp_path, monkeypatch):
    _, full = finished
    out = _edited(finished, tmp_path, _drop_round_1)
    with monkeypatch.context() as m:  # the attack, on a runner without the check
        _weaken_ledger_check(m)
        weak = Simulation(_cfg(), out_dir=out).run(resume=True)
    assert weak["privacy"]["releases"] < full["privacy"]["releases"]
    assert weak["privacy"]["epsilon_rdp"] < full["privacy"]["epsilon_rdp"] - 0.1
    with pytest.raises(CheckpointError, match=r"no release of client-\d in round 1") as err:
        Simulation(_cfg(), out_dir=out).run(resume=True)
    assert str(out / "checkpoint.pt") in str(err.value)


def test_forgetting_releases_is_refused_even_with_the_records_edited_to_match(
    finished, tmp_path, monkeypatch
):
    """Round 1's releases dropped and its share phase made to have asked nobody: the
    ledger's ε is below what the last round's record reported."""

    def edit(state):
        _drop_round_1(state)
        share = state["records"][0]["phases"]["share"]
        share.update(participants=[], bytes_down={}, bytes_up={}, releases_sent=0)
        state["records"][0]["bytes_down"] = {c: 1 for c in state["records"][0]["sampled"]}
        state["records"][0]["bytes_up"] = {c: 1 for c in state["records"][0]["sampled"]}
        for k in ("bytes_down", "bytes_up"):
            state["records"][0][f"{k}_total"] = sum(state["records"][0][k].values())

    _, full = finished
    out = _edited(finished, tmp_path, edit)
    with monkeypatch.context() as m:  # the record-level checks alone let it through
        m.setattr(ledger_check, "_check_reported_epsilon", lambda *a: None)
        weak = Simulation(_cfg(), out_dir=out).run(resume=True)
    assert weak["privacy"]["epsilon_rdp"] < full["privacy"]["epsilon_rdp"] - 0.1
    with pytest.raises(CheckpointError, match=r"epsilon after round 2 is .* below the"):
        Simulation(_cfg(), out_dir=out).run(resume=True)


def test_a_ledger_sigma_above_the_configs_calibration_is_refused(finished, tmp_path, monkeypatch):
    _, full = finished

    def edit(state):
        for r in state["ledger"]["releases"]:
            r["sigma"] *= 10

    out = _edited(finished, tmp_path, edit)
    with monkeypatch.context() as m:
        _weaken_ledger_check(m)
        weak = Simulation(_cfg(), out_dir=out).run(resume=True)
    assert weak["privacy"]["epsilon_rdp"] < full["privacy"]["epsilon_rdp"] / 5
    sigma = full["privacy"]["ledger"]["releases"][0]["sigma"]
    with pytest.raises(CheckpointError) as err:
        Simulation(_cfg(), out_dir=out).run(resume=True)
    msg = str(err.value)
    assert f"sigma={sigma * 10!r}" in msg and f"calibrates sigma={sigma!r}" in msg
    assert "too small" in msg and str(out / "checkpoint.pt") in msg


def test_client_sizes_edited_in_the_state_are_refused_once_the_data_are_loaded(finished, tmp_path):
    """The calibration checked above depends on the sizes: they are the data's."""

    def edit(state):
        sizes = state["server"]["info"]["client_sizes"]
        sizes["client-0"] *= 10

    out = _edited(finished, tmp_path, edit)
    with pytest.raises(CheckpointError, match=r"client-0 \d+ samples, but the data give"):
        Simulation(_cfg(), out_dir=out).run(resume=True)


def test_a_nan_in_a_checkpoints_records_never_reaches_results_json(finished, tmp_path, monkeypatch):
    def edit(state):
        state["records"][0]["knn_projector"] = math.nan

    out = _edited(finished, tmp_path, edit)
    with monkeypatch.context() as m:  # without the checks, NaN is written as a measurement
        m.setattr(records, "_bad_values", lambda values: None)
        weak = Simulation(_cfg(), out_dir=out).run(resume=True)
        m.setattr("fedspectral.results._first_nan", lambda obj, where="": None)
        write_results(weak, out)
    assert json.loads((out / "results.json").read_text())["records"][0]["knn_projector"] == "nan"
    with pytest.raises(CheckpointError, match=r"round 1 has the value knn_projector=nan"):
        Simulation(_cfg(), out_dir=out).run(resume=True)
    # and the writer refuses a NaN however it got there, writing nothing
    (out / "results.json").unlink()
    with pytest.raises(ValueError, match=r"NaN at records\[0\]\.knn_projector"):
        write_results(weak, out)
    assert not (out / "results.json").exists()


def test_results_json_is_strict_json(finished):
    out, _ = finished

    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    json.loads((out / "results.json").read_text(), parse_constant=refuse)


def test_the_cli_refuses_an_edited_checkpoint_in_one_line(finished, tmp_path, capsys):
    from fedspectral import cli

    out = _edited(finished, tmp_path, _drop_round_1)
    save_config(_cfg(), tmp_path / "cfg.yaml")
    rc = cli.main(["train", "--config", str(tmp_path / "cfg.yaml"), "--out", str(out), "--resume"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith("fedspectral train: error: checkpoint ")
    assert "no release of client-" in err and "Traceback" not in err


def test_a_client_level_ledger_that_forgot_releases_is_refused_on_resume() -> None:
    """Client-level DP's ledger (server-side noise): the rounds' records report its ε; a
    resumed ledger whose round-1 releases were removed would report less."""
    from fedspectral.fed.flower.node.client_dp import ClientDP
    from fedspectral.fed.records import PhaseRecord, RoundRecord
    from fedspectral.kinds import PhaseKind
    from fedspectral.privacy import PrivacyLedger

    ids = ("client-0", "client-1")
    ran = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, placement="server")
    ledger = PrivacyLedger(unit="client")
    ran.bind(ledger)
    recs = []
    for rnd in (1, 2):
        ran.release(rnd, list(ids))
        train = PhaseRecord(
            PhaseKind.TRAIN, ids, {}, {}, {}, 0.1, 0.1, {"epsilon_client_dp": ran.epsilon()}
        )
        recs.append(RoundRecord(rnd, ids, {"train": train}, {}, {}, {"seconds_round": 0.1}))
    full = ran.epsilon()
    edited = PrivacyLedger.from_dict(
        {
            **ledger.to_dict(),
            "releases": [r for r in ledger.to_dict()["releases"] if r["step"] != 1],
        }
    )
    resumed = ClientDP(clipping_norm=0.5, noise_multiplier=1.5, delta=1e-5, placement="server")
    resumed.bind(edited)  # weakened: bound, not checked
    assert resumed.epsilon() < full
    with pytest.raises(ValueError, match="round 1 reported client-level releases"):
        resumed.check_resumed(recs)
    resumed.bind(PrivacyLedger.from_dict(ledger.to_dict()))
    resumed.check_resumed(recs)  # the ledger as written passes
