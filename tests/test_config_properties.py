"""Property-based tests (hypothesis) of config loading: any file content and any
``--set`` override gives a validated config or a ValueError/TypeError; nothing else."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fedspectral.config import SECTIONS, apply_overrides, to_dict
from fedspectral.fed.validation import load_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "digits_smoke.yaml"
BAD = (ValueError, TypeError)

_base = to_dict(load_config(SMOKE))
KEYS = [
    "name",
    *(f"{s}.{k}" for s in SECTIONS for k in _base[s]),
    "method.params.mu",
    "method.params.alpha",
    "model.kwargs.depth",
    "optim.bogus",
    "x.y",
    "method.params.a.b",
    "",
    "method",
]
yaml_values = st.one_of(
    st.sampled_from(
        [
            "",
            "[",
            "{",
            "]",
            "null",
            "true",
            "0",
            "-1",
            "1e308",
            "-8",
            "1e-300",
            ".nan",
            ".inf",
            "'x'",
            "[1, 2]",
            "{a: 1}",
            "\t",
            "1e8",
            "100000000",
            "foo",
            "cuda",
            "cpu",
            "0.5",
            "3",
            "fedsc",
            "group",
            "resnet20",
            "!!python/object:os.system [ls]",
            "&a [*a]",
            "\x00",
            "é",
        ]
    ),
    st.text(max_size=8),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@settings(max_examples=150)
@given(st.lists(st.tuples(st.sampled_from(KEYS), yaml_values), min_size=1, max_size=3))
def test_overrides_validate_or_raise_value_or_type_errors(items):
    from fedspectral.fed.validation import validate

    cfg = load_config(SMOKE)
    try:
        out = validate(apply_overrides(cfg, [f"{k}={v}" for k, v in items]))
    except BAD:
        return
    assert out.name and isinstance(out.method.rounds, int) and out.method.rounds >= 1


fragments = st.sampled_from(
    [
        "name: x\n",
        "name:\n",
        "method: {rounds: 2}\n",
        "method:\n\trounds: 2\n",
        "data: [1]\n",
        "model: {width: -8}\n",
        "model: {backbone: foo}\n",
        "run: {device: tpu}\n",
        "- 1\n",
        "? [a]\n: b\n",
        "optim: {lr: 1e30}\n",
        "dp: {enabled: true, sigma: 1e300}\n",
        "---\n",
        "name: &a [*a]\n",
        "!!python/object/apply:os.system ['true']\n",
        "%YAML 1.1\n",
        "{",
        "partition: {num_clients: 0}\n",
        "eval: {every: 0}\n",
        "# comment\n",
        "\n",
        "name: 3\n",
    ]
)


@settings(max_examples=200)
@given(
    st.one_of(
        st.lists(fragments, max_size=4).map(lambda xs: "".join(xs).encode()),
        st.binary(max_size=40),
        st.text(max_size=40).map(str.encode),
    )
)
def test_any_config_file_loads_or_raises_value_or_type_errors(content):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.yaml"
        p.write_bytes(content)
        try:
            cfg = load_config(p)
        except BAD as exc:
            assert "c.yaml" in str(exc) or "config" in str(exc)
            return
    assert cfg.name and cfg.method.rounds >= 1


def test_exponent_floats_that_yaml_reads_as_text_are_floats_once_for_all():
    """PyYAML (YAML 1.1) reads ``1e-3`` (no dot) as text; config keys and method parameters
    undo it through the same helper, and only it: other text stays text."""
    import pytest

    from fedspectral.config import yaml_exponent_float

    assert [yaml_exponent_float(v) for v in ("1e-3", "-4E2", "+2e+1")] == [1e-3, -400.0, 20.0]
    assert [yaml_exponent_float(v) for v in ("0.5", "nan", "inf", "1e", "e3", 1e-3)] == [None] * 6
    cfg = apply_overrides(
        load_config(SMOKE), ["optim.lr=1e-3", "dp.delta=2E-4", "method.params.mu=4e0"]
    )
    assert cfg.optim.lr == 1e-3 and cfg.dp.delta == 2e-4
    from fedspectral.fed.validation import validate

    assert validate(cfg).method.params["mu"] == 4.0
    with pytest.raises(ValueError, match="optim.lr must be float"):
        apply_overrides(cfg, ["optim.lr='0.05'"])  # quoted: text, not a number
