"""`fedspectral export`: the trained encoder as a plain state_dict that rebuilds a module
whose outputs equal the run's final global encoder, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedspectral.cli import main
from fedspectral.fed.export import ENCODER_FORMAT, build_encoder, export_encoder, load_encoder
from fedspectral.fed.simulation import Simulation
from fedspectral.fed.validation import load_config
from fedspectral.results import write_results

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "digits_smoke.yaml"


def _train(method: str, out: Path) -> Simulation:
    cfg = load_config(
        SMOKE, [f"method.name={method}", "method.rounds=1", "run.threads=1", "eval.every=1"]
    )
    sim = Simulation(cfg, out_dir=out)
    write_results(sim.run(), out)
    return sim


@pytest.mark.filterwarnings("ignore:partition_by_class")
@pytest.mark.parametrize("method", ["fedsc", "fedavg_byol"])  # plain SSLNet; + predictor, target
def test_exported_encoder_reproduces_the_runs_outputs(method, tmp_path, capsys):
    run = tmp_path / "run"
    sim = _train(method, run)
    assert main(["export", str(run), "--out", str(tmp_path / "encoder.pt")]) == 0
    assert "written to" in capsys.readouterr().out

    blob = torch.load(tmp_path / "encoder.pt", weights_only=True)  # plain tensors + dicts
    assert blob["format"] == ENCODER_FORMAT and blob["round"] == 1 and blob["method"] == method
    assert all(
        k.split(".")[0] in ("backbone", "projector", "input_norm") for k in blob["state_dict"]
    )  # a baseline's predictor / target left out
    by_hand = build_encoder(blob["config"])
    by_hand.load_state_dict(blob["state_dict"])
    enc = load_encoder(tmp_path / "encoder.pt")

    x = torch.rand(16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    ref = sim.net.eval()  # the runner loads the final global weights before its last eval
    with torch.no_grad():
        h_ref, z_ref = ref.encode(x)
        for net in (enc, by_hand.eval()):
            h, z = net.encode(x)
            assert torch.equal(h, h_ref) and torch.equal(z, z_ref)
    # and the exported weights are the trained ones, not the initialisation
    init = build_encoder(blob["config"]).state_dict()
    assert any(not torch.equal(init[k], v) for k, v in blob["state_dict"].items())


def test_export_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        export_encoder(tmp_path / "nope", tmp_path / "e.pt")
    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match="no config.yaml"):
        export_encoder(tmp_path / "run", tmp_path / "e.pt")
    (tmp_path / "run" / "config.yaml").write_text(SMOKE.read_text())
    with pytest.raises(ValueError, match="no checkpoint.pt"):
        export_encoder(tmp_path / "run", tmp_path / "e.pt")
    with pytest.raises(ValueError, match="not a fedspectral-encoder/1"):
        torch.save({"a": torch.zeros(1)}, tmp_path / "x.pt")
        load_encoder(tmp_path / "x.pt")
    assert not (tmp_path / "e.pt").exists()


def test_a_bad_encoder_file_is_named_not_cast_or_leaked(tmp_path):
    """Integer weights are refused (load_state_dict would cast them into the float
    parameters silently); a pickle payload, a truncated file and a config that lacks a
    key are ValueErrors naming the file, not UnpicklingError/EOFError/KeyError."""
    import pickle

    from fedspectral.fed.export import ENCODER_FORMAT

    cfg = load_config(SMOKE, ["method.rounds=1"])
    from fedspectral.config import to_dict

    net = build_encoder(to_dict(cfg))
    good = {"format": ENCODER_FORMAT, "config": to_dict(cfg), "state_dict": net.state_dict()}
    torch.save(good, tmp_path / "ok.pt")
    load_encoder(tmp_path / "ok.pt")  # the control: a real export loads
    ints = dict(good, state_dict={k: v.to(torch.int32) for k, v in net.state_dict().items()})
    torch.save(ints, tmp_path / "int.pt")
    with pytest.raises(ValueError, match="is torch.int32, the model of its config holds"):
        load_encoder(tmp_path / "int.pt")
    (tmp_path / "pickle.pt").write_bytes(pickle.dumps(print))
    with pytest.raises(ValueError, match="cannot read encoder file"):
        load_encoder(tmp_path / "pickle.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "ok.pt").read_bytes()[:100])
    with pytest.raises(ValueError, match="cannot read encoder file"):
        load_encoder(tmp_path / "cut.pt")
    bad = dict(good, config={k: v for k, v in to_dict(cfg).items() if k != "model"})
    torch.save(bad, tmp_path / "cfg.pt")
    with pytest.raises(ValueError, match="holds an invalid config"):
        load_encoder(tmp_path / "cfg.pt")
