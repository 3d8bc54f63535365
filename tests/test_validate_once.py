"""Validate once, build once (issue 47): a run's config is checked at its entry and
travels as a frozen :class:`~fedspectral.config.ValidConfig`; the method is built once per
run and handed down (the checks before training and the runner share it)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
from unittest import mock

import pytest

import fedspectral.fed.methods as methods
import fedspectral.fed.validation as validation
from fedspectral.config import ExperimentConfig, ValidConfig, is_valid, save_config, thaw, to_dict


def _tiny(dp: bool = False) -> ExperimentConfig:
    """3 clients of sklearn digits, a narrow CNN, 1 round: not validated."""
    cfg = ExperimentConfig(name="validate-once")
    cfg.data.dataset = "digits"
    cfg.data.max_train = 150
    cfg.partition.scheme = "iid"
    cfg.partition.num_clients = 3
    cfg.model.width, cfg.model.projector_hidden, cfg.model.projector_out = 4, 16, 8
    cfg.method.rounds = 1
    cfg.optim.batch_size = 32
    cfg.eval.every = 1
    cfg.eval.test_size = 50
    cfg.eval.knn_k = 5
    cfg.eval.sc_objective = False
    cfg.run.threads = 1
    cfg.run.progress = False
    if dp:
        cfg.dp.enabled, cfg.dp.epsilon, cfg.dp.delta = True, 4.0, 1e-3
    return cfg


@contextlib.contextmanager
def _spies():
    """Spies on the validation work (the section checks) and on the building of a method
    (``Method.__init__``: every method object, whoever builds it and however it imported
    ``build_method``), wrapping the real functions."""
    from fedspectral.fed.protocol import Method

    with (
        mock.patch.object(validation, "check_sections", wraps=validation.check_sections) as checks,
        mock.patch.object(Method, "__init__", autospec=True, side_effect=Method.__init__) as build,
    ):
        yield checks, build


@pytest.mark.parametrize("dp", [False, True], ids=["no-dp", "dp"])
def test_one_run_validates_once_and_builds_its_method_once(tmp_path, dp):
    from fedspectral.experiments.train import run_experiment

    with _spies() as (checks, build):
        res = run_experiment(_tiny(dp), out_dir=tmp_path / "run")
    assert res["rounds_done"] == 1
    assert checks.call_count == 1, "the config is checked once, at the run's entry"
    # the checks before training (model, privacy calibration) and the runner share it
    assert build.call_count == 1, f"build_method called {build.call_count} times"


def test_the_train_command_validates_once_with_out_and_quiet(tmp_path):
    """``fedspectral train CONFIG --out D --quiet``: the file's config is validated when
    it is loaded; ``--out`` and ``--quiet`` keep it valid (no second check)."""
    from fedspectral.experiments import train

    save_config(_tiny(), tmp_path / "tiny.yaml")
    args = argparse.Namespace(
        config=str(tmp_path / "tiny.yaml"),
        overrides=[],
        out=str(tmp_path / "out"),
        quiet=True,
        resume=False,
        engine="inprocess",
        log=[],
    )
    with _spies() as (checks, build), contextlib.redirect_stdout(io.StringIO()):
        assert train.run(args) == 0
    assert checks.call_count == 1 and build.call_count == 1
    assert (tmp_path / "out" / "results.json").is_file()


def test_a_valid_config_is_taken_as_it_is():
    done = validation.validate(_tiny())
    with _spies() as (checks, build):
        assert validation.ensure_valid(done) is done  # not copied, not checked again
        methods.build_method(done)
    assert checks.call_count == 0 and build.call_count == 1
    same = validation.with_output(done, out="elsewhere", progress=True)
    assert is_valid(same) and checks.call_count == 0
    assert (same.run.out, same.run.progress, done.run.out) == ("elsewhere", True, None)
    assert to_dict(thaw(same)) == to_dict(same)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda c: setattr(c, "name", "other"), "name"),
        (lambda c: setattr(c.optim, "lr", -1.0), "optim.lr"),
        (lambda c: setattr(c, "run", c.run), "run"),
        (lambda c: c.method.params.__setitem__("mu", 9.0), "method.params.mu"),
        (lambda c: c.method.params.update(mu=9.0), "method.params"),
        (lambda c: c.model.kwargs.clear(), "model.kwargs"),
        (lambda c: delattr(c.data, "root"), "data.root"),
    ],
)
def test_a_valid_config_refuses_every_change_naming_the_field(change, field):
    done = validation.validate(_tiny())
    before = to_dict(done)
    with pytest.raises(dataclasses.FrozenInstanceError, match=rf"cannot change {field}:"):
        change(done)
    assert to_dict(done) == before and is_valid(done)


def test_a_changed_copy_is_a_plain_config_validated_again():
    done = validation.validate(_tiny())
    for changed in (
        dataclasses.replace(done, name="other"),
        thaw(done),
    ):
        assert type(changed) is ExperimentConfig and not is_valid(changed)
    edited = thaw(done)
    edited.optim.lr = -1.0
    edited.method.params["mu"] = 2.0
    assert done.optim.lr > 0 and done.method.params["mu"] != 2.0  # the original as it was
    with pytest.raises(ValueError, match=r"config optim\.lr=-1\.0"):
        validation.ensure_valid(edited)
    # copies and pickles of a frozen config are frozen and valid
    import copy
    import pickle

    for twin in (copy.deepcopy(done), pickle.loads(pickle.dumps(done))):
        assert isinstance(twin, ValidConfig) and twin == done
        with pytest.raises(dataclasses.FrozenInstanceError, match=r"run\.out"):
            twin.run.out = "x"
