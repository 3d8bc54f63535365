"""Issue 48, bad input found by the fifth fuzzing round (``scripts/fuzz_cases_r5.py``):
each fix with a test that fails on the code before it."""

from __future__ import annotations

import pytest

from fedspectral.cli import main


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--repeats", "5"], "--repeats 5"),
        (["--quick"], "--quick"),
        (["--sparse-repeats", "2"], "--sparse-repeats 2"),
        (["--jobs", "1"], "--jobs 1"),
        (["--seed", "0"], "--seed 0"),
        (["--only", "fig1", "--only", "real"], "--only fig1 real"),
    ],
)
def test_pca_bench_reanalyse_refuses_the_options_of_a_run(tmp_path, capsys, argv, named) -> None:
    """``--reanalyse`` redoes the analysis with the finished run's own settings:
    ``--repeats`` (and every option that sets up a run) did nothing there, silently."""
    assert main(["pca-bench", "--reanalyse", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert f"{named}: no effect with --reanalyse" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("weakened", [True, False])
def test_a_deployed_node_refuses_the_relation_of_the_server(monkeypatch, weakened) -> None:
    """``relation = ""`` (follow the request: the simulation engine's policy only) was
    accepted with ``simulation = false``: a deployed node then accounted its releases
    under whatever neighbouring relation the server asked for."""
    from fedspectral.fed.flower.node import policy as node_policy

    if weakened:  # the node before this defence: only the seed and the ledger were checked
        real = node_policy._refuse_simulation_only

        def old(pol):
            if pol.relation == "":
                return None
            return real(pol)

        monkeypatch.setattr(node_policy, "_refuse_simulation_only", old)
        pol = node_policy.NodePolicy.from_node({"policy-relation": ""})
        assert pol.relation_for("zero_out") == "zero_out"  # the server's choice
        return
    with pytest.raises(ValueError, match="policy relation '' is a simulation/test setting"):
        node_policy.NodePolicy.from_node({"policy-relation": ""})
    sim = node_policy.NodePolicy.from_node({"policy-relation": "", "policy-simulation": True})
    assert sim.relation_for("zero_out") == "zero_out"
