"""Config fingerprints are stable: the background grid and ``--resume`` reuse finished
runs and checkpoints by :func:`fedspectral.fed.validation.config_fingerprint`, so a refactor, a
renamed value or a new default must leave the fingerprint of every shipped config as it
was.  The values were computed with commit e6574a7 (every ``configs/*.yaml``, completed
by ``validate``; and with an explicit ``method.params.pairing``).  The CPU protocol's
``configs/fmnist_*.yaml`` changed deliberately (width 4 and the converged probe): their
earlier fingerprints are pinned with those two overrides, which also shows that
``eval.probe_solver: adam``, a key added later at the value of the earlier computation,
leaves a fingerprint as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedspectral.config import to_dict
from fedspectral.fed.validation import config_fingerprint, load_config, validate

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

FINGERPRINTS = {
    ("cifar100_fedavg_sc.yaml", ()): "725595af22292fca",
    ("cifar100_fedsc.yaml", ()): "92df76185598cefd",
    ("cifar10_fedavg_sc.yaml", ()): "9acadf534338967d",
    ("cifar10_fedsc.yaml", ()): "fe1808cdab4c4db6",
    ("digits_smoke.yaml", ()): "92dfd31e6470f9f2",
    ("fmnist_central_sc.yaml", ()): "8369320bb0335b3b",
    ("fmnist_fedavg_sc.yaml", ()): "fdb08bdab2855512",
    ("fmnist_fedsc.yaml", ()): "b5870a24adcf12c2",
    ("ldp_pca.yaml", ()): "23b4f7f37c8720a2",  # added with the PCA methods (issue 47)
    ("svhn_fedavg_sc.yaml", ()): "971cef80125aff35",
    ("svhn_fedsc.yaml", ()): "2784c0c6eee4449c",
    ("digits_smoke.yaml", ("method.params.pairing=seed",)): "92dfd31e6470f9f2",
    ("digits_smoke.yaml", ("method.params.pairing=all",)): "7713f15421bb5ab7",
    ("fmnist_fedavg_sc.yaml", ("method.params.pairing=all",)): "d8863f13da50385b",
    ("fmnist_central_sc.yaml", ("method.params.pairing=seed",)): "8369320bb0335b3b",
    # "paper" is the new name of the pairing that was called "seed": same computation
    ("digits_smoke.yaml", ("method.params.pairing=paper",)): "92dfd31e6470f9f2",
    ("fmnist_central_sc.yaml", ("method.params.pairing=paper",)): "8369320bb0335b3b",
    # the CPU protocol before width 4 and the converged probe
    ("fmnist_central_sc.yaml", ("model.width=8", "eval.probe_solver=adam")): "13874c2d44e0c629",
    ("fmnist_fedavg_sc.yaml", ("model.width=8", "eval.probe_solver=adam")): "a7b26fa6832d0883",
    ("fmnist_fedsc.yaml", ("model.width=8", "eval.probe_solver=adam")): "2cbe9e1869d38e81",
}


def test_every_shipped_config_is_pinned() -> None:
    assert {p.name for p in CONFIGS.glob("*.yaml")} == {name for name, _ in FINGERPRINTS}


@pytest.mark.parametrize("name, overrides", list(FINGERPRINTS))
def test_fingerprint_is_unchanged(name: str, overrides: tuple[str, ...]) -> None:
    cfg = validate(load_config(str(CONFIGS / name), list(overrides)))
    assert config_fingerprint(to_dict(cfg)) == FINGERPRINTS[name, overrides]


@pytest.mark.parametrize("given", ["seed", "paper"])
def test_the_old_pairing_name_completes_to_the_new_one(given: str) -> None:
    cfg = validate(
        load_config(str(CONFIGS / "fmnist_fedsc.yaml"), [f"method.params.pairing={given}"])
    )
    assert cfg.method.params["pairing"] == "paper"
    with pytest.raises(ValueError, match="pairing"):
        validate(load_config(str(CONFIGS / "fmnist_fedsc.yaml"), ["method.params.pairing=odd"]))
