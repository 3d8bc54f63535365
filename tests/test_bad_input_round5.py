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


@pytest.mark.parametrize("key", ["data_shard", "Data-shard", "DATA-LIMIT", " data-shard"])
@pytest.mark.parametrize("weakened", [True, False])
def test_a_data_key_in_another_spelling_is_refused(monkeypatch, weakened, key) -> None:
    """``data_shard`` or ``Data-shard`` (not ``data-…``) was ignored: the node served all
    its records instead of the part its operator meant."""
    from fedspectral.fed.flower.node import data as node_data

    nc = {"data-dataset": "digits", key: "0/3"}
    if weakened:  # the node before this defence: only keys starting 'data-' were checked
        known = node_data.NODE_DATA_KEYS

        def old(node_config):
            for k in node_config:
                if k.startswith("data-") and k not in known:
                    raise ValueError(k)

        monkeypatch.setattr(node_data, "check_node_data_keys", old)
        spec = node_data.NodeData.from_node_config(nc)
        assert spec.shard is None and spec.limit is None
        return
    with pytest.raises(ValueError, match=f"unknown node-config key {key!r}"):
        node_data.NodeData.from_node_config(nc)


@pytest.mark.parametrize("root", [3, ["x"], True, " ", "a\x00b"])
def test_an_integer_or_a_list_is_never_a_data_root(root) -> None:
    """``data-root = 3`` (no data-dataset: a simulation node) became the relative folder
    '3' of the node's run config (``str(root)``); now refused where the node config is
    read, naming the key, whether or not it names a data set."""
    from flwr.app import Context, RecordDict

    from fedspectral.fed.flower.apps import client_app as ca
    from fedspectral.fed.flower.node.data import NodeData

    for nc in ({"data-root": root}, {"data-root": root, "data-dataset": "digits"}):
        with pytest.raises(ValueError, match="node config data-root must be a path"):
            NodeData.from_node_config(nc)
    ctx = Context(1, 1, {"data-root": root}, RecordDict(), {})
    with pytest.raises(ValueError, match="node config data-root must be a path"):
        ca._config(ctx, None)


def test_a_data_id_is_checked_without_a_data_set() -> None:
    """``data-id`` names the ledger of a node's pca-data too: checked at start."""
    from fedspectral.fed.flower.node.data import NodeData

    with pytest.raises(ValueError, match="data-id must be non-empty printable text"):
        NodeData.from_node_config({"data-id": 3})
    assert NodeData.from_node_config({"data-id": "site-1"}) is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--out", "{tmp}/run", "--device", "tpu"], "--device 'tpu': config run.device='tpu'"),
        (["--out", "{tmp}/run", "--device", ""], "--device '': config run.device=''"),
        (["--out", "{tmp}", "--summarise", "{tmp}/s.json", "--jobs", "2"], "--jobs 2 sets how"),
        (["--out", "{tmp}", "--table", "{tmp}/t.md", "--nice", "5"], "--nice 5 sets how"),
        (["--out", "{tmp}", "--plot", "{tmp}/p.png", "--device", "cpu"], "--device 'cpu' sets"),
    ],
)
def test_fedsc_sweep_checks_the_device_and_refuses_run_options_of_an_action(
    tmp_path, args, needle
) -> None:
    """``--device tpu`` started every run of the grid (each failed in its own log, the
    sweep exited 0) and ``--device ''`` ran the grid on the configs' device; ``--jobs``,
    ``--nice`` and ``--device`` were taken, doing nothing, with ``--summarise``/``--table``/
    ``--plot``.  Each is now one error line before any run or file."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = subprocess.run(
        [sys.executable, str(root / "scripts" / "fedsc_sweep.py"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", ["9223372036854775808", "99999999999999999999"])
def test_audit_seed_is_a_64_bit_seed_like_every_seed(capsys, seed) -> None:
    """``audit --seed 99999999999999999999`` ran (numpy takes any integer), where every
    other seed of the project is a signed 64-bit one (config_checks.MAX_SEED)."""
    assert main(["audit", "ldp-pca", "--samples", "2000", "--seed", seed]) == 2
    assert f"seed must be <= {2**63 - 1}, got {seed}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "data", [b"hello, not a checkpoint\n", b"\x80\x04K\x01.", b"PK\x03\x04garbage", b"]"]
)
def test_an_encoder_file_of_any_bytes_is_a_clear_error(tmp_path, data) -> None:
    """Text read as a legacy pickle failed with ``KeyError: 101`` (a traceback): any bytes
    that are no torch checkpoint of tensors are a ``ValueError`` naming the file."""
    from fedspectral.fed.export import load_encoder

    f = tmp_path / "enc.pt"
    f.write_bytes(data)
    with pytest.raises(ValueError, match=r"cannot read encoder file .*enc\.pt"):
        load_encoder(f)


# -- pca-bench --reanalyse: rows the run cannot have written ------------------------------
_HEAD = "experiment,panel,p,k,n,rep,sampling,eps,method,error,opendp_status\n"
_ROW = "fig1,k,20,2,1000,{rep},rows,1.0,ldp_correct,0.5,\n"


def _finished_fig1(out, rows: str) -> bytes:
    import dataclasses

    from fedspectral.experiments.pca_bench import BenchConfig
    from fedspectral.results import write_json

    cfg = BenchConfig.quick_config(out=str(out), only=("fig1",))
    out.mkdir()
    write_json(
        out / "pca_bench.json",
        {"config": dataclasses.asdict(cfg), "results": {"fig1": {"stored": 1}}, "timings": {}},
    )
    (out / "fig1.csv").write_text(_HEAD + rows)
    return (out / "pca_bench.json").read_bytes()


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("fig1,k,20,2,1000,0,rows,3.7,ldp_correct,0.5,\n", "line 3: eps 3.7 is not one of the run"),
        ("fig1,k,20,2,12345,0,rows,1.0,ldp_correct,0.5,\n", "line 3: n 12345 is not one of"),
        ("fig1,k,20,2,1000,-1,rows,1.0,ldp_correct,0.5,\n", "line 3: rep -1 is not one of"),
        ("fig1,k,20,7,1000,0,rows,1.0,ldp_correct,0.5,\n", "line 3: k 7 is not one of"),
        ("fig1,x,20,2,1000,0,rows,1.0,ldp_correct,0.5,\n", "line 3: panel 'x' is not one of"),
        ("tables,k,20,2,1000,0,rows,1.0,ldp_correct,0.5,\n", "experiment 'tables' in the CSV"),
        (_ROW.format(rep=0), "line 3 repeats line 2"),
        ("fig1,k,20,2,1000,1,rows,1.0,ldp_correct,100,\n", "error 100 exceeds sqrt(2k) = 2"),
        ("fig1,k,20,2,1000,1,rows,1.0,ldp_correct,,\n", "line 3: no error"),
        ("fig1,k,20,2,10000,0,rows,1.0,ldp_correct,0.5,\n", "different or missing repeats"),
    ],
)
def test_reanalyse_refuses_rows_off_the_runs_grid(tmp_path, capsys, row, needle) -> None:
    """A row edited to an ε, n, k, repeat or panel the run never had, a row written twice,
    a point missing a repeat, an impossible distance or an empty error was tabulated (or
    silently left out, the tables' means then over fewer repeats than they say).  Each is
    now refused naming the file and the line, before any write."""
    out = tmp_path / "pca"
    rows = _ROW.format(rep=0) + row
    if "different" in needle:  # one point with repeats 0-2, another with 0 only
        rows = "".join(_ROW.format(rep=r) for r in range(3)) + row
    before = _finished_fig1(out, rows)
    assert main(["pca-bench", "--reanalyse", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "nothing was written" in err, err
    assert (out / "pca_bench.json").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["fig1.csv", "pca_bench.json"]


# -- privacy/: a Release built directly is checked as the ledger checks one ---------------
@pytest.mark.parametrize("weakened", [True, False])
def test_a_release_with_an_unknown_threat_cannot_hide_from_the_ledger(monkeypatch, weakened):
    """``Release(..., threat="fallbak")`` (or an unknown unit) was accepted when built
    directly, as ``PrivacyLedger.replace``, ``epsilon_of_releases`` and
    ``BudgetAccountant.spend`` take it; ``view("fallback")`` then left it out: an epsilon
    too small.  Now the release itself refuses the name, as ``record`` always did."""
    from fedspectral.privacy import PrivacyLedger, Release
    from fedspectral.privacy import accounting as acc

    led = PrivacyLedger()
    first = led.record("u", "m", 1.0, 1.0)
    led.record("u", "m", 1.0, 1.0)
    full = led.view("fallback").epsilon(1e-5)
    if weakened:  # the release before this defence: its numbers checked only
        monkeypatch.setattr(acc, "check_release_text", lambda release, *known: None)
        led.replace(first, Release("u", "m", 1.0, 1.0, threat="fallbak"))
        assert led.view("fallback").epsilon(1e-5) < full  # one release hidden
        return
    bad = [("threat", "fallbak"), ("unit", "user"), ("neighbouring", "replace"), ("party", 3)]
    for name, value in bad:
        with pytest.raises((TypeError, ValueError), match=name):
            Release(**{"party": "u", "mechanism": "m", "sigma": 1.0, "sensitivity": 1.0,
                       name: value})  # fmt: skip


@pytest.mark.parametrize(
    ("groups", "delta", "needle"),
    [
        ({1.0: 1}, 2.0, "delta must be < 1.0"),
        ({"1": 1}, 1e-5, "noise multiplier must be a real number"),
        ({1.0: 2.5}, 1e-5, "count must be an integer"),
        ([1.0], 1e-5, "groups must be a dict"),
    ],
)
def test_pld_interval_checks_its_arguments(groups, delta, needle) -> None:
    """``pld_interval`` took delta = 2 and compared a text noise multiplier with ints
    ("'<' not supported between instances of 'int' and 'str')."""
    from fedspectral.privacy.accounting import pld_interval

    with pytest.raises((TypeError, ValueError), match=needle):
        pld_interval(groups, delta)


def test_the_discrete_gaussian_sampler_bounds_its_variance() -> None:
    """``sample(1e300, ...)`` failed as "sample: the arguments are beyond what it can
    compute (OverflowError ...)", naming no argument: a variance whose draws cannot fit
    int64 is now refused naming ``scale2`` and the bound."""
    from fedspectral.privacy import discrete_gaussian as dg

    out, var = dg.sample(2.0**116, 3, dg.os_bits())
    assert out.dtype == dg.np.int64 and var >= 2**116
    for bad in (2.0**117, 1e300):
        with pytest.raises(ValueError, match=r"scale2=.* is above 2\*\*116 \(MAX_SCALE2\)"):
            dg.sample(bad, 3, dg.os_bits())


@pytest.mark.parametrize("delta", [float("nan"), 2.0, 0.0, "1e-5"])
def test_party_epsilons_refuses_a_delta_it_cannot_mean(delta) -> None:
    """``party_epsilons(ledger, nan)`` answered ``{party: None}`` ("not reported"), the
    accountant's refusal swallowed: now the delta is refused, naming it."""
    from fedspectral.privacy import PrivacyLedger
    from fedspectral.privacy.report import party_epsilons

    led = PrivacyLedger()
    led.record("u", "m", 2.0, 1.0)
    with pytest.raises((TypeError, ValueError), match="delta"):
        party_epsilons(led, delta, "pld")
    assert party_epsilons(led, 1e-300, "pld") == {"u": None}  # PLD's range, said as None


def test_the_closed_form_multiplier_of_a_subnormal_epsilon_is_a_clear_error() -> None:
    """``closed_form_noise_multiplier(5e-324, ...)``: sqrt(rho) underflowed to 0 and the
    division raised ``ZeroDivisionError``."""
    from fedspectral.privacy.calibration import closed_form_noise_multiplier

    with pytest.raises(ValueError, match="overflows at epsilon=5e-324"):
        closed_form_noise_multiplier(5e-324, 1e-3, 3)


@pytest.mark.parametrize(
    ("func", "args"),
    [
        ("summed_noise_multiplier", (1.7e308, 700)),
        ("mean_sigma", (1e308, 1e10, 1)),
        ("share_sigma", (1e308, 1e10, 4)),
    ],
)
def test_client_level_noise_scales_never_overflow_to_inf(func, args) -> None:
    """``summed_noise_multiplier(1.7e308, 700)`` returned ``inf`` (a noise scale no
    release can have): a product beyond float64 is now refused, naming it."""
    from fedspectral.privacy import client_level as cl

    with pytest.raises(ValueError, match="overflows float64"):
        getattr(cl, func)(*args)
