"""The Flower app's run-config keys -> the experiment, in process (no Flower run).

The run configuration is fused exactly as Flower fuses it (``flwr.common.config``: the
app's ``[tool.flwr.app.config]`` defaults, then the ``--run-config`` string parsed by
Flower's own parser), then mapped by
:func:`fedspectral.fed.flower.apps.run_config.experiment_config`.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

from fedspectral.config import to_dict
from fedspectral.fed.flower.apps.run_config import APP_KEYS, KEYS, experiment_config
from fedspectral.fed.flower.apps.runner import RoundLog, format_round
from fedspectral.fed.records import PhaseRecord, RoundRecord
from fedspectral.kinds import PhaseKind

REPO = Path(__file__).resolve().parents[2]
YAML = REPO / "configs" / "digits_smoke.yaml"


def _defaults() -> dict:
    doc = tomllib.loads((REPO / "flower" / "pyproject.toml").read_text())
    return flatten_dict(doc["tool"]["flwr"]["app"]["config"])


def _run_config(cli: str) -> tuple[dict, set[str]]:
    """``--run-config CLI`` as Flower fuses it, and the keys given explicitly."""
    override = parse_config_args([cli])
    return fuse_dicts(_defaults(), override), set(override)


def _field(cfg, path: str):
    section, name = path.split(".")
    return to_dict(cfg)[section][name]


def test_the_app_declares_exactly_the_keys_it_reads() -> None:
    assert set(_defaults()) == set(KEYS) | APP_KEYS
    assert not set(KEYS) & APP_KEYS


def test_the_pyproject_defaults_are_the_experiment() -> None:
    rc = _defaults()
    cfg = experiment_config(rc)
    for key, path in KEYS.items():
        want = None if key in ("clients-per-round", "dp-sigma") else rc[key]
        assert _field(cfg, path) == want, key
    # and they are what a fresh `flwr run flower/` needs: digits (no download), as many
    # clients as Flower's default local simulation has SuperNodes (2), DP on (a node's
    # default policy refuses a non-private release)
    assert (cfg.data.dataset, cfg.partition.num_clients, cfg.dp.enabled) == ("digits", 2, True)


# one value per key, each different from the pyproject default and valid with the rest
CHANGED = {
    "num-server-rounds": 7,
    "method": "fedavg_sc",
    "dataset": "digits",
    "num-clients": 5,
    "partition": "iid",
    "classes-per-client": 1,
    "clients-per-round": 1,
    "local-epochs": 2,
    "lr": 0.125,
    "batch-size": 32,
    "dp": False,
    "dp-epsilon": 2.5,
    "dp-sigma": 0.75,
    "dp-delta": 1e-6,
    "dp-accountant": "pld",
    "eval-every": 4,
    "seed": 9,
}


@pytest.mark.parametrize("key", sorted(KEYS))
def test_each_key_sets_its_own_field_and_no_other(key) -> None:
    assert set(CHANGED) == set(KEYS)
    base = experiment_config(_defaults())
    value = CHANGED[key]
    if key == "dataset":  # only digits needs no download; check the mapping on a copy
        rc = {**_defaults(), "dataset": "fashion_mnist", "classes-per-client": 1, "num-clients": 10}
        cfg = experiment_config(rc)
        assert cfg.data.dataset == "fashion_mnist"
        return
    rc, explicit = {**_defaults(), key: value}, {key}
    if key == "dp-sigma":
        rc["dp-epsilon"] = 0.0
    cfg = experiment_config(rc, explicit)
    assert _field(cfg, KEYS[key]) == value
    changed = {p for p in KEYS.values() if _field(cfg, p) != _field(base, p)}
    also = {
        "dp-sigma": {"dp.epsilon"},
        "dp": {"dp.epsilon"},
        "method": {"dp.enabled", "dp.epsilon"},
    }.get(key, set())
    assert changed == {KEYS[key]} | also


def test_the_default_dp_applies_to_the_methods_that_accept_it() -> None:
    from fedspectral.fed.methods import dp_methods, ssl_methods

    dp = dp_methods()  # read from the method classes (their Params.uses_dp)
    assert dp == {"fedsc", "ldp_pca", "distributed_pca"}

    accept = set()
    for name in ssl_methods():  # the training app's methods
        rc, explicit = _run_config(f'method="{name}" dp=true')
        try:
            experiment_config(rc, explicit)
            accept.add(name)
        except ValueError as exc:
            assert "DP-CalR" in str(exc) or "views" in str(exc), exc
        # not asked for, DP is off for a method that refuses it, on for the others
        cfg = experiment_config(*_run_config(f'method="{name}"'))
        assert cfg.dp.enabled == (name in dp)
    assert accept == set(dp) & set(ssl_methods())


def test_flwr_run_config_overrides_reach_the_experiment() -> None:
    rc, explicit = _run_config("num-server-rounds=2 lr=0.5 dp-epsilon=1.5 num-clients=4")
    cfg = experiment_config(rc, explicit)
    assert (cfg.method.rounds, cfg.optim.lr, cfg.dp.epsilon, cfg.partition.num_clients) == (
        2,
        0.5,
        1.5,
        4,
    )
    with pytest.raises(ValueError, match="not present"):  # Flower refuses a typo itself
        _run_config("num-rounds=2")


def test_a_yaml_base_keeps_its_values_unless_a_key_is_given() -> None:
    rc, explicit = _run_config(f'config="{YAML}" lr=0.2')
    cfg = experiment_config(rc, explicit)
    # digits_smoke.yaml: 5 clients of 2 classes, 2 rounds, no DP; only lr replaced
    assert (cfg.partition.num_clients, cfg.partition.classes_per_client) == (5, 2)
    assert (cfg.method.rounds, cfg.dp.enabled, cfg.optim.lr) == (2, False, 0.2)
    assert cfg.name == "digits_smoke"
    # another method on that base starts from its own default parameters
    other = experiment_config(*_run_config(f'config="{YAML}" method="fedavg_byol"'))
    assert other.method.name == "fedavg_byol" and "mu" not in other.method.params
    # without knowing what was explicit, every key applies (the app's defaults win)
    every = experiment_config(rc)
    assert (every.partition.num_clients, every.method.rounds) == (2, 3)


def test_set_applies_last_and_zero_means_unset() -> None:
    rc, explicit = _run_config(
        'clients-per-round=0 dp-epsilon=0 dp-sigma=0.5 set="model.width=16;method.rounds=4"'
    )
    cfg = experiment_config(rc, explicit)
    assert (cfg.method.clients_per_round, cfg.dp.epsilon, cfg.dp.sigma) == (None, None, 0.5)
    assert (cfg.model.width, cfg.method.rounds) == (16, 4)


@pytest.mark.parametrize(
    ("cli", "named"),
    [
        ("num-server-rounds=0", "num-server-rounds"),
        ("num-server-rounds=2.5", "num-server-rounds"),
        ("lr=-1.0", "lr"),
        ('method="fedsgd"', "method"),
        ("dp-epsilon=-3.0", "dp-epsilon"),
        ("dp=false dp-epsilon=2.0", "dp"),  # contradictory: refused, not silently dropped
    ],
)
def test_a_bad_value_names_its_run_config_key(cli, named) -> None:
    rc, explicit = _run_config(cli)
    with pytest.raises(ValueError, match=f"run config {named}="):
        experiment_config(rc, explicit)


def test_bad_config_path_and_set_item_are_refused() -> None:
    with pytest.raises((FileNotFoundError, ValueError), match="no-such.yaml"):
        experiment_config({**_defaults(), "config": "/no/such/no-such.yaml"})
    with pytest.raises(ValueError, match="section.key=value"):
        experiment_config({**_defaults(), "set": "width16"})


def test_round_log_line_carries_replies_failures_metrics_and_epsilon() -> None:
    rec = RoundRecord(
        round=2,
        sampled=("client-0", "client-1"),
        phases={
            "share": _phase(["client-0", "client-1"], {}),
            "train": _phase(
                ["client-0", "client-1"],
                {"client-1": "no reply"},
                metrics={"train_loss": 1.23456},
                kind=PhaseKind.TRAIN,  # the loss is read from the phase of kind train
            ),
        },
        bytes_down={},
        bytes_up={},
        values={
            "knn_projector": 0.5,
            "knn_backbone": 0.625,
            "epsilon_rdp": 1.875,
            "seconds_round": 3.25,
        },
    )
    line = format_round(rec, 5, 1e-5)
    assert line == (
        "round 2/5 share 2/2 train 1/2 loss=1.2346 knn_projector=0.5000 knn_backbone=0.6250 "
        "eps=1.875 (delta=1e-05) 3.2s | failed in train: client-1: no reply"
    )
    got: list = []
    sim = type("S", (), {"cfg": experiment_config(_defaults())})()
    sim.state = type("St", (), {"initial": {"knn_projector": 0.25, "knn_backbone": 0.5}})()
    log = RoundLog(log=lambda level, fmt, *a: got.append((level, fmt % a)))
    log.on_round_end(sim, 2, rec)
    log.on_round_end(sim, 2, rec)  # round 0 is logged once, before the first round's line
    first = format_round(rec, 3, 1e-5)  # the run's 3 rounds
    zero = "round 0/3 (untrained) knn_projector=0.2500 knn_backbone=0.5000"
    assert got == [(20, zero), (20, first), (20, first)]  # INFO
    got.clear()
    log.on_results(
        sim,
        {"rounds_done": 3, "final": {"knn_backbone": 0.625}, "initial": {"knn_backbone": 0.5}},
    )
    assert got == [
        (20, "fedspectral: done, 3 rounds knn_backbone=0.6250 (round 0: 0.5000, +0.1250)")
    ]
    got.clear()
    no_gain = {"rounds_done": 3, "final": {"knn_backbone": 0.5}, "initial": {"knn_backbone": 0.5}}
    log.on_results(sim, no_gain)
    assert got[1][0] == 30  # WARNING: no gain, and why (the base experiment: a smoke run)
    assert got[1][1].startswith("fedspectral: no knn_backbone gain over round 0")
    assert "a smoke run: see the note at its start" in got[1][1]  # the note once


def _phase(asked, failed, contributors=None, metrics=None, kind=PhaseKind.QUERY):
    return PhaseRecord(
        kind=kind if contributors is None else PhaseKind.SECURE_SUM,
        participants=tuple(asked),
        failures=dict(failed),
        bytes_down={},
        bytes_up={},
        seconds=0.0,
        seconds_clients=0.0,
        metrics=metrics or {},
        contributors=None if contributors is None else tuple(contributors),
    )


@pytest.mark.parametrize(
    ("phases", "void"),
    [
        # FedSC whose share phase every node refuses would train as FedAvg+SC: stopped
        (
            {
                "share": _phase(["c0", "c1"], {"c0": "PolicyRefusal: x", "c1": "PolicyRefusal: x"}),
                "train": _phase(["c0", "c1"], {}),
            },
            "share",
        ),
        ({"train": _phase(["c0", "c1"], {"c0": "no reply", "c1": "boom"})}, "train"),
        # one node answered: non-participation of the other, the run goes on
        ({"train": _phase(["c0", "c1"], {"c1": "no reply"})}, None),
        # a secure sum that aborted with too few survivors (not every node failed): goes on
        (
            {
                "share": _phase(
                    ["c0", "c1", "c2"],
                    {"c0": "no contribution", "c1": "x", "c2": "x", "*": "SecAggAborted"},
                    contributors=[],
                )
            },
            None,
        ),
        # every client refused a secure sum itself: stopped
        (
            {"share": _phase(["c0", "c1"], {"c0": "x", "c1": "y", "*": "A"}, contributors=[])},
            "share",
        ),
        ({"share": _phase([], {})}, None),  # nobody asked (budgets): nothing refused
    ],
)
def test_a_phase_every_node_refused_stops_the_run_with_their_reasons(phases, void) -> None:
    from fedspectral.fed.flower.apps.runner import VoidPhaseCheck

    sim = type("S", (), {"method": type("M", (), {"name": "fedsc"})()})()
    rec = RoundRecord(4, (), phases, {}, {})
    if void is None:
        assert VoidPhaseCheck().on_round_end(sim, 4, rec) is False
        return
    with pytest.raises(RuntimeError, match=f"round 4: every client asked in fedsc's '{void}'") as e:
        VoidPhaseCheck().on_round_end(sim, 4, rec)
    for why in phases[void].failures.values():
        assert why in str(e.value)


def test_defaults_are_the_apps_pyproject_defaults() -> None:
    from fedspectral.fed.flower.apps.run_config import DEFAULTS, run_value

    rc = _defaults()
    assert rc == DEFAULTS
    assert {k: type(v) for k, v in DEFAULTS.items()} == {k: type(v) for k, v in rc.items()}
    assert {k: run_value(rc, k) for k in rc} == rc


@pytest.mark.parametrize(
    ("cli", "named"),
    [
        ("dp-seed=1.5", "dp-seed=1.5: must be an integer"),
        ("pca-k=2.7", "pca-k=2.7: must be an integer"),
        ("min-nodes=true", "min-nodes=bool True: must be an integer"),
        ('resume="false"', "resume='false': must be true or false"),
        ('lr="0.1"', "lr='0.1': must be a number"),
        ("num-server-rounds=2.5", "num-server-rounds=2.5: must be an integer"),
        ("dp-noise-multiplier=-1.0", "dp-noise-multiplier=-1.0: must be >= 0"),
        ("round-timeout=0.0", "round-timeout=0.0: must be > 0"),
        ("dp-noise-multiplier=1.0", "dp-clip=0.0: client-level DP"),
        ("dp-clip=1.0", "dp-clip=1.0: has no effect without client-level DP"),
        ('dp-placement="client"', "dp-placement='client': has no effect"),
        ('dp-noise-multiplier=1.0 dp-clip=1.0 dp-placement="node"', "dp-placement='node'"),
        ("task=1", "task=1: must be a string"),
    ],
)
def test_each_value_is_parsed_where_it_enters_naming_its_key(cli, named) -> None:
    from fedspectral.fed.flower.apps.run_config import client_dp_options, run_value

    rc, _ = _run_config(cli)
    with pytest.raises(ValueError, match=f"^run config {named}".replace("(", r"\(")):
        for key in rc:
            run_value(rc, key)
        client_dp_options(rc)


def test_client_level_dp_options_on_their_own_keys() -> None:
    from fedspectral.fed.flower.apps.run_config import client_dp_options

    assert client_dp_options(_defaults()) is None
    rc, _ = _run_config('dp-noise-multiplier=1 dp-clip=2 dp-seed=3 dp-placement="client"')
    assert client_dp_options(rc) == {
        "clipping_norm": 2.0,
        "noise_multiplier": 1.0,
        "seed": 3,
        "placement": "client",
    }


def test_an_undeclared_key_is_refused_naming_it_and_the_keys_that_exist() -> None:
    from fedspectral.fed.flower.apps.run_config import DEFAULTS, check_keys

    check_keys(_defaults())
    with pytest.raises(
        ValueError, match=r"run config key num-rounds \(did you mean num-server-rounds\?\) not"
    ) as e:
        check_keys({**_defaults(), "num-rounds": 2})
    assert all(k in str(e.value) for k in DEFAULTS)
    check_keys({**_defaults(), "pause-after-round": 1}, known={"pause-after-round"})


def test_the_ldp_pca_query_refuses_a_truncated_value() -> None:
    from fedspectral.pca.flower.app import _query

    assert _query({})["k"] == 2
    with pytest.raises(ValueError, match=r"run config pca-k=2\.7: must be an integer"):
        _query({"pca-k": 2.7})
    with pytest.raises(ValueError, match=r"run config pca-users=0: must be >= 1"):
        _query({"pca-users": 0})


def test_the_engine_progress_bar_follows_the_server_app_rounds(tmp_path, capsys) -> None:
    from fedspectral.fed.flower.apps.engine import _RoundProgress
    from fedspectral.fed.validation import with_output

    cfg = with_output(experiment_config(_defaults()), progress=True)
    path = tmp_path / "progress.jsonl"
    bar = _RoundProgress(path, cfg, "fedsc")
    bar.poll()  # no file yet: Flower is starting
    assert bar.bar.n == 0
    one = _phase(["c0"], {}, metrics={"train_loss": 2.5}, kind=PhaseKind.TRAIN)
    rec = RoundRecord(1, ("c0",), {"train": one}, {}, {}, {"seconds_round": 1.0}).to_dict()
    path.write_text(json.dumps(rec) + "\n" + '{"round": 2, "pha')  # round 2 half written
    bar.poll()
    assert (bar.bar.n, bar.bar.postfix) == (1, "loss=2.500")
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "round": 2}) + "\n")
    bar.close()
    assert bar.bar.n == 2
    assert "2/3" in capsys.readouterr().err


def test_a_config_file_that_does_not_parse_is_named_with_its_key(tmp_path) -> None:
    bad = tmp_path / "exp.toml"
    bad.write_text("a = [\n")
    with pytest.raises(ValueError, match=f"^run config config='{bad}': config file '{bad}'"):
        experiment_config({**_defaults(), "config": str(bad)})
