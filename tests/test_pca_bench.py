"""``fedspectral pca-bench``: the quick run end to end, and option validation before I/O."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from fedspectral import cli
from fedspectral.experiments import pca_bench
from fedspectral.experiments.pca_bench.tasks import wishart_moment


def test_quick_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "pca"
    t0 = time.process_time()
    rc = cli.main(["pca-bench", "--quick", "--out", str(out), "--no-progress"])
    cpu = time.process_time() - t0
    assert rc == 0
    # CPU time, not wall time: the machine is shared (measured about 10 s)
    assert cpu < 60, f"quick run used {cpu:.0f} s of CPU"
    names = {
        "pca_bench.json",
        "README_table.md",
        "fig1.csv",
        "tables.csv",
        "real.csv",
        "fig1_k_eps.png",
        "fig1_p.png",
        "tables_sparse.png",
        "real_fmnist.png",
    }
    assert names <= {p.name for p in out.iterdir()}
    from PIL import Image

    for png in out.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert min(Image.open(png).info["dpi"]) >= 149.5  # every figure at 150 dpi
    assert not list(out.glob(".*.tmp"))  # atomic writers leave no temporary files
    d = json.loads((out / "pca_bench.json").read_text())
    assert {"command", "config", "versions", "timings", "notes", "results", "files"} <= set(d)
    assert d["config"]["quick"] is True
    res = d["results"]
    assert set(res) == {"fig1", "tables", "real"}
    assert {"summary", "checks", "theorem1_sqrt_rate", "max_row_norm_observed"} <= set(res["fig1"])
    for key in (
        "error_decreases_with_n",
        "error_decreases_with_eps",
        "error_increases_with_k",
        "error_increases_with_p",
        "central_below_local",
        "loglog_slope_vs_n",
    ):
        assert key in res["fig1"]["checks"]
    assert {"alg2_below_alg1", "alg2_error_decreases_with_eps", "fps_converged"} <= set(
        res["tables"]["checks"]
    )
    tmeth = {d["method"] for d in res["tables"]["table"]}
    assert {"alg1", "alg2", "alg1_paper", "alg2_paper", "central_gaussian"} <= tmeth
    # Algorithm 2 with the paper's calibration only at the large (Wishart) n
    assert {d["n"] for d in res["tables"]["table"] if d["method"] == "alg2_paper"} == {10**10}
    assert "central_below_local" in res["real"]["checks"]
    # the seed's model keeps rows inside the unit ball (no clipping acted)
    assert res["fig1"]["max_row_norm_observed"] < 1
    # every method appears on Figure 1; errors lie in [0, sqrt(2k)]
    methods = {s["method"] for s in res["fig1"]["summary"]}
    assert {
        "nonprivate",
        "central_gaussian",
        "ldp_paper",
        "ldp_correct",
        "ldp_isometric",
    } <= methods
    # isometric vs upper message (same sigma, same noise draws): about 1/sqrt(2) of the
    # error where the error is resolved (noise-dominated Davis-Kahan regime: the noise
    # Frobenius norm shrinks by sqrt((p+1)/2p) = 0.72 at p = 20), no gain at the random level
    iso = res["fig1"]["checks"]["isometric_over_upper_error_ratio"]
    assert iso["resolved"]["cases"] >= 4 and 0.6 < iso["resolved"]["median"] < 0.85
    assert iso["random_level"]["cases"] >= 4
    assert 0.93 < iso["random_level"]["median"] < 1.07
    for s in res["fig1"]["summary"]:
        assert all(0 <= m <= math.sqrt(2 * s["k"]) + 1e-9 for m in s["mean"])
    # behaviour the quick run must already show: the central model beats the local one
    c = res["fig1"]["checks"]["central_below_local"]
    assert c["hold"] == c["cases"] > 0
    # CSV rows: one per (data set, method, eps)
    header = (out / "fig1.csv").read_text().splitlines()[0].split(",")
    assert {"experiment", "n", "k", "eps", "method", "error"} <= set(header)
    table = (out / "README_table.md").read_text()
    assert "Figure 1" in table and "Tables 1–2" in table and "Fashion-MNIST" in table
    assert "isometric / upper" in table and "Isometric / upper-triangle message" in table
    assert "Figure 1" in capsys.readouterr().out
    # --reanalyse rebuilds the same tables from the raw CSVs and the stored config
    before = table
    (out / "README_table.md").unlink()
    assert cli.main(["pca-bench", "--reanalyse", "--out", str(out)]) == 0
    assert (out / "README_table.md").read_text() == before


def test_reanalyse_needs_a_finished_run(tmp_path, capsys):
    assert cli.main(["pca-bench", "--reanalyse", "--out", str(tmp_path)]) == 2
    assert "pca_bench.json missing" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--repeats", "0"], "--repeats"),
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "-2"], "--jobs"),
    ],
)
def test_bad_options_rejected_before_any_file(tmp_path, capsys, argv, match):
    out = tmp_path / "never"
    rc = cli.main(["pca-bench", "--quick", "--out", str(out), *argv])
    assert rc == 2
    assert match in capsys.readouterr().err
    assert not out.exists()


def test_unknown_experiment_and_bad_out_rejected(tmp_path, capsys):
    with pytest.raises(SystemExit):  # argparse choices
        cli.main(["pca-bench", "--only", "fig9", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
    f = tmp_path / "file"
    f.write_text("not a folder")
    assert cli.main(["pca-bench", "--quick", "--out", str(f)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert f.read_text() == "not a folder"


def test_validate_rejects_inconsistent_configs(tmp_path):
    ok = pca_bench.BenchConfig.quick_config(out=str(tmp_path / "o"))
    pca_bench.validate(ok)
    for kw, match in [
        ({"fig1_k": (20,)}, "fig1_k"),
        ({"sparse_s": (2,)}, "sparsity"),
        ({"fig1_eps": (math.inf,)}, "finite"),
        ({"delta": 1.0}, "delta"),
        ({"only": ("fig2",)}, "--only"),
        ({"n_wishart": (5,)}, "Wishart"),
    ]:
        with pytest.raises(ValueError, match=match):
            pca_bench.validate(pca_bench.BenchConfig.quick_config(out=str(tmp_path), **kw))
    assert not (tmp_path / "o").exists()


def test_only_one_experiment(tmp_path):
    out = tmp_path / "t"
    cfg = pca_bench.BenchConfig.quick_config(
        out=str(out), only=("tables",), sparse_repeats=1, sparse_s=(6,)
    )
    payload = pca_bench.run_bench(cfg, progress=False)
    assert set(payload["results"]) == {"tables"}
    assert not (out / "fig1.csv").exists() and (out / "tables.csv").exists()


def test_wishart_moment_matches_row_second_moment_in_distribution():
    """The Wishart shortcut of the large-n points: mean Sigma and entry variances
    (Sigma_ii Sigma_jj + Sigma_ij^2)/n, compared with 3000 draws (tolerance 10%)."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4, 4))
    Sigma = A @ A.T / 4 + np.eye(4)
    n = 50
    draws = np.array([wishart_moment(Sigma, n, rng) for _ in range(3000)])
    np.testing.assert_allclose(
        draws.mean(0),
        Sigma,
        atol=4 * np.sqrt((np.outer(np.diag(Sigma), np.diag(Sigma)) + Sigma**2).max() / n / 3000),
    )
    var_theory = (np.outer(np.diag(Sigma), np.diag(Sigma)) + Sigma**2) / n
    np.testing.assert_allclose(draws.var(0), var_theory, rtol=0.1)


def test_jobs_do_not_change_results(tmp_path):
    """Every task seeds its own stream from (seed, task key): --jobs 2 == --jobs 1."""
    kw = {"only": ("tables",), "sparse_s": (6,), "sparse_repeats": 2, "opendp_repeats": 0}
    for jobs in (1, 2):
        cfg = pca_bench.BenchConfig.quick_config(out=str(tmp_path / f"j{jobs}"), jobs=jobs, **kw)
        pca_bench.run_bench(cfg, progress=False)
    a = (tmp_path / "j1" / "tables.csv").read_text().splitlines()
    b = (tmp_path / "j2" / "tables.csv").read_text().splitlines()
    col = a[0].split(",").index("seconds")
    strip = [[c for i, c in enumerate(line.split(",")) if i != col] for line in a]
    strip2 = [[c for i, c in enumerate(line.split(",")) if i != col] for line in b]
    assert strip == strip2
