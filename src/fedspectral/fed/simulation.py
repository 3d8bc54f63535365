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
    global SC objective on the pooled training data
    (:func:`~fedspectral.fed.methods.sc.global_sc_objective`), and
    the ε spent so far (max over clients, RDP; per client by RDP and PLD at
    evaluation rounds) from the run's :class:`~fedspectral.privacy.PrivacyLedger`
    (:mod:`fedspectral.privacy.report`, which also writes the results' ``privacy``).

Checkpoint
    after every round, atomically (:mod:`fedspectral.fed.checkpoint`: tensors + JSON,
    read back with ``torch.load(weights_only=True)``, fingerprint and digest checked
    before anything is used): the run's :class:`~fedspectral.fed.run_state.RunState`
    (server state, client states, ledgers, records).  ``resume=True`` continues from it
    if its config matches; without one it is an error.  :func:`load_run_state` reads it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedspectral.checks import NonFiniteError, check_bool, check_choice, describe
from fedspectral.config import ExperimentConfig, evaluates_initial, to_dict
from fedspectral.fed.callbacks import Callback
from fedspectral.fed.checkpoint import (
    RESUME_ADVICE,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from fedspectral.fed.evaluation import linear_probe_accuracy
from fedspectral.fed.federation import Federation, client_ids, prepare_federation
from fedspectral.fed.manifest import released_objects
from fedspectral.fed.methods import build_method
from fedspectral.fed.postprocess import PostProcessor
from fedspectral.fed.protocol import (
    ClientRuntime,
    Method,
    Payload,
    client_generators,
    derive_seed,
    round_contributors,
    run_round,
    sample_clients,
)
from fedspectral.fed.records import RoundRecord
from fedspectral.fed.releases import SECURE_SUM_MODES, SecureSumSpec, in_process_secure_sum
from fedspectral.fed.run_state import RunState
from fedspectral.fed.validation import config_fingerprint, ensure_valid
from fedspectral.fed.weights import check_weights, expected_shapes, net_to_arrays
from fedspectral.kinds import PhaseKind
from fedspectral.privacy.report import evaluation_epsilons, privacy_report, round_epsilon
from fedspectral.results import versions

__all__ = [
    "InProcessTransport",
    "Simulation",
    "load_run_state",
    "progress_bar",
    "show_round",
]

CHECKPOINT = "checkpoint.pt"


# --------------------------------------------------------------------------------------
# the runner
# --------------------------------------------------------------------------------------
def load_run_state(
    path: str | os.PathLike,
    cfg: ExperimentConfig,
    method: Method | None = None,
    advice: str | None = None,
) -> RunState:
    """The :class:`~fedspectral.fed.run_state.RunState` of the checkpoint at ``path``, if
    it was written for ``cfg`` (its fingerprint) and fits it (rounds, clients of
    ``method``, default the config's, and the server's weights: every name and shape of
    ``method``'s model, every value finite, :func:`~fedspectral.fed.weights.check_weights`)
    and its ledger agrees with its records, the config's calibration and the ε they
    reported (:func:`~fedspectral.fed.ledger_check.check_ledger`);
    what is checked before anything is used: :mod:`fedspectral.fed.checkpoint`.  Every
    problem is a :class:`CheckpointError` naming the file.  This is the one load path of
    a run's state: resuming a run and ``fedspectral export`` both read through it.
    ``advice`` replaces the default advice on a checkpoint of another config."""
    # per call: tests replace ledger_check.check_ledger
    from fedspectral.fed.ledger_check import check_ledger

    cfg = ensure_valid(cfg)
    if method is None:
        method = build_method(cfg)
    blob = load_checkpoint(path, config_fingerprint(to_dict(cfg)), advice or RESUME_ADVICE)
    try:
        state = RunState.from_dict(blob, cfg.method.rounds, client_ids(cfg, method))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} holds an invalid state: {exc}") from exc
    try:
        check_weights(
            state.server.weights, expected_shapes(method.build_net), f"checkpoint {str(path)!r}"
        )
    except ValueError as exc:
        raise CheckpointError(str(exc)) from None
    try:  # the ledger agrees with the records, the calibration and the epsilon reported
        check_ledger(state, method, float(cfg.dp.delta))
    except ValueError as exc:
        raise CheckpointError(
            f"checkpoint {str(path)!r} holds a ledger that does not match the run: {exc}; "
            f"it was edited or is not this run's (the run's epsilon is computed from the "
            f"ledger of the releases sent, so it is not used)"
        ) from exc
    return state


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
        recorded the same way, whatever this flag.  A round in which clients were
        asked and none took part stops the run with a ``RuntimeError`` after its
        checkpoint (resumable once the cause is fixed).
    secure_sum : {"exact", "quantised", "secagg"}
        How a ``secure_sum`` phase is reduced in process
        (:func:`~fedspectral.fed.releases.in_process_secure_sum`): the exact float64
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
    client_dp : PostProcessor, optional
        Applied to the ``train`` phases (:mod:`fedspectral.fed.postprocess`; client-level
        DP: :class:`~fedspectral.fed.flower.node.client_dp.ClientDP`); a callback first.
    method : Method, optional
        The config's method, built already (:func:`~fedspectral.fed.methods.build_method`
        of ``cfg``: the caller's checks and this run share it); default: built here.
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
        client_dp: PostProcessor | None = None,
        method: Method | None = None,
    ) -> None:
        self.secure_sum_mode = check_choice("secure_sum", secure_sum, SECURE_SUM_MODES)
        self.tolerate_failures = check_bool("tolerate_failures", tolerate_failures)
        if transport is not None and not callable(transport):
            raise TypeError(
                f"transport must be a callable (sim, clients_state) -> transport, "
                f"got {describe(transport)}"
            )
        self.callbacks: list[Callback] = [
            *([client_dp] if client_dp is not None else []),
            *callbacks,
        ]
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
        if method is None:
            method = build_method(self.cfg)
        elif not isinstance(method, Method) or not (
            method.config is self.cfg or method.config == self.cfg
        ):
            raise ValueError(
                f"method must be the Method built from this config "
                f"(fedspectral.fed.methods.build_method(cfg)), got {describe(method)}"
            )
        self.method = method
        self.client_dp = client_dp
        if client_dp is not None:  # refused before any work
            client_dp.check(self.method)
        self.fed: Federation | None = None
        self.net: torch.nn.Module | None = None
        self._netless = False  # the method's build_net gave None: no model object
        #: the run's state (:class:`~fedspectral.fed.run_state.RunState`), once it has started
        self.state: RunState | None = None

    # -- setup --------------------------------------------------------------------------
    def _setup(self) -> None:
        if self.fed is None:
            # the method's own data (the PCA methods' users), else the configured data set
            fed = self.method.load_federation()
            self.fed = prepare_federation(self.cfg, self.method) if fed is None else fed
            if self.cfg.run.device != "cpu":  # client data stays on the device
                self.fed.clients = {
                    c: d.to(self.cfg.run.device) for c, d in self.fed.clients.items()
                }
        if self.net is None and not self._netless:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed("init", self.cfg.run.seed))
                self.net = self.method.build_net()
            if self.net is None:  # a method that trains no network (the PCA methods)
                self._netless = True
            else:
                self.net.to(self.cfg.run.device)

    def _fresh_state(self) -> RunState:
        assert self.fed is not None
        weights = net_to_arrays(self.net) if self.net is not None else {}
        server = self.method.init_server_state(
            weights, {c: len(v) for c, v in self.fed.clients.items()}
        )
        if self.fed.public is not None:
            self.method.prepare_server(server, self.fed.public, self.fed.augment, self.cfg.run.seed)
        return RunState.fresh(server, self.fed.clients)

    # -- checkpoint ---------------------------------------------------------------------
    def _checkpoint_path(self) -> Path | None:
        return None if self.out_dir is None else self.out_dir / CHECKPOINT

    def _save(self, st: RunState) -> None:
        path = self._checkpoint_path()
        if path is None or not self.cfg.run.checkpoint:
            return

        save_checkpoint(path, st.to_dict(), config_fingerprint(self.cfg_dict))

    def _load(self) -> RunState:
        """The checkpoint's state (a :class:`CheckpointError` when there is none)."""
        path = self._checkpoint_path()
        if path is None or not (path.exists() or path.is_symlink()):
            where = "no output folder" if path is None else f"no {str(path)!r}"
            raise CheckpointError(
                f"resume=True but there is no checkpoint to resume from "
                f"({where}); run without resume to start afresh"
            )
        return load_run_state(path, self.cfg, self.method)

    def _check_sizes(self, st: RunState) -> None:
        """A loaded state's client sizes are those of the data (its ledger was checked
        against the calibration of those sizes): else a :class:`CheckpointError`."""
        # per call: tests replace it in ledger_check
        from fedspectral.fed.ledger_check import check_client_sizes

        assert self.fed is not None
        try:
            check_client_sizes(st, {c: len(d) for c, d in self.fed.clients.items()})
        except ValueError as exc:
            raise CheckpointError(f"checkpoint {str(self._checkpoint_path())!r}: {exc}") from None

    def _evaluate_initial(self, server: Any) -> dict[str, float]:
        """The method's evaluation (KNN, SC objective) and, if configured, the linear probe
        of the initial global weights: the untrained network of this architecture and
        seed (``eval.initial``)."""
        cfg, method = self.cfg, self.method
        assert self.fed is not None
        out = dict(method.evaluate(self.net, self.fed, server))
        if cfg.eval.linear_probe and self.net is not None:
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

    def _start(self, resume: bool) -> RunState:
        """The run's state (loaded or fresh, the initial evaluation done), handed to the
        callbacks' ``on_state``."""
        st = self._load() if resume else None  # checked before any data is loaded
        self._setup()
        if st is not None:
            self._check_sizes(st)
        fresh = st is None
        if st is None:
            st = self._fresh_state()
        self.state = st
        for cb in self.callbacks:
            cb.on_state(self, st)
        if fresh and evaluates_initial(self.cfg.eval):
            st.initial = self._evaluate_initial(st.server)
        return st

    def _round(self, rnd: int, st: RunState, transport: Any, memo: dict) -> RoundRecord:
        """One round, narrated as Flower's and pfl-research's loops narrate theirs; return
        its record."""
        cfg, method = self.cfg, self.method
        assert self.fed is not None
        t0 = time.perf_counter()
        # 1. sample: the round's clients, from (run seed, round) alone
        sampled = sample_clients(
            st.server.clients,
            cfg.method.clients_per_round or len(st.server.clients),
            rnd,
            cfg.run.seed,
        )
        # 2.-4. broadcast, local work, share and aggregate: each phase of the method
        # configures its messages, the transport carries them to the clients' handlers,
        # and the server aggregates the replies (run_round; every release is ledgered)
        try:
            rec = run_round(method, st.server, rnd, sampled, transport, st.ledger, self.client_dp)
        except NonFiniteError as exc:
            raise _diverged(rnd, cfg, str(exc)) from exc
        loss = rec.train_loss()
        if loss is not None and not math.isfinite(loss):
            raise _diverged(rnd, cfg, f"mean training loss {loss}")
        values: dict[str, Any] = {"epsilon_rdp": round_epsilon(st.ledger, cfg.dp.delta, memo)}
        # 5. evaluate: the new global model, every eval.every rounds and at the last
        if rnd % cfg.eval.every == 0 or rnd == cfg.method.rounds:
            te = time.perf_counter()
            values.update(method.evaluate(self.net, self.fed, st.server))
            values["seconds_eval"] = time.perf_counter() - te
            values.update(evaluation_epsilons(st.ledger, cfg.dp.delta, memo))
        values["seconds_round"] = time.perf_counter() - t0
        rec = rec.with_values(**values)
        st.elapsed += rec.seconds_round
        st.records.append(rec)
        st.round = rnd
        # 6. checkpoint: the state after this round, atomically
        self._save(st)
        _check_someone_took_part(rnd, rec)
        return rec

    def _run(self, resume: bool) -> dict[str, Any]:
        cfg = self.cfg
        st = self._start(resume)
        resumed_from = st.round if resume else 0
        transport = self.make_transport(self, st.clients)
        rounds = cfg.method.rounds
        memo: dict = {}
        bar = progress_bar(cfg.run.progress, rounds, st.round, f"{cfg.name} [{self.method.name}]")
        try:
            for rnd in range(st.round + 1, rounds + 1):
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
        if st.round == rounds:
            assert self.fed is not None
            final.update(
                self.method.final_metrics(self.net, self.fed, st.server, st.records[-1].values)
            )
        results = self._results(st, final, resumed_from)
        for cb in self.callbacks:
            cb.on_results(self, results)
        return results

    def _privacy(self, st: RunState) -> dict[str, Any]:
        """The results' ``privacy`` section (:func:`fedspectral.privacy.report.privacy_report`)."""
        cfg, method = self.cfg, self.method
        assert self.fed is not None
        info = (
            method.privacy_info({c: len(d) for c, d in self.fed.clients.items()}, st.ledger)
            if len(st.ledger)
            else None
        )
        return privacy_report(
            st.ledger,
            st.client_ledger,
            cfg.dp.delta,
            method_info=info,
            released_objects=released_objects(
                method.name,
                tuple(method.phases),
                bool(cfg.dp.enabled),
                bool(getattr(method, "secure", False)),
            ),
            budget=method.release_budget(),
            records=[r.to_dict() for r in st.records],
            warnings=list(st.server.privacy_warnings),
        )

    def _timings(self, st: RunState) -> dict[str, float]:
        """The results' ``timings``: the rounds' total and mean seconds, per phase, bytes."""
        recs = st.records
        timings: dict[str, float] = {
            "total_seconds": st.elapsed,
            "mean_round_seconds": float(np.mean([r.seconds_round for r in recs])) if recs else 0.0,
        }
        for phase in self.method.phases:
            xs = [r.phases[phase].seconds for r in recs if phase in r.phases]
            if xs:
                timings[f"mean_{phase}_seconds"] = float(np.mean(xs))
        if recs:
            timings["mean_bytes_up_per_round"] = float(np.mean([r.bytes_up_total for r in recs]))
            timings["mean_bytes_down_per_round"] = float(
                np.mean([r.bytes_down_total for r in recs])
            )
        return timings

    def _results(self, st: RunState, final: dict[str, Any], resumed_from: int) -> dict[str, Any]:
        assert self.fed is not None
        out = {
            "name": self.cfg.name,
            "method": self.method.name,
            "engine": "inprocess",
            "config": self.cfg_dict,
            "rounds_done": st.round,
            "resumed_from": resumed_from,
            "data": self.fed.info,
            "final": final,
            "records": [r.to_dict() for r in st.records],
            "privacy": self._privacy(st),
            "timings": self._timings(st),
            "versions": versions(),
        }
        if st.initial is not None:
            out["initial"] = st.initial
        return out


class InProcessTransport:
    """The in-process transport: each addressed client's handler runs in turn, on one
    reused network; a ``secure_sum`` phase is reduced by
    :func:`~fedspectral.fed.releases.in_process_secure_sum` over the replies of
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
        cfg, fed, net = sim.cfg, sim.fed, sim.net
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
                out[cid] = self.reply(phase, rnd, payload, rt)
                continue
            try:
                out[cid] = self.reply(phase, rnd, payload, rt)
            except Exception as exc:  # noqa: BLE001 - a failed client is non-participation
                out[cid] = exc
        return out

    def reply(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        """The client's reply: the method's handler, a ``train`` phase's through the
        runner's post-processor (``on_reply``, as a node applies it)."""
        method, post = self.sim.method, getattr(self.sim, "client_dp", None)
        if post is None or method.phase_kind(phase) != PhaseKind.TRAIN:
            return method.client_phase(phase, rnd, payload, rt)
        return post.on_reply(payload, rt, lambda ref: method.client_phase(phase, rnd, payload, rt))

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


def _check_someone_took_part(rnd: int, rec: RoundRecord) -> None:
    """A round in which clients were asked and none took part (each refused, failed or
    did not answer) stops the run, after its checkpoint: going on would train nothing
    and end as a success.  A round whose clients were all stopped by their budgets asks
    no one and goes on."""
    asked, took_part, failures = round_contributors(rec)
    if asked and not took_part:
        why = "; ".join(f"{c}: {w}"[:300] for c, w in sorted(failures.items())[:8])
        raise RuntimeError(
            f"round {rnd}: no client took part (every one asked refused, failed or did "
            f"not answer): {why}; the run stops here (its checkpoint holds round {rnd}: "
            "fix the cause and resume)"
        )


def _diverged(rnd: int, cfg: ExperimentConfig, why: str) -> NonFiniteError:
    return NonFiniteError(
        f"training diverged in round {rnd} ({why}); try a smaller learning rate "
        f"(optim.lr={cfg.optim.lr:g}) or gradient clipping (optim.grad_clip)"
    )


def show_round(bar: Any, rec: RoundRecord) -> None:
    """One round on the progress bar: the training loss and, at evaluation rounds, KNN
    (also the Flower engine's bar,
    :func:`fedspectral.fed.flower.apps.engine.run_flower_simulation`)."""
    bar.update(1)
    loss = rec.train_loss()
    post = {"loss": float("nan") if loss is None else loss}
    if "knn_projector" in rec.values:
        post["knn_z"] = rec.values["knn_projector"]
        post["knn_h"] = rec.values["knn_backbone"]
    bar.set_postfix({k: f"{v:.3f}" for k, v in post.items()})


def progress_bar(enabled: bool, total: int, initial: int, desc: str) -> Any:
    """A tqdm bar over the rounds (``None`` when not ``enabled``)."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="round", leave=True)
