r"""In-process runner: every client of a federation simulated in one process.

The embedded default engine.  It holds no algorithm logic: each round it samples
clients (:func:`~fedspectral.fed.protocol.sample_clients`), and calls
:func:`~fedspectral.fed.protocol.run_round` with a transport that runs the
method's client handler of each addressed client in turn, on one reused network.

Determinism
    Everything random is derived from ``run.seed``: the data subset and
    partition, the initial weights, the sampled clients of round :math:`t`, and
    each client's batch order, augmentations and DP noise in round :math:`t`
    (:func:`~fedspectral.fed.protocol.client_generators`).  No generator state
    crosses rounds, so a run resumed from the checkpoint of round :math:`t`
    continues exactly as the uninterrupted run (``tests/fed/test_simulation.py``).

Per round
    a record with the phases' participants, failures, bytes up/down per client,
    wall time, the aggregated metrics (train loss), the KNN accuracy on backbone
    and projector features every ``eval.every`` rounds (and at the last), the
    global SC objective on the pooled training data (:func:`global_sc_objective`), and
    the ε spent so far (max over clients, RDP; per client by RDP and PLD at
    evaluation rounds) from the run's :class:`~fedspectral.privacy.PrivacyLedger`.

Checkpoint
    after every round, atomically (:mod:`fedspectral.fed.checkpoint`: tensors + JSON,
    read back with ``torch.load(weights_only=True)``, fingerprint and digest checked
    before anything is used): server state, client states, ledger, records.
    ``resume=True`` continues from it if its config matches; without one it is an error.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedspectral.checks import NonFiniteError
from fedspectral.config import ExperimentConfig, evaluates_initial, to_dict
from fedspectral.data.partition import stratified_subset
from fedspectral.fed.callbacks import Callback
from fedspectral.fed.methods.sc import global_sc_objective
from fedspectral.fed.protocol import (
    ClientRuntime,
    Method,
    Payload,
    SecureSumSpec,
    ServerState,
    arrays_to_net,
    client_generators,
    derive_seed,
    in_process_secure_sum,
    net_to_arrays,
    run_round,
    sample_clients,
)
from fedspectral.fed.validation import config_fingerprint, ensure_valid
from fedspectral.privacy import PrivacyLedger
from fedspectral.results import round_row

__all__ = [
    "Callback",
    "Federation",
    "InProcessTransport",
    "Simulation",
    "evaluate_knn",
    "global_sc_objective",
    "prepare_federation",
    "progress_bar",
    "round_row",
    "show_round",
    "stratified_subset",
]

CHECKPOINT = "checkpoint.pt"


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
@dataclass
class Federation:
    """The data of one experiment, split as the method sees it.

    ``clients`` maps client id -> its :class:`~fedspectral.data.ImageData`;
    ``bank`` is the un-augmented training set used as the KNN memory bank (and
    the linear probe's training set); ``eval`` the evaluation set (test split, or
    the validation part of the train split); ``augment`` the view generator;
    ``public`` the server's public split (the
    :meth:`~fedspectral.fed.protocol.Method.public_size` images no client holds;
    ``None`` when the method needs none).
    """

    clients: dict[str, Any]
    bank: Any
    eval: Any
    augment: Callable[..., Any]
    info: dict[str, Any]
    public: Any = None


def prepare_federation(cfg: ExperimentConfig, method: Method) -> Federation:
    """Load the data of ``cfg`` and split it among the method's clients (the split:
    :func:`fedspectral.fed.federation.plan_federation`)."""
    from fedspectral.data import load_dataset
    from fedspectral.fed.federation import augmenter, plan_federation

    d, seed = cfg.data, cfg.run.seed
    full = load_dataset(d.dataset, "train", root=d.root, download=d.download)
    plan = plan_federation(cfg, method, full.labels.numpy(), full.num_classes)
    if d.eval_split == "val":
        ev = full.subset(plan.val) if plan.val is not None else None
    else:
        ev = load_dataset(d.dataset, "test", root=d.root, download=d.download)
    if cfg.eval.test_size is not None and cfg.eval.test_size < len(ev):
        ev = ev.subset(
            stratified_subset(
                ev.labels.numpy(),
                cfg.eval.test_size,
                np.random.default_rng(derive_seed("test", seed)),
            )
        )
    clients = {c: full.subset(plan.client_positions(c)) for c in plan.clients}
    used = plan.pool[np.sort(np.concatenate(plan.parts))]
    bank = full.subset(used)
    if cfg.eval.bank_size is not None and cfg.eval.bank_size < len(bank):
        bank = bank.subset(
            stratified_subset(
                bank.labels.numpy(),
                cfg.eval.bank_size,
                np.random.default_rng(derive_seed("bank", seed)),
            )
        )
    info = {
        "train_size": len(used),
        "eval_size": len(ev),
        "bank_size": len(bank),
        "eval_split": d.eval_split,
        "client_sizes": {k: len(v) for k, v in clients.items()},
        "client_classes": {
            k: sorted(int(x) for x in np.unique(v.labels.numpy())) for k, v in clients.items()
        },
    }
    public = None
    if plan.public is not None:
        public = full.subset(plan.public)
        info.update({"public_size": len(public), "public_source": plan.public_source})
    return Federation(clients, bank, ev, augmenter(cfg, full.shape[1]), info, public)


# --------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------
def _features(net: torch.nn.Module, fed: Federation, cfg: ExperimentConfig):
    from fedspectral.eval import encoder_features

    bs, dev = cfg.eval.batch_size, cfg.run.device
    hb, zb = encoder_features(net, fed.bank.images, bs, dev)
    he, ze = encoder_features(net, fed.eval.images, bs, dev)
    return hb, zb, he, ze


def evaluate_knn(net: torch.nn.Module, fed: Federation, cfg: ExperimentConfig) -> dict[str, float]:
    """KNN accuracy (k, t, cosine; bank = un-augmented train images) on backbone
    (``knn_backbone``) and projector (``knn_projector``) features."""
    from fedspectral.eval import knn_accuracy

    hb, zb, he, ze = _features(net, fed, cfg)
    out = {}
    for name, fb, fe in (("backbone", hb, he), ("projector", zb, ze)):
        out[f"knn_{name}"] = knn_accuracy(
            fb,
            fed.bank.labels,
            fe,
            fed.eval.labels,
            k=cfg.eval.knn_k,
            t=cfg.eval.knn_t,
            num_classes=fed.bank.num_classes,
        )
    return out


def linear_probe_accuracy(
    net: torch.nn.Module,
    fed: Federation,
    cfg: ExperimentConfig,
    *,
    solver: str | None = None,
    epochs: int | None = None,
    normalize: str = "none",
) -> dict[str, float]:
    """Linear probe on frozen backbone features (train = bank, test = eval set) with
    ``eval.probe_solver`` (see :class:`~fedspectral.config.EvalConfig`).  ``solver``,
    and for the ``adam`` probe ``epochs`` (default ``eval.probe_epochs``) and
    ``normalize`` (see :func:`fedspectral.eval.linear_probe`), let a diagnostic try
    other probes on the same features."""
    from fedspectral.eval.linear_probe import probe_accuracy

    ev = cfg.eval
    hb, _, he, _ = _features(net, fed, cfg)
    acc = probe_accuracy(
        hb,
        fed.bank.labels,
        he,
        fed.eval.labels,
        solver=ev.probe_solver if solver is None else solver,
        c=ev.probe_c,
        max_iter=ev.probe_max_iter,
        epochs=ev.probe_epochs if epochs is None else epochs,
        lr=ev.probe_lr,
        seed=derive_seed("probe", cfg.run.seed) % 2**31,
        normalize=normalize,
        num_classes=fed.bank.num_classes,
    )
    return {"linear_probe": float(acc)}


# --------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------
class Simulation:
    """Run ``cfg`` in process.

    Parameters
    ----------
    cfg : ExperimentConfig
        A validated configuration.
    out_dir : path, optional
        Where the checkpoint goes (``None``: no checkpoint).
    tolerate_failures : bool
        Treat a client handler that raises as a non-participating client (recorded
        in the round's ``failures``) instead of stopping the run.  Off by default:
        in process, an exception is a bug to see.  A transport may also answer a
        client with an exception (a Flower error reply, a missing node): that is
        recorded the same way, whatever this flag.
    secure_sum : {"exact", "quantised", "secagg"}
        How a ``secure_sum`` phase is reduced in process
        (:func:`~fedspectral.fed.protocol.in_process_secure_sum`): the exact float64
        sum (default), the sum of the summands quantised as a deployment carries them,
        or the five-stage exchange of :mod:`fedspectral.fed.secagg` itself.
    transport : callable, optional
        ``transport(sim, clients_state) -> transport``, called once per run after the
        callbacks' ``on_state``: what carries the round's messages,
        ``transport(phase, rnd, {cid: Payload}) -> {cid: Payload | Exception}``, with a
        ``secure_sum(phase, rnd, payloads, spec)`` method for methods that have a
        ``secure_sum`` phase (see :func:`~fedspectral.fed.protocol.run_round`).
        Default :class:`InProcessTransport`; the Flower runner passes its grid
        transport.  ``clients_state`` is the run's per-client state (in process it
        lives here; a Flower node keeps its own).
    callbacks : iterable of Callback
        :class:`~fedspectral.fed.callbacks.Callback` objects whose hooks are called at
        the run's fixed points: the state ready, each round's end (which may stop the
        run), the results (see :mod:`fedspectral.fed.callbacks`).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: str | os.PathLike | None = None,
        *,
        tolerate_failures: bool = False,
        secure_sum: str = "exact",
        transport: Callable[..., Any] | None = None,
        callbacks: Iterable[Callback] = (),
    ) -> None:
        from fedspectral.checks import check_bool, check_choice, describe
        from fedspectral.fed.methods import build_method
        from fedspectral.fed.protocol import SECURE_SUM_MODES

        self.secure_sum_mode = check_choice("secure_sum", secure_sum, SECURE_SUM_MODES)
        self.tolerate_failures = check_bool("tolerate_failures", tolerate_failures)
        if transport is not None and not callable(transport):
            raise TypeError(
                f"transport must be a callable (sim, clients_state) -> transport, "
                f"got {describe(transport)}"
            )
        self.callbacks: list[Callback] = list(callbacks)
        bad = [cb for cb in self.callbacks if not isinstance(cb, Callback)]
        if bad:
            raise TypeError(
                f"callbacks must be fedspectral.fed.callbacks.Callback instances, "
                f"got {describe(bad[0])}"
            )
        self.make_transport = transport if transport is not None else InProcessTransport
        self.cfg = ensure_valid(cfg)
        self.cfg_dict = to_dict(self.cfg)
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.method = build_method(self.cfg)
        self.fed: Federation | None = None
        self.net: torch.nn.Module | None = None

    # -- setup --------------------------------------------------------------------------
    def _setup(self) -> None:
        if self.fed is None:
            self.fed = prepare_federation(self.cfg, self.method)
            if self.cfg.run.device != "cpu":  # client data stays on the device
                self.fed.clients = {
                    c: d.to(self.cfg.run.device) for c, d in self.fed.clients.items()
                }
        if self.net is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed("init", self.cfg.run.seed))
                self.net = self.method.build_net()
            self.net.to(self.cfg.run.device)

    def _fresh_state(self) -> dict[str, Any]:
        assert self.net is not None and self.fed is not None
        server = self.method.init_server_state(
            net_to_arrays(self.net), {c: len(v) for c, v in self.fed.clients.items()}
        )
        if self.fed.public is not None:
            self.method.prepare_server(server, self.fed.public, self.fed.augment, self.cfg.run.seed)
        return {
            "round": 0,
            "server": server,
            "clients": {c: {} for c in self.fed.clients},
            "ledger": PrivacyLedger(unit="sample"),
            "client_ledger": PrivacyLedger(unit="client"),
            "records": [],
            "elapsed": 0.0,
        }

    # -- checkpoint ---------------------------------------------------------------------
    def _checkpoint_path(self) -> Path | None:
        return None if self.out_dir is None else self.out_dir / CHECKPOINT

    def _save(self, st: dict[str, Any]) -> None:
        path = self._checkpoint_path()
        if path is None or not self.cfg.run.checkpoint:
            return
        from fedspectral.fed.checkpoint import save_checkpoint

        state = {
            "round": st["round"],
            "server": st["server"].to_dict(),
            "clients": {
                c: {k: np.array(v, copy=True) for k, v in s.items()}
                for c, s in st["clients"].items()
            },
            "ledger": st["ledger"].to_dict(),
            "client_ledger": st["client_ledger"].to_dict(),
            "records": st["records"],
            "elapsed": st["elapsed"],
        }
        if "initial" in st:
            state["initial"] = st["initial"]
        from fedspectral.fed.run_state import check_records

        check_records(state["records"], state["round"], state["clients"])  # before writing
        save_checkpoint(path, state, config_fingerprint(self.cfg_dict))

    def _load(self) -> dict[str, Any] | None:
        """The checkpoint's state (a :class:`CheckpointError` when there is none); see
        :mod:`fedspectral.fed.checkpoint` for what is checked before it is used."""
        from fedspectral.fed.checkpoint import CheckpointError, load_checkpoint

        path = self._checkpoint_path()
        if path is None or not (path.exists() or path.is_symlink()):
            where = "no output folder" if path is None else f"no {str(path)!r}"
            raise CheckpointError(
                f"resume=True but there is no checkpoint to resume from "
                f"({where}); run without resume to start afresh"
            )
        blob = load_checkpoint(path, config_fingerprint(self.cfg_dict))
        from fedspectral.fed.federation import client_ids
        from fedspectral.fed.run_state import check_run_state

        try:
            check_run_state(blob, self.cfg.method.rounds, client_ids(self.cfg, self.method))
            rnd, records = blob["round"], blob["records"]
            st = {
                "round": rnd,
                "server": ServerState.from_dict(blob["server"]),
                "clients": {c: dict(s) for c, s in blob["clients"].items()},
                "ledger": PrivacyLedger.from_dict(blob["ledger"]),
                "client_ledger": PrivacyLedger.from_dict(
                    blob.get("client_ledger", {"unit": "client"})
                ),
                "records": list(records),
                "elapsed": float(blob["elapsed"]),
            }
            if "initial" in blob:
                st["initial"] = {str(k): float(v) for k, v in blob["initial"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"checkpoint {str(path)!r} holds an invalid state: {exc}"
            ) from exc
        return st

    def _evaluate_initial(self, weights: Mapping[str, np.ndarray]) -> dict[str, float]:
        """KNN, SC objective and (if configured) linear probe of the initial global
        weights: the untrained network of this architecture and seed (``eval.initial``)."""
        cfg, method = self.cfg, self.method
        assert self.net is not None and self.fed is not None
        arrays_to_net(self.net, weights)
        out = dict(evaluate_knn(self.net, self.fed, cfg))
        out.update(method.extra_metrics(self.net, self.fed))
        if cfg.eval.linear_probe:
            out.update(linear_probe_accuracy(self.net, self.fed, cfg))
        return out

    # -- run ----------------------------------------------------------------------------
    def run(self, resume: bool = False) -> dict[str, Any]:
        """Train for ``method.rounds`` rounds (or until a callback's ``on_round_end``
        says stop) and return the results dict."""
        cfg = self.cfg
        prev_threads = torch.get_num_threads()
        if cfg.run.threads:
            torch.set_num_threads(cfg.run.threads)
        try:
            return self._run(resume)
        finally:
            torch.set_num_threads(prev_threads)

    def _start(self, resume: bool) -> dict[str, Any]:
        """The run's state (loaded or fresh, the initial evaluation done), handed to the
        callbacks' ``on_state``."""
        st = self._load() if resume else None  # checked before any data is loaded
        self._setup()
        fresh = st is None
        if st is None:
            st = self._fresh_state()
        for cb in self.callbacks:
            cb.on_state(self, st)
        if fresh and evaluates_initial(self.cfg.eval):
            st["initial"] = self._evaluate_initial(self.method.global_weights(st["server"]))
        return st

    def _round(self, rnd: int, st: dict[str, Any], transport: Any, memo: dict) -> dict[str, Any]:
        """Run, evaluate and record round ``rnd``; return its record."""
        cfg, method = self.cfg, self.method
        assert self.net is not None and self.fed is not None
        server: ServerState = st["server"]
        ledger: PrivacyLedger = st["ledger"]
        t0 = time.perf_counter()
        sampled = sample_clients(
            server.clients, cfg.method.clients_per_round or len(server.clients), rnd, cfg.run.seed
        )
        try:
            rec = run_round(method, server, rnd, sampled, transport, ledger)
        except NonFiniteError as exc:
            raise _diverged(rnd, cfg, str(exc)) from exc
        loss = rec["phases"].get("train", {}).get("metrics", {}).get("train_loss")
        if loss is not None and not math.isfinite(loss):
            raise _diverged(rnd, cfg, f"mean training loss {loss}")
        rec["epsilon_rdp"] = _max_eps(ledger, cfg.dp.delta, "rdp", memo)
        if rnd % cfg.eval.every == 0 or rnd == cfg.method.rounds:
            te = time.perf_counter()
            arrays_to_net(self.net, method.global_weights(server))
            rec.update(evaluate_knn(self.net, self.fed, cfg))
            rec.update(method.extra_metrics(self.net, self.fed))
            rec["seconds_eval"] = time.perf_counter() - te
            if len(ledger):
                rdp = _party_eps(ledger, cfg.dp.delta, "rdp", memo)
                pld = _party_eps(ledger, cfg.dp.delta, "pld", memo)
                rec["epsilon_pld"] = _max_or_none(pld.values())
                rec["epsilon_clients"] = {c: {"rdp": rdp[c], "pld": pld[c]} for c in rdp}
        rec["seconds_round"] = time.perf_counter() - t0
        st["elapsed"] += rec["seconds_round"]
        st["records"].append(rec)
        st["round"] = rnd
        self._save(st)
        return rec

    def _run(self, resume: bool) -> dict[str, Any]:
        cfg = self.cfg
        st = self._start(resume)
        resumed_from = st["round"] if resume else 0
        transport = self.make_transport(self, st["clients"])
        rounds = cfg.method.rounds
        memo: dict = {}
        bar = progress_bar(
            cfg.run.progress, rounds, st["round"], f"{cfg.name} [{self.method.name}]"
        )
        try:
            for rnd in range(st["round"] + 1, rounds + 1):
                rec = self._round(rnd, st, transport, memo)
                stop = [cb.on_round_end(self, rnd, rec) for cb in self.callbacks]
                if bar is not None:
                    show_round(bar, rec)
                if any(stop):
                    break
        finally:
            if bar is not None:
                bar.close()
        final: dict[str, Any] = {}
        server: ServerState = st["server"]
        if st["round"] == rounds:
            assert self.net is not None and self.fed is not None
            arrays_to_net(self.net, self.method.global_weights(server))
            final.update({k: v for k, v in st["records"][-1].items() if k.startswith("knn_")})
            if cfg.eval.linear_probe:
                t = time.perf_counter()
                final.update(linear_probe_accuracy(self.net, self.fed, cfg))
                final["seconds_probe"] = time.perf_counter() - t
        self.server_state = server
        self.ledger = st["ledger"]
        self.client_ledger = st["client_ledger"]
        results = self._results(st, final, resumed_from)
        for cb in self.callbacks:
            cb.on_results(self, results)
        return results

    def _results(
        self, st: dict[str, Any], final: dict[str, Any], resumed_from: int
    ) -> dict[str, Any]:
        from fedspectral.results import versions

        cfg = self.cfg
        ledger: PrivacyLedger = st["ledger"]
        assert self.fed is not None
        privacy: dict[str, Any] = {
            "delta": cfg.dp.delta,
            "releases": ledger.count(),
            "ledger": ledger.to_dict(),
        }
        if len(ledger):
            memo: dict = {}
            per = {
                a: _party_eps(ledger, cfg.dp.delta, a, memo) for a in ("rdp", "pld", "closed_form")
            }
            privacy["parties"] = len(per["rdp"])
            for a, eps in per.items():
                privacy[f"epsilon_{a}"] = _max_or_none(eps.values())
            privacy["per_party"] = {c: {f"epsilon_{a}": per[a][c] for a in per} for c in per["rdp"]}
            privacy.update(
                self.method.privacy_info({c: len(d) for c, d in self.fed.clients.items()}, ledger)
            )
            if any(r.threat == "secagg" for r in ledger.releases):
                # secure aggregation: the per-client epsilon under both threat models
                tm: dict[str, Any] = {}
                for threat in ("secagg", "fallback"):
                    per_t = {
                        a: _party_eps(ledger, cfg.dp.delta, a, memo, threat) for a in ("rdp", "pld")
                    }
                    tm[threat] = {
                        **{f"epsilon_{a}": _max_or_none(e.values()) for a, e in per_t.items()},
                        "per_party": {
                            c: {f"epsilon_{a}": per_t[a].get(c) for a in per_t}
                            for c in per_t["rdp"]
                        },
                    }
                privacy["threat_models"] = tm
                privacy["aborted_sums"] = ledger.aborted
        from fedspectral.privacy.accounting import accountants_at

        skipped = accountants_at(cfg.dp.delta)[1]
        if len(ledger) and skipped:
            privacy["not_reported"] = skipped  # PLD below delta = 1e-15, with the reason
        privacy["unit"] = "sample"
        from fedspectral.fed.manifest import released_objects

        privacy["released_objects"] = released_objects(
            self.method.name,
            tuple(self.method.phases),
            bool(cfg.dp.enabled),
            bool(getattr(self.method, "secure", False)),
        )
        budget = self.method.release_budget()
        if budget is not None:
            privacy["target_epsilon"] = budget[0]
            privacy["target_accountant"] = budget[2]
            stops = [
                (r["round"], c)
                for r in st["records"]
                for ph in r["phases"].values()
                for c in ph.get("budget_stopped", [])
            ]
            privacy["budget_stops"] = len(stops)
            if stops:
                privacy["budget_stopped_clients"] = sorted({c for _, c in stops})
        notes = list(st["server"].info.get("privacy_warnings", []))
        if notes:
            privacy["warnings"] = notes
        cl: PrivacyLedger = st["client_ledger"]
        if len(cl):
            # client-level guarantees (a whole client's data), never composed with the
            # sample-level releases above
            memo = {}
            per = {a: _party_eps(cl, cfg.dp.delta, a, memo) for a in ("rdp", "pld")}
            privacy["client_level"] = {
                "unit": "client",
                "delta": cfg.dp.delta,
                "releases": cl.count(),
                "ledger": cl.to_dict(),
                **{f"epsilon_{a}": _max_or_none(e.values()) for a, e in per.items()},
            }
        recs = st["records"]
        timings = {
            "total_seconds": st["elapsed"],
            "mean_round_seconds": float(np.mean([r["seconds_round"] for r in recs]))
            if recs
            else 0.0,
        }
        for phase in self.method.phases:
            xs = [r["phases"][phase]["seconds"] for r in recs if phase in r["phases"]]
            if xs:
                timings[f"mean_{phase}_seconds"] = float(np.mean(xs))
        if recs:
            timings["mean_bytes_up_per_round"] = float(np.mean([r["bytes_up_total"] for r in recs]))
            timings["mean_bytes_down_per_round"] = float(
                np.mean([r["bytes_down_total"] for r in recs])
            )
        out = {
            "name": cfg.name,
            "method": self.method.name,
            "engine": "inprocess",
            "config": self.cfg_dict,
            "rounds_done": st["round"],
            "resumed_from": resumed_from,
            "data": self.fed.info,
            "final": final,
            "records": recs,
            "privacy": privacy,
            "timings": timings,
            "versions": versions(),
        }
        if "initial" in st:
            out["initial"] = st["initial"]
        return out


class InProcessTransport:
    """The in-process transport: each addressed client's handler runs in turn, on one
    reused network; a ``secure_sum`` phase is reduced by
    :func:`~fedspectral.fed.protocol.in_process_secure_sum` over the replies of
    ``self(...)``, so a subclass that overrides :meth:`__call__` (the tests'
    fault-injecting transport) decides who answers in both kinds of phase.

    ``Simulation(cfg, transport=InProcessTransport)`` is the default.
    """

    def __init__(self, sim: Simulation, clients_state: dict[str, dict[str, np.ndarray]]) -> None:
        self.sim = sim
        self.clients_state = clients_state

    def __call__(
        self, phase: str, rnd: int, payloads: dict[str, Payload]
    ) -> dict[str, Payload | BaseException]:
        sim = self.sim
        cfg, fed, net, method = sim.cfg, sim.fed, sim.net, sim.method
        assert fed is not None
        out: dict[str, Payload | BaseException] = {}
        for cid, payload in payloads.items():
            g, rng = client_generators(cfg.run.seed, rnd, cid, phase, cfg.dp.noise_seed)
            rt = ClientRuntime(
                cid=cid,
                data=fed.clients[cid],
                net=net,
                augment=fed.augment,
                generator=g,
                noise_rng=rng,
                state=self.clients_state[cid],
                config=cfg,
                device=cfg.run.device,
            )
            if not sim.tolerate_failures:
                out[cid] = method.client_phase(phase, rnd, payload, rt)
                continue
            try:
                out[cid] = method.client_phase(phase, rnd, payload, rt)
            except Exception as exc:  # noqa: BLE001 - a failed client is non-participation
                out[cid] = exc
        return out

    def secure_sum(
        self, phase: str, rnd: int, payloads: dict[str, Payload], spec: SecureSumSpec
    ) -> tuple[np.ndarray | None, list[str], dict[str, str]]:
        replies = self(phase, rnd, payloads)
        summands, failures = {}, {}
        for cid in payloads:
            rep = replies.get(cid)
            if isinstance(rep, Payload) and spec.key in rep.arrays:
                summands[cid] = rep.arrays[spec.key]
            else:
                failures[cid] = (
                    "no reply"
                    if rep is None
                    else f"{type(rep).__name__}: {rep}"
                    if isinstance(rep, BaseException)
                    else f"reply without {spec.key!r}"
                )
        session = f"{self.sim.cfg.run.seed}/{rnd}/{phase}".encode()
        total, contributors, more = in_process_secure_sum(
            summands, spec, list(payloads), self.sim.secure_sum_mode, session
        )
        return total, contributors, {**failures, **more}


def _diverged(rnd: int, cfg: ExperimentConfig, why: str) -> NonFiniteError:
    return NonFiniteError(
        f"training diverged in round {rnd} ({why}); try a smaller learning rate "
        f"(optim.lr={cfg.optim.lr:g}) or gradient clipping (optim.grad_clip)"
    )


def _max_eps(
    ledger: PrivacyLedger,
    delta: float,
    accountant: str,
    memo: dict | None = None,
    threat: str = "fallback",
) -> float:
    eps = _party_eps(ledger, delta, accountant, memo, threat)
    return _max_or_none(eps.values()) if eps else 0.0


def _party_eps(
    ledger: PrivacyLedger,
    delta: float,
    accountant: str,
    memo: dict | None = None,
    threat: str = "fallback",
) -> dict[str, float]:
    """ε of every party by ``accountant`` under ``threat`` (the fallback by default: the
    conservative reading of releases made through secure aggregation; identical for
    releases seen in the clear); parties with the same releases (same noise multipliers
    and counts, e.g. equal-size clients) are computed once."""
    from fedspectral.privacy.accounting import epsilon_of_releases

    by_party: dict[str, list] = {}
    for r in ledger.view(threat).releases:
        by_party.setdefault(r.party, []).append(r)
    memo = {} if memo is None else memo
    out = {}
    for party, rels in by_party.items():
        key = (accountant, delta, tuple(sorted((r.noise_multiplier, r.count) for r in rels)))
        if key not in memo:
            try:
                memo[key] = float(epsilon_of_releases(rels, delta, accountant))
            except ValueError:  # beyond this accountant's range (PLD): not reported
                memo[key] = None
        out[party] = memo[key]
    return out


def _max_or_none(values: Any) -> float | None:
    xs = [v for v in values if v is not None]
    return max(xs) if xs else None


def show_round(bar: Any, rec: Mapping[str, Any]) -> None:
    """One round on the progress bar: the training loss and, at evaluation rounds, KNN
    (also the Flower engine's bar, :func:`fedspectral.fed.flower.apps.engine.run_flower_simulation`)."""
    bar.update(1)
    post = {
        "loss": rec["phases"].get("train", {}).get("metrics", {}).get("train_loss", float("nan"))
    }
    if "knn_projector" in rec:
        post["knn_z"] = rec["knn_projector"]
        post["knn_h"] = rec["knn_backbone"]
    bar.set_postfix({k: f"{v:.3f}" for k, v in post.items()})


def progress_bar(enabled: bool, total: int, initial: int, desc: str) -> Any:
    """A tqdm bar over the rounds (``None`` when not ``enabled``)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="round", leave=True)
