r"""The Flower runner: the in-process runner's round loop over Flower messages.

:class:`FlowerRunner` is :class:`fedspectral.fed.simulation.Simulation` (data for
evaluation, initial weights, sampling, :func:`~fedspectral.fed.protocol.run_round`,
evaluation, ledger, checkpoints, results) with its transport replaced by
:class:`GridTransport` (passed as its public ``transport`` hook).  Used by
:mod:`.server_app` (imported there lazily: this module imports PyTorch).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid

from fedspectral.config import ExperimentConfig, to_dict
from fedspectral.fed.callbacks import Callback
from fedspectral.fed.flower.apps.grid import (
    NODE_WAIT_S,
    ROUND_TIMEOUT_S,
    exchange,
    wait_for_nodes,
)
from fedspectral.fed.flower.apps.outcome import FAILED, RunFailed, mark_failed
from fedspectral.fed.flower.apps.records import decode_replies, payload_to_recorddict
from fedspectral.fed.flower.node.client_dp import ClientDP, threat_models
from fedspectral.fed.protocol import Method, Payload
from fedspectral.fed.records import RoundRecord
from fedspectral.fed.releases import SecureSumSpec
from fedspectral.fed.simulation import Simulation
from fedspectral.fed.validation import with_output
from fedspectral.inputs import check_output_folder
from fedspectral.results import write_results as write_train_results

__all__ = [
    "FlowerRunner",
    "GridTransport",
    "RoundLog",
    "VoidPhaseCheck",
    "format_initial",
    "format_round",
    "phase_replies",
    "train_server_main",
    "write_results",
]


class GridTransport:
    """``transport(phase, rnd, {cid: Payload}) -> {cid: Payload | Exception}`` over a Grid.

    A phase of kind ``"secure_sum"`` goes through :meth:`secure_sum` instead.

    Parameters
    ----------
    grid : Grid
        The ServerApp's grid.
    method : Method
        Only for :meth:`Method.phase_kind` (the Flower message type of a phase).
    node_of : mapping
        Client id -> Flower node id (from the handshake).
    timeout : float
        Seconds to wait for the replies of one phase (of one stage of a secure sum);
        late clients are missing.
    """

    def __init__(
        self, grid: Grid, method: Method, node_of: Mapping[str, int], timeout: float
    ) -> None:
        self.grid = grid
        self.method = method
        self.node_of = dict(node_of)
        self.cid_of = {n: c for c, n in self.node_of.items()}
        self.timeout = float(timeout)
        self.log: list[dict[str, Any]] = []

    def __call__(
        self, phase: str, rnd: int, payloads: Mapping[str, Payload]
    ) -> dict[str, Payload | BaseException]:
        kind = self.method.phase_kind(phase)
        msgs = []
        for cid, p in payloads.items():
            if cid not in self.node_of:
                raise KeyError(f"client {cid!r} has no Flower node (known: {sorted(self.node_of)})")
            msgs.append(
                Message(
                    payload_to_recorddict(p, phase=phase, round=int(rnd)),
                    dst_node_id=self.node_of[cid],
                    message_type=kind,
                    group_id=f"{rnd}:{phase}",
                )
            )
        return self.send(msgs, rnd, phase, kind)

    def send(
        self, msgs: list[Message], rnd: int, label: str, kind: str
    ) -> dict[str, Payload | BaseException]:
        """Exchange ``msgs`` (one round of messages), decode the replies by client id and
        log the exchange under ``label`` (a phase, or a secure sum's stage)."""
        t0 = time.perf_counter()
        tm: dict[str, Any] = {}
        replies = exchange(self.grid, msgs, timeout=self.timeout, timings=tm)
        out = decode_replies(replies, self.cid_of)
        self.log.append(
            {
                "round": int(rnd),
                "phase": label,
                "kind": kind,
                "sent": len(msgs),
                "answered": len(out),
                "seconds": time.perf_counter() - t0,
                "started_at": tm.get("started_at"),
                "push_seconds": tm.get("push_seconds"),
                "reply_seconds": {
                    self.cid_of[n]: s
                    for n, s in sorted(tm.get("reply_seconds", {}).items(), key=lambda kv: kv[1])
                },
            }
        )
        return out

    def secure_sum(
        self, phase: str, rnd: int, payloads: Mapping[str, Payload], spec: SecureSumSpec
    ) -> tuple[Any, list[str], dict[str, str]]:
        """A ``secure_sum`` phase: the five stages of :mod:`fedspectral.fed.secagg`, one
        round of ``query.secagg`` messages each (:func:`.secure_sum.grid_secure_sum`)."""
        # lazy: pulls in cryptography
        from fedspectral.fed.flower.node.secure_sum import grid_secure_sum

        return grid_secure_sum(self, phase, rnd, payloads, spec, self.method.session_binding())


class FlowerRunner(Simulation):
    """The in-process runner with its transport replaced by Flower messages.

    Everything else -- data for evaluation, initial weights, sampling, the round
    loop, evaluation, privacy ledger, checkpoints, results -- is
    :class:`~fedspectral.fed.simulation.Simulation`'s: this class only passes it its
    public hooks, the transport (:meth:`connect`: the handshake, then a
    :class:`GridTransport`) and a callback that completes the results
    (``engine = "flower"`` and a ``flower`` section: nodes, handshake, per-phase message
    log).  ``client_dp`` (:class:`~fedspectral.fed.flower.node.client_dp.ClientDP`) is
    the runner's post-processor of ``train`` phases, as in process; ``callbacks`` are the
    caller's, called after the runner's own; the grid transport of the run is
    :attr:`grid_transport` once it has started (a callback may change its ``timeout``
    between rounds).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        grid: Grid,
        out_dir: str | Path | None = None,
        round_timeout: float = ROUND_TIMEOUT_S,
        node_wait: float = NODE_WAIT_S,
        client_dp: ClientDP | None = None,
        callbacks: Iterable[Callback] = (),
    ) -> None:
        if not round_timeout > 0 or not node_wait > 0:
            raise ValueError(
                f"round_timeout and node_wait must be > 0, got {round_timeout!r}, {node_wait!r}"
            )
        super().__init__(
            cfg,
            out_dir=out_dir,
            tolerate_failures=True,
            transport=self.connect,
            # VoidPhaseCheck before RoundLog: a round every node refused gets no metrics line
            callbacks=[_FlowerResults(), VoidPhaseCheck(), RoundLog(), *callbacks],
            client_dp=client_dp,
        )
        # no progress bar in the ServerApp's process (nobody sees its terminal): each
        # round goes to Flower's log instead (RoundLog)
        self.cfg = with_output(self.cfg, progress=False)  # valid still: not checked again
        _check_secure(self.method, self.cfg)
        self.grid = grid
        self.round_timeout = float(round_timeout)
        self.node_wait = float(node_wait)
        self.client_dp: ClientDP | None = client_dp
        self.flower: dict[str, Any] = {}
        self.grid_transport: GridTransport | None = None

    def handshake(self) -> dict[str, int]:
        """Send ``query.hello`` (with the config) to every node; return ``{cid: node}``."""

        assert self.fed is not None
        want = sorted(self.fed.clients)
        t0 = time.perf_counter()
        nodes = wait_for_nodes(self.grid, len(want), self.node_wait)
        cfg_json = json.dumps(to_dict(self.cfg))
        msgs = [
            Message(
                RecordDict({"config": ConfigRecord({"json": cfg_json})}),
                dst_node_id=nid,
                message_type="query.hello",
                group_id="hello",
            )
            for nid in nodes
        ]
        replies = exchange(self.grid, msgs, timeout=self.node_wait)
        node_of: dict[str, int] = {}
        errors = []
        for node, r in replies.items():
            if r.has_error():
                errors.append(f"node {node}: {r.error.reason}")
                continue
            cid = str(r.content.config_records["who"]["cid"])
            if cid in node_of:
                raise RunFailed(f"two nodes claim to be {cid} (check partition-ids)")
            node_of[cid] = node
        missing = sorted(set(want) - set(node_of))
        if missing:
            raise RunFailed(
                f"no node answered the handshake for clients {missing} "
                f"within node-wait={self.node_wait:g} s (is each SuperNode's "
                f"ClientApp runtime serving? `--isolation process` needs one "
                f"beside it); errors: {errors}"
            )
        self.flower.update(
            {
                "nodes": {c: str(n) for c, n in sorted(node_of.items())},
                "handshake_seconds": time.perf_counter() - t0,
            }
        )
        return node_of

    def connect(self, sim: Simulation, clients_state: dict[str, dict[str, Any]]) -> GridTransport:
        """The run's transport (``Simulation(transport=...)``): the handshake, then a
        :class:`GridTransport` to the nodes found.  ``clients_state`` is unused: client
        state lives in each node's ``context.state``."""
        node_of = self.handshake()
        self.grid_transport = GridTransport(self.grid, self.method, node_of, self.round_timeout)
        return self.grid_transport


class _FlowerResults(Callback):
    """The Flower runner's part of the results: ``engine``, the ``flower`` section and,
    without client-level DP (whose ``on_results`` adds it), the threat model of each mechanism
    (``privacy.mechanism_threats``; ``privacy.threat_models`` is the ε per threat model
    of a secure share phase and stays as the runner wrote it)."""

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        results["engine"] = "flower"
        if sim.grid_transport is not None:
            sim.flower["messages"] = sim.grid_transport.log
        if sim.client_dp is not None:
            sim.flower["client_dp"] = sim.client_dp.summary()
        else:
            results.setdefault("privacy", {})["mechanism_threats"] = threat_models(
                sim.state.ledger, sim.state.client_ledger
            )
        results["flower"] = sim.flower


def _check_secure(method: Method, cfg: ExperimentConfig) -> None:
    """A secure share phase on Flower is the five-stage exchange, whose threshold
    (``min_contributors``) must exceed half the clients: refused before round 1."""
    threshold = getattr(method, "min_contributors", None)
    if not getattr(method, "secure", False) or not callable(threshold):
        return
    m, j = int(threshold()), int(cfg.partition.num_clients)
    if 2 * m <= j:
        raise ValueError(
            f"config method.params.min_contributors={m}: the Flower transport's "
            f"secure aggregation needs more than half of the {j} clients (its "
            f"Shamir threshold; else a server could have two views of the sum "
            f"certified and unmask one client); use at least {j // 2 + 1}"
        )


def _explicit_keys(grid: Grid) -> set[str] | None:
    """The run-config keys given on this run's command line (``grid.run.override_config``),
    or ``None`` when the grid does not say (then every key applies)."""
    try:
        return set(grid.run.override_config)
    except (AttributeError, NotImplementedError, TypeError):
        return None


#: the name of the app's base experiment (:data:`.run_config.BASE`), and what its log says
SMOKE_NAME = "flower_app"
SMOKE_NOTE = (
    "the app's base experiment (a small CNN on digits, a few rounds) is a smoke run: it "
    "shows the federation works, not that it learns -- digits' untrained features already "
    "reach about 0.85 KNN, and 3 to 8 rounds end a few points above or below it (README)"
)


class RoundLog(Callback):
    """Each round's metrics and ε through Flower's logger (``flwr log``, ``--stream``):
    the untrained network's evaluation as round 0 (logged with round 1's line: it is made
    before the nodes are reached), each round's replies and failures per phase beside its
    metrics, and at the end the final KNN accuracy with its gain over round 0."""

    def __init__(self, log: Callable[..., None] | None = None) -> None:
        if log is None:
            from flwr.common import log as flower_log

            log = flower_log
        self.log: Callable[..., None] = log
        self._initial_logged = False

    def on_state(self, sim: Any, state: Any) -> None:
        cfg = sim.cfg
        dp = (
            f"DP eps={cfg.dp.epsilon} delta={cfg.dp.delta:g}"
            if cfg.dp.enabled and cfg.dp.epsilon is not None
            else f"DP sigma={cfg.dp.sigma}"
            if cfg.dp.enabled
            else "no DP"
        )
        self.log(
            INFO,
            "fedspectral: %s [%s] on %s, %d clients, rounds %d-%d, %s",
            cfg.name,
            sim.method.name,
            cfg.data.dataset,
            cfg.partition.num_clients,
            state.round + 1,
            cfg.method.rounds,
            dp,
        )
        if cfg.name == SMOKE_NAME:
            self.log(INFO, "fedspectral: %s", SMOKE_NOTE)

    def on_round_end(self, sim: Any, rnd: int, record: RoundRecord) -> bool | None:
        if not self._initial_logged:
            self._initial_logged = True
            initial = getattr(getattr(sim, "state", None), "initial", None)
            if initial:
                self.log(INFO, "%s", format_initial(initial, sim.cfg.method.rounds))
        self.log(INFO, "%s", format_round(record, sim.cfg.method.rounds, sim.cfg.dp.delta))
        return False

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        fin = {k: v for k, v in results.get("final", {}).items() if isinstance(v, float)}
        initial = results.get("initial") or {}
        eps = results.get("privacy", {}).get("epsilon_rdp")
        parts = []
        for k, v in fin.items():
            if isinstance(initial.get(k), float):
                parts.append(f" {k}={v:.4f} (round 0: {initial[k]:.4f}, {v - initial[k]:+.4f})")
            else:
                parts.append(f" {k}={v:.4f}")
        self.log(
            INFO,
            "fedspectral: done, %d rounds%s%s",
            results.get("rounds_done", 0),
            "".join(parts),
            f" eps(rdp)={eps:.4g}" if eps is not None else "",
        )
        # the backbone's KNN accuracy (the representation evaluated), else the projector's
        knn = next((k for k in ("knn_backbone", "knn_projector") if k in fin and k in initial), "")
        if knn and fin[knn] <= initial[knn]:
            self.log(
                WARNING,
                "fedspectral: no %s gain over round 0 (the untrained network): this run "
                "did not measurably learn%s",
                knn,
                " (a smoke run: see the note at its start)" if sim.cfg.name == SMOKE_NAME else "",
            )


def phase_replies(record: RoundRecord) -> dict[str, tuple[int, int, dict[str, str]]]:
    """Per phase of a round record: (replies aggregated, participants asked, failures
    ``{cid: why}``).  A secure-sum phase's replies are its ``contributors``."""
    return {
        name: (len(ph.answered()), len(ph.participants), dict(ph.failures))
        for name, ph in record.phases.items()
    }


_CLIENTAPP_ERROR = re.compile(r"^RuntimeError: ClientApp error \d+: ")


def node_reason(why: str) -> str:
    """A failure entry as the node's own words: ``RuntimeError: ClientApp error 2:
    PolicyRefusal: ...`` (how a ClientApp error reply is recorded) -> ``PolicyRefusal: ...``."""
    return _CLIENTAPP_ERROR.sub("", str(why))


def _reasons(failed: Mapping[str, str], width: int = 400) -> str:
    """``client-0, client-1: why`` per distinct reason (the nodes' own words, cut)."""
    by: dict[str, list[str]] = {}
    for cid, why in failed.items():
        by.setdefault(node_reason(why), []).append(str(cid))
    return "; ".join(
        f"{', '.join(sorted(cids))}: {why if len(why) <= width else why[: width - 3] + '...'}"
        for why, cids in sorted(by.items(), key=lambda kv: sorted(kv[1]))
    )


def format_initial(initial: Mapping[str, Any], rounds: int) -> str:
    """The line of round 0: the untrained network's evaluation (``eval.initial``)."""
    parts = [f"round 0/{rounds} (untrained)"]
    for k in ("knn_projector", "knn_backbone", "probe_accuracy"):
        if isinstance(initial.get(k), float):
            parts.append(f"{k}={initial[k]:.4f}")
    return " ".join(parts)


def format_round(record: RoundRecord, rounds: int, delta: float) -> str:
    """One line for a round record: the replies of each phase (``share 2/2 train 2/2``),
    loss, KNN accuracy (at evaluation rounds), ε at δ (the largest over the clients, RDP
    accountant), seconds, and the failures of each phase with their reasons."""
    parts = [f"round {record.round}/{rounds}"]
    counts = phase_replies(record)
    parts += [f"{name} {n}/{asked}" for name, (n, asked, _) in counts.items()]
    loss = record.train_loss()
    if loss is not None:
        parts.append(f"loss={loss:.4f}")
    values = record.values
    for k in ("knn_projector", "knn_backbone"):
        if values.get(k) is not None:
            parts.append(f"{k}={values[k]:.4f}")
    if values.get("epsilon_rdp"):  # 0: no sample-level DP release recorded (none to report)
        parts.append(f"eps={values['epsilon_rdp']:.4g} (delta={delta:g})")
    parts.append(f"{record.seconds_round:.1f}s")
    for name, (_, _, failed) in counts.items():
        if failed:
            parts.append(f"| failed in {name}: {_reasons(failed)}")
    return " ".join(parts)


#: a secure sum's failure entry of a client that did its part but whose sum aborted
#: (:func:`fedspectral.fed.releases.secure_phase`'s wording)
_NO_CONTRIBUTION = "no contribution"


class VoidPhaseCheck(Callback):
    """Stop the run (:class:`~.outcome.RunFailed` with the nodes' reasons, each distinct
    one once) after a round in which a phase asked some clients and every one of them
    refused, failed or did not answer.

    Such a round is not the method: a method whose sharing phase every node refuses trains
    without what it shares, one whose ``train`` phase every node
    refuses trains nothing, and the run would end "done" with the untrained network and
    the budget spent.  So the ServerApp raises, and Flower marks the run
    ``finished:failed`` (``flwr ls``).  A phase some clients answered goes on (the others
    are non-participation, listed in the round's line and record), and so does a secure
    sum that some answered but too few survived (its abort is ledgered).  The round's
    checkpoint is written before the check (resume after fixing the cause).
    """

    def on_round_end(self, sim: Any, rnd: int, record: RoundRecord) -> bool | None:
        for name, (n, asked, failed) in phase_replies(record).items():
            participants = record.phases[name].participants
            # each participant failed itself (a secure sum's survivors that an abort left
            # out are listed as "no contribution": theirs was not refused)
            own = [c for c in participants if failed.get(c, _NO_CONTRIBUTION) != _NO_CONTRIBUTION]
            if asked and n == 0 and len(own) == len(participants):
                plural = "s" if len({node_reason(w) for w in failed.values()}) > 1 else ""
                raise RunFailed(
                    f"round {rnd}: every client asked in {sim.method.name}'s {name!r} phase "
                    f"({asked}) refused or failed, so the round would not be "
                    f"{sim.method.name}; the run stops. Reason{plural} "
                    f"({_reasons(failed, 600)}){_hint(failed)}"
                )
        return False


def _hint(failed: Mapping[str, str]) -> str:
    """What the user of the Flower app can do about the nodes' reasons (or nothing)."""
    text = " ".join(failed.values())
    if "allow-nonprivate: false" in text:
        return (
            ". A node's policy refuses a release without noise: run with dp=true (the "
            "app's default), or give the nodes a policy that allows it (docs/flower.md)"
        )
    return ""


def train_server_main(
    grid: Grid, context: Context, config: Any = None, **options: Any
) -> dict[str, Any]:
    """ServerApp body of ``task = "train"``: run the experiment, write its results.

    ``options`` (from :func:`fedspectral.fed.flower.apps.engine.run_flower_simulation`, or a
    ServerApp of the caller's) override the run config: ``out_dir``, ``resume``,
    ``round_timeout``, ``node_wait``, ``client_dp``, ``write``, and ``callbacks`` (handed
    to :class:`FlowerRunner`; their ``on_state`` receives the run's state).
    Run-config keys (each value checked against its type, :func:`.run_config.run_value`):
    the experiment's (:mod:`.run_config`: ``num-server-rounds``, ``method``, ``lr``,
    ``dp``, ``dp-epsilon``, ..., ``config``, ``set``), ``out-dir`` (default: a folder of its
    own per run, ``<run.out or results/<name>>/run-<run id>``, never another run's),
    ``round-timeout``, ``node-wait``, ``resume`` (needs ``out-dir``), and client-level DP's
    ``dp-clip``, ``dp-noise-multiplier``, ``dp-seed``, ``dp-placement`` (``"server"`` or
    ``"client"``).  Each round's metrics and ε go to Flower's log (:class:`RoundLog`); a
    phase every node refused stops the run (:class:`VoidPhaseCheck`).
    """
    # lazy: pulls in scikit-learn
    from fedspectral.fed.flower.apps.run_config import (
        client_dp_options,
        experiment_config,
        run_value,
    )

    rc = context.run_config

    def opt(name: str, key: str) -> Any:
        return options[name] if name in options else run_value(rc, key)

    out_opt = opt("out_dir", "out-dir") or None
    resume = bool(opt("resume", "resume"))
    round_timeout = float(opt("round_timeout", "round-timeout"))
    node_wait = float(opt("node_wait", "node-wait"))
    if resume and out_opt is None and "out_dir" not in options:
        raise ValueError(
            "run config resume=true needs out-dir: the folder of the run to continue "
            "(without it each run writes to a new folder of its own, run-<run id>)"
        )
    client_dp = options.get("client_dp")
    dp_opts = client_dp_options(rc) if "client_dp" not in options else None
    cfg = config if config is not None else experiment_config(rc, _explicit_keys(grid))
    out_dir = out_opt
    if out_dir is None and "out_dir" not in options:
        out_dir = str(cfg.out_dir() / f"run-{int(getattr(context, 'run_id', 0))}")
    if out_dir is not None:  # a read-only or misnamed folder: refused before round 1
        check_output_folder(out_dir, "run config out-dir" if out_opt else "the run's folder")
    if client_dp is None and dp_opts is not None:
        client_dp = ClientDP(delta=cfg.dp.delta, **dp_opts)
    runner = FlowerRunner(
        cfg,
        grid,
        out_dir=out_dir,
        round_timeout=round_timeout,
        node_wait=node_wait,
        client_dp=client_dp,
        callbacks=options.get("callbacks", ()),
    )
    try:
        results = runner.run(resume=resume)
    except Exception as exc:
        if out_dir is not None and Path(out_dir).is_dir():
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            try:
                where = mark_failed(out_dir, line).resolve()
            except OSError as mark:  # a full disk: the run's own error stays the one raised
                exc.add_note(f"its folder could not be marked failed ({mark})")
            else:
                exc.add_note(
                    f"its folder {where.parent} is marked failed ({where.name}; "
                    f"`fedspectral status {where.parent}` exits 1)"
                )
        raise
    if options.get("write", True) and out_dir is not None:
        write_results(results, out_dir)
        (Path(out_dir) / FAILED).unlink(missing_ok=True)  # a resumed run that now ended
        from flwr.common import log

        log(INFO, "fedspectral: results in %s", Path(out_dir).resolve())
    return results


def write_results(results: Mapping[str, Any], out_dir: str | Path) -> None:
    """The in-process runner's result files (those ``fedspectral train`` writes:
    ``results.json``, ``rounds.csv``, ``config.yaml``, ``convergence.png``)."""
    write_train_results(dict(results), out_dir)
