"""A refused configuration value is a :class:`ConfigError` that carries its key: callers
point at the key (a YAML line, the Flower run-config key) by reading ``key``, never by
parsing the message."""

from __future__ import annotations

import pickle

import pytest

from fedspectral.config import ConfigError, from_dict, to_dict
from fedspectral.config_checks import bad
from fedspectral.fed.validation import load_config, validate


def _cfg(**sections):
    d = to_dict(from_dict({}))
    for section, values in sections.items():
        d[section].update(values)
    return from_dict(d)


def test_bad_carries_key_value_and_why_and_keeps_its_message():
    e = bad("optim.lr", -1.0, "must be a finite number > 0")
    assert isinstance(e, ValueError)
    assert (e.key, e.value, e.why, e.keys) == (
        "optim.lr",
        -1.0,
        "must be a finite number > 0",
        ("optim.lr",),
    )
    assert str(e) == "config optim.lr=-1.0: must be a finite number > 0"


def test_a_config_error_survives_pickling_and_rewording():
    e = ConfigError(
        "optim.lr", 2.0, "x", message="config optim.lr=2.0, ...: x", also=("optim.weight_decay",)
    )
    for back in (pickle.loads(pickle.dumps(e)), e.reworded("file f: " + str(e))):
        assert (back.key, back.value, back.why, back.keys) == (e.key, 2.0, "x", e.keys)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


@pytest.mark.parametrize(
    ("sections", "key"),
    [
        ({"optim": {"lr": -1.0}}, "optim.lr"),
        ({"optim": {"lr": 2.0, "weight_decay": 0.6}}, "optim.lr"),  # a check of two keys
        ({"method": {"rounds": 10**9}}, "method.rounds"),  # a size bound
        (
            {"method": {"name": "fedsc", "params": {"alpha_start": 2.0}}},
            "method.params.alpha_start",
        ),
        ({"dp": {"enabled": False, "epsilon": 2.0}}, "dp.enabled"),
    ],
)
def test_validation_refuses_with_the_key(sections, key):
    with pytest.raises(ConfigError) as err:
        validate(_cfg(**sections))
    assert err.value.key == key


@pytest.mark.parametrize(
    ("d", "key"),
    [
        ({"optim": {"lr": "fast"}}, "optim.lr"),  # a type
        ({"optim": {"speed": 1}}, "optim.speed"),  # an unknown key
        ({"name": "a/b"}, "name"),
    ],
)
def test_reading_refuses_with_the_key(d, key):
    with pytest.raises(ConfigError) as err:
        from_dict(d)
    assert err.value.key == key


def test_a_file_error_names_the_line_of_its_key_or_of_the_section_holding_it(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        "name: x\nmethod:\n  name: fedsc\n  params:\n    alpha_start: 2.0\noptim:\n  lr: -1.0\n"
    )
    with pytest.raises(ConfigError, match=r"optim.lr=-1.0: .*line 7\)$") as err:
        load_config(f)
    assert err.value.key == "optim.lr"
    with pytest.raises(ConfigError, match=r"method.params.alpha_start=.*line 4\)$"):
        load_config(f, ["optim.lr=0.1"])  # the file has method.params (line 4), not deeper
    with pytest.raises(ConfigError, match=r"optim.lr=-2.0: [^(]*$"):  # an override: no line
        load_config(f, ["optim.lr=-2.0", "method.params.alpha_start=0.5"])
