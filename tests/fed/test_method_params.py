"""Typed method parameters and the config validated once.

Every method declares its parameters as a frozen dataclass (``Method.Params``): each field's
type and constraint.  For every field of every registered method, a value of the wrong type
and a value outside the declared constraint are refused by ``validate`` with a
``ValueError`` naming the key; the defaults pass.  A validated config is a ``ValidConfig``
that later layers take as it is -- unless it was changed after the check.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from fedspectral.config import ExperimentConfig, ValidConfig, is_valid, thaw
from fedspectral.config_checks import MethodParams, Rule
from fedspectral.fed.methods import METHODS, method_class
from fedspectral.fed.validation import ensure_valid, validate


def _cfg(method: str, **params: object) -> ExperimentConfig:
    cfg = ExperimentConfig()
    cfg.data.dataset = "digits"
    cfg.partition.num_clients = 5
    cfg.partition.classes_per_client = 2
    cfg.method.name = method
    cfg.method.rounds = 2
    cfg.method.params = dict(params)
    if method_class(method).pillar == "pca":  # one round, each user's epsilon
        cfg.method.rounds, cfg.dp.enabled, cfg.dp.epsilon = 1, True, 1.0
    return cfg


def _fields() -> list[tuple[str, dataclasses.Field]]:
    return [(m, f) for m in sorted(METHODS) for f in dataclasses.fields(method_class(m).Params)]


def _out_of_rule(rule: Rule, tp: object) -> object:
    """A value of the field's type that breaks ``rule``."""
    if rule.choices is not None:
        return "not-a-choice"
    integer = int in typing.get_args(tp) or tp is int
    if rule.high is not None:
        return int(rule.high) + 1 if integer else rule.high + 0.5
    return int(rule.low) - 1 if integer else rule.low - 0.5


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_declares_a_frozen_params_dataclass_whose_defaults_pass(name):
    cls = method_class(name)
    assert issubclass(cls.Params, MethodParams) and cls.Params is not MethodParams
    assert dataclasses.is_dataclass(cls.Params)
    p = cls.Params()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.__setattr__(dataclasses.fields(p)[0].name, None)
    done = validate(_cfg(name))
    assert done.method.params == cls.default_params == p.to_dict()


@pytest.mark.parametrize("name, f", _fields(), ids=lambda x: getattr(x, "name", x))
def test_a_wrong_type_is_refused_naming_the_key(name, f):
    with pytest.raises(ValueError, match=rf"method\.params\.{f.name} must be .*got \[1\]"):
        validate(_cfg(name, **{f.name: [1]}))


@pytest.mark.parametrize(
    "name, f",
    [(m, f) for m, f in _fields() if "rule" in f.metadata],
    ids=lambda x: getattr(x, "name", x),
)
def test_a_value_outside_its_declared_constraint_is_refused_naming_the_key(name, f):
    tp = typing.get_type_hints(method_class(name).Params)[f.name]
    bad = _out_of_rule(f.metadata["rule"], tp)
    with pytest.raises(ValueError, match=rf"config method\.params\.{f.name}={bad!r}: must"):
        validate(_cfg(name, **{f.name: bad}))


def test_the_rule_messages_say_the_constraint():
    assert "must lie in [0, 1]" in str(_refusal("fedsc", alpha_end=1.5))
    assert "must lie in (0, 1]" in str(_refusal("fedsc", server_lr=0.0))
    assert "must be an integer >= 1" in str(_refusal("fedsc", share_views=0))
    assert "must be a finite number >= 0.001" in str(_refusal("fedx", temperature=float("inf")))
    assert "must be a finite number > 0" in str(_refusal("fedu", threshold=float("inf")))
    assert "must be one of ('js'" in str(_refusal("fedx", relational_form="kl"))
    # an int where a float is declared is a float; a float where an int is: refused
    assert validate(_cfg("fedca", align_weight=2)).method.params["align_weight"] == 2.0
    assert "must be int or null" in str(_refusal("fedca", dict_size=1.5))


def _refusal(name: str, **params: object) -> ValueError:
    with pytest.raises(ValueError) as info:
        validate(_cfg(name, **params))
    return info.value


def test_a_validated_config_is_taken_as_it_is_and_cannot_change(monkeypatch):
    done = validate(_cfg("fedsc", mu=2))
    assert isinstance(done, ValidConfig) and is_valid(done)
    assert done == validate(done) and done.method.params["mu"] == 2.0
    calls = []
    monkeypatch.setattr("fedspectral.fed.validation.check_sections", lambda *a: calls.append(a))
    again = ensure_valid(done)  # no second check: the config itself (frozen)
    assert calls == [] and again is done and is_valid(again)
    method = method_class("fedsc")(done)  # nor in a method's constructor
    assert method.params.mu == 2.0 and calls == []
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"optim\.lr"):
        done.optim.lr = -1.0  # frozen: a change is a new config ...
    changed = thaw(done)
    changed.optim.lr = -1.0
    assert not is_valid(changed) and is_valid(done)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"config optim\.lr=-1\.0: must be a finite number > 0"):
        ensure_valid(changed)  # ... checked again


def test_secure_fedsc_is_its_own_protocol_built_from_the_same_config():
    from fedspectral.fed.methods import build_method
    from fedspectral.fed.methods.fedsc import FedSC
    from fedspectral.fed.methods.fedsc_secure import SecureFedSC

    # the registry chooses the protocol from the parameters (FedSC has no __new__)
    plain = build_method(validate(_cfg("fedsc")))
    secure = build_method(validate(_cfg("fedsc", secure_aggregation=True)))
    assert type(plain) is FedSC and type(secure) is SecureFedSC
    assert method_class("fedsc") is FedSC
    assert method_class("fedsc", {"secure_aggregation": True}) is SecureFedSC
    assert method_class("fedsc", {"secure_aggregation": 1}) is FedSC  # a bool, not truthy
    with pytest.raises(ValueError, match="secure_aggregation.*build_method"):
        FedSC(validate(_cfg("fedsc", secure_aggregation=True)))  # the plain protocol
    assert (plain.secure, secure.secure) == (False, True)
    assert plain.phase_kind("share") == "query" and secure.phase_kind("share") == "secure_sum"
    with pytest.raises(ValueError, match="secure_aggregation"):
        SecureFedSC(validate(_cfg("fedsc")))  # the secure protocol on a plain config
