"""Config values that must not be taken as given (issue 48, item 9): a seed beyond a
signed 64-bit integer, and a key set twice (the last silently winning).  Each is shown
accepted by a weakened check (monkeypatched away) and refused by the real one, the
error naming the key and the value.  (A key twice in a YAML config file is refused by
the loader itself: ``tests/test_bad_input_cli.py``.)"""

from __future__ import annotations

import pytest

from fedspectral import cli, config, config_checks
from fedspectral.config import ConfigError, ExperimentConfig, apply_overrides
from fedspectral.fed.flower.apps import run_config
from fedspectral.fed.flower.apps.run_config import experiment_config, run_value
from fedspectral.fed.validation import validate

BIG = 2**63  # one more than the largest signed 64-bit integer


def _cfg(**run) -> ExperimentConfig:
    cfg = ExperimentConfig(name="r5")
    cfg.data.dataset = "digits"
    for k, v in run.items():
        setattr(cfg.run, k, v)
    return cfg


def test_a_run_seed_beyond_int64_is_refused(monkeypatch) -> None:
    with monkeypatch.context() as m:  # weakened: the old floor-only check
        m.setattr(config, "check_seed", lambda key, v: None)
        assert validate(_cfg(seed=BIG)).run.seed == BIG
    with pytest.raises(ConfigError, match=rf"config run.seed={BIG}: must be an integer in"):
        validate(_cfg(seed=BIG))
    assert validate(_cfg(seed=BIG - 1)).run.seed == BIG - 1
    with pytest.raises(ConfigError, match=r"run.seed=-1"):
        validate(_cfg(seed=-1))
    cfg = _cfg()
    cfg.dp.noise_seed = BIG
    with pytest.raises(ConfigError, match=rf"config dp.noise_seed={BIG}: must be an integer in"):
        validate(cfg)


def test_the_cli_names_a_seed_beyond_int64_in_one_line(tmp_path, capsys) -> None:
    (tmp_path / "c.yaml").write_text(f"name: x\ndata: {{dataset: digits}}\nrun: {{seed: {BIG}}}\n")
    rc = cli.main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert f"run.seed={BIG}" in err and "line 3" in err
    assert not (tmp_path / "o").exists()  # refused before any work


@pytest.mark.parametrize("key", ["seed", "dp-seed", "pca-seed"])
def test_a_run_config_seed_beyond_int64_is_refused(key, monkeypatch) -> None:
    with monkeypatch.context() as m:
        m.setattr(run_config, "UPPER", {})
        assert run_value({key: BIG}, key) == BIG
    with pytest.raises(ValueError, match=rf"run config {key}={BIG}: must be <= 2\*\*63 - 1"):
        run_value({key: BIG}, key)
    assert run_value({key: BIG - 1}, key) == BIG - 1


def test_a_set_key_given_twice_is_refused(tmp_path, capsys, monkeypatch) -> None:
    sets = ["method.rounds=1", "method.rounds=2"]
    # what the check stops: the last silently wins
    assert apply_overrides(_cfg(), sets).method.rounds == 2
    (tmp_path / "c.yaml").write_text("name: x\ndata: {dataset: digits}\n")
    argv = ["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o")]
    rc = cli.main([*argv, "--set", sets[0], "--set", sets[1]])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "--set: key 'method.rounds' is set twice" in err
    assert "'method.rounds=1', then 'method.rounds=2'" in err
    with pytest.raises(ValueError, match="keys overlap"):
        config_checks.check_unique_overrides(["method.params={mu: 1}", "method.params.mu=2"], "x")
    config_checks.check_unique_overrides(["method.rounds=1", "method.rounds_x=2"], "x")


def test_the_run_configs_set_may_not_set_a_key_twice(monkeypatch) -> None:
    rc = {"set": "method.rounds=1; method.rounds=2"}
    with monkeypatch.context() as m:
        m.setattr(run_config, "_check_set_once", lambda *a: None)
        assert experiment_config(rc).method.rounds == 2
    with pytest.raises(ValueError, match=r"run config set: key 'method.rounds' is set twice"):
        experiment_config(rc)
    # a run-config key and a set item for the same config key
    rc = {"seed": 3, "set": "run.seed=5"}
    with monkeypatch.context() as m:
        m.setattr(run_config, "_check_set_once", lambda *a: None)
        assert experiment_config(rc).run.seed == 5
    with pytest.raises(ValueError, match=r"run config seed=3 and set item 'run.seed=5' both set"):
        experiment_config(rc)
    assert experiment_config({"set": "run.seed=5"}).run.seed == 5  # once: fine
