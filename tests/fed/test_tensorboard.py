"""`fedspectral train --log tensorboard`: one scalar per metric and epsilon per round, read
back from the event files with TensorBoard's own reader and compared with results.json."""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

from fedspectral.cli import main
from fedspectral.fed.tensorboard import scalars_of_record, write_tensorboard

pytest.importorskip("tensorboard", reason="the tensorboard extra (in the dev extra)")
from tensorboard.backend.event_processing.event_accumulator import (
    EventAccumulator,
)

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "digits_smoke.yaml")


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.filterwarnings("ignore:partition_by_class")
def test_tensorboard_logs_every_round_and_epsilon(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--config",
                SMOKE,
                "--out",
                str(out),
                "--quiet",
                "--log",
                "tensorboard",
                "--set",
                "run.threads=1",
                "--set",
                "eval.initial=true",
                "--set",
                "dp.enabled=true",
                "--set",
                "dp.epsilon=2.0",
                "--set",
                "dp.delta=1e-3",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    live = _scalars(out / "tensorboard")
    recs = res["records"]
    assert [s for s, _ in live["privacy/epsilon_rdp"]] == [1, 2]
    for (_, v), rec in zip(live["privacy/epsilon_rdp"], recs, strict=True):
        assert v == pytest.approx(rec["epsilon_rdp"], rel=1e-6)  # float32 in the file
    knn = [res["initial"]["knn_backbone"]] + [r["knn_backbone"] for r in recs]
    assert live["eval/knn_backbone"] == [(i, pytest.approx(v, rel=1e-6)) for i, v in enumerate(knn)]
    losses = [r["phases"]["train"]["metrics"]["train_loss"] for r in recs]
    assert [v for _, v in live["train/train_loss"]] == pytest.approx(losses, rel=1e-6)
    # every metric of the rounds.csv row is a scalar, at its round
    assert set(scalars_of_record(recs[0])) <= set(live)
    # the Flower engine's path (written from the results afterwards) gives the same scalars
    after = _scalars(write_tensorboard(res, tmp_path / "after"))
    assert set(after) == set(live)
    for tag in live:
        assert [s for s, _ in after[tag]] == [s for s, _ in live[tag]], tag
        assert [v for _, v in after[tag]] == pytest.approx([v for _, v in live[tag]]), tag


def test_missing_extra_is_a_clear_error_before_training(tmp_path, monkeypatch, capsys):
    real = builtins.__import__

    def no_tensorboard(name, *a, **k):
        if name.startswith(("torch.utils.tensorboard", "tensorboard")):
            raise ImportError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    monkeypatch.delitem(__import__("sys").modules, "torch.utils.tensorboard", raising=False)
    out = tmp_path / "run"
    assert (
        main(["train", "--config", SMOKE, "--out", str(out), "--quiet", "--log", "tensorboard"])
        == 2
    )
    err = capsys.readouterr().err  # commands that work: from an index, from a checkout
    assert "pip install tensorboard" in err and "pip install -e '.[tensorboard]'" in err
    assert not (out / "results.json").exists()
