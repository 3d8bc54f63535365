"""``fedspectral reproduce fedsc --scale paper``: what it needs, its GPU estimate, its
refusal when the data or the GPU is missing, and the same code path end to end on a tiny
stand-in (digits, CPU, one round).

Budget: about 10 s (four one-round runs on digits); the rest are plans.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedspectral.cli import main
from fedspectral.data import missing_files
from fedspectral.experiments import reproduce as rp
from fedspectral.experiments.reproduce.needs import (
    check_requirements,
    forward_flops,
    gpu_estimate,
    requirements,
    run_flops,
)

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"

# the stand-in for configs/cifar10_{fedsc,fedavg_sc}.yaml: the paper-scale grid's code
# path on scikit-learn's digits (no file), on the CPU, one round
TINY = """\
name: tiny_standin
data: {dataset: digits}
partition: {scheme: class, num_clients: 10, classes_per_client: 1}
model: {backbone: small_cnn, norm: group, width: 2, projector_hidden: 16, projector_out: 8}
method: {name: fedsc, rounds: 1, local_epochs: 1, views: 1}
optim: {lr: 0.05, batch_size: 64}
eval: {every: 1, knn_k: 10, test_size: null}
run: {seed: 0, progress: false, device: cpu, threads: 1}
"""


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    root = tmp_path / "data"
    monkeypatch.setenv("FEDSPECTRAL_DATA", str(root))
    return root


def _paper_plan(out, seeds=5, **kw):
    return rp.build_plan("fedsc", "paper", configs=CONFIGS, out=out, seeds=seeds, **kw)


def test_missing_files_names_what_load_dataset_reads(tmp_path):
    folder, missing, source = missing_files("cifar10", "test", tmp_path)
    assert folder == tmp_path / "cifar-10-batches-py"
    assert missing == ["test_batch", "batches.meta"] and "cifar-10-python.tar.gz" in source
    (folder).mkdir()
    (folder / "test_batch").write_bytes(b"x")
    assert missing_files("cifar10", "test", tmp_path)[1] == ["batches.meta"]
    assert missing_files("svhn", "train", tmp_path)[1] == ["train_32x32.mat"]
    assert missing_files("digits", "train", tmp_path)[1] == []
    # a Fashion-MNIST folder with the test files only lacks the train files
    (tmp_path / "t10k-images-idx3-ubyte.gz").write_bytes(b"x")
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(b"x")
    assert missing_files("fashion_mnist", "test", tmp_path)[:2] == (tmp_path, [])
    assert missing_files("fashion_mnist", "train", tmp_path)[1] == [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
    ]
    with pytest.raises(ValueError, match="imagenet"):
        missing_files("imagenet")


def test_requirements_list_every_split_and_the_device(no_data):
    plan = _paper_plan("/nonexistent/p", tier="full", seeds=1)
    reqs = {r.what: r for r in requirements(plan)}
    for d in ("cifar10", "cifar100", "svhn"):
        for split in ("train", "test"):
            r = reqs[f"{d} {split} split"]
            assert not r.ok and str(no_data) in r.where and "data.root" in r.fix
    dev = reqs["device 'cuda' (run.device)"]
    import torch

    assert dev.ok == torch.cuda.is_available()


def test_flop_model_counts_the_images_each_phase_processes():
    plan = _paper_plan("/nonexistent/p", seeds=1)
    runs = {(r.setting.key, r.row): r for r in plan.runs}
    full = runs[("cifar10-10x1-full", "fedavg_sc")]
    f = forward_flops(full.config)
    assert 4e9 < f < 7e9  # ResNet-20 widened x8 at 32 x 32: about 2.6 G multiply-adds
    c = full.config
    assert (c.method.rounds, c.method.local_epochs) == (200, 5)
    # 200 rounds x 5 epochs x 50 000 images x 2 views x (forward + backward = 3 forwards)
    assert run_flops(full)["train"] == pytest.approx(200 * 5 * 50_000 * 2 * 3 * f)
    assert run_flops(full)["share"] == 0
    part = runs[("cifar10-10x1-2of10", "fedavg_sc")]
    assert run_flops(part)["train"] == pytest.approx(run_flops(full)["train"] / 5)
    central = runs[("cifar10-10x1-full", "central_sc")]
    assert run_flops(central)["train"] == pytest.approx(run_flops(full)["train"])
    fedsc = runs[("cifar10-10x1-full", "fedsc")]
    p = fedsc.config.method.params
    # every client shares its 5 000 images x V_share views in every round, forward only
    assert run_flops(fedsc)["share"] == pytest.approx(200 * 10 * 5_000 * p["share_views"] * f)
    est = gpu_estimate(plan, 50.0)
    assert est["hours"] == pytest.approx(est["flops"] / 50e12 / 3600)
    assert est["hours"] == pytest.approx(sum(est["runs"].values()))
    assert gpu_estimate(plan, 100.0)["hours"] == pytest.approx(est["hours"] / 2)
    with pytest.raises(ValueError, match="gpu-tflops"):
        gpu_estimate(plan, 0.0)


def test_paper_dry_run_prints_what_it_needs_and_its_cost(no_data, capsys):
    argv = ["reproduce", "fedsc", "--scale", "paper", "--seeds", "5", "--dry-run"]
    assert main([*argv, "--out", "/nonexistent/p"]) == 0
    out = capsys.readouterr().out
    assert "needs (checked on this machine)" in out
    assert "[MISSING] cifar10 train split" in out and "data_batch_1" in out
    assert "GPU hours at 50 TFLOP/s" in out and "fixup_resnet20 5.14 GFLOP" in out
    assert "new 35" in out  # 5 seeds x (3 + 2 FedSC stable) + central: the 10 x 1 core tier
    assert not Path("/nonexistent/p").exists()
    assert main([*argv, "--gpu-tflops", "100", "--out", "/nonexistent/p"]) == 0
    assert "GPU hours at 100 TFLOP/s" in capsys.readouterr().out
    for bad in ("-1", "1e300", "1e-300", "nan"):
        assert main([*argv, "--gpu-tflops", bad, "--out", "/nonexistent/p"]) == 2
        assert "--gpu-tflops must lie in [0.1, 5000]" in capsys.readouterr().err
    # where it does nothing it is refused, not ignored
    cpu = ["reproduce", "fedsc", "--dry-run", "--gpu-tflops", "100", "--out", "/nonexistent/p"]
    assert main(cpu) == 2
    assert "does nothing at --scale cpu" in capsys.readouterr().err
    assert not Path("/nonexistent/p").exists()


def test_paper_run_refuses_missing_data_before_any_folder(no_data, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["reproduce", "fedsc", "--scale", "paper", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedspectral reproduce: error: the paper-scale plan cannot start")
    assert "cifar10 train split" in err and str(no_data / "cifar-10-batches-py") in err
    assert "cifar-10-python.tar.gz" in err
    assert not out.exists() and not no_data.exists()
    with pytest.raises(ValueError, match="cannot start here"):
        check_requirements(_paper_plan(out))


def test_paper_scale_runs_end_to_end_on_a_tiny_stand_in(tmp_path, capsys):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "cifar10_fedsc.yaml").write_text(TINY)
    out = tmp_path / "paper"
    argv = ["reproduce", "fedsc", "--scale", "paper", "--configs", str(configs)]
    argv += ["--methods", "fedsc", "--seeds", "1", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "[ok     ] digits train split" in text and "[ok     ] device 'cpu'" in text
    assert "4 run(s) trained" in text
    for name in ("REPORT.md", "summary.json", "table2.csv", "convergence.png"):
        assert (out / name).is_file(), name
    assert "CIFAR-10" in (out / "REPORT.md").read_text()
    assert main(argv) == 0  # resumable: a rerun trains nothing
    assert "0 run(s) trained, 4 already finished" in capsys.readouterr().out
