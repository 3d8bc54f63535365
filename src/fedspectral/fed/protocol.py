r"""What a federated method is: the phases of a round, as pure handlers and reducers.

A round of any method in :mod:`fedspectral.fed.methods` is an ordered list of
*phases*.  Each phase is one exchange ``server -> some clients -> server``:

1. the server picks the phase's participants
   (:meth:`Method.participants`),
2. builds one :class:`Payload` per participant (:meth:`Method.configure`),
3. each client answers with a :class:`Payload` (:meth:`Method.client_phase`),
4. the server folds the replies into its :class:`ServerState`
   (:meth:`Method.aggregate`).

FedSC (the FedSC paper, Algorithm 1) has two phases, ``("share", "train")``: in
``share`` (a *query*: nothing is trained) the clients upload their DP
correlation matrices :math:`\tilde R_j`; in ``train`` each sampled client
receives :math:`\theta^{t-1}` and its own :math:`\tilde R_{-j}` and returns its
locally trained weights.  FedAvg+SC has one phase, ``("train",)``.

Runners only move messages.  :func:`run_round` is the single round loop used
by the in-process runner (:mod:`fedspectral.fed.simulation`) and by the Flower
server (:mod:`fedspectral.fed.flower`): a runner supplies a *transport*, a
callable ``transport(phase, rnd, {cid: Payload}) -> {cid: Payload | Exception}``
that delivers each payload to its client and returns the reply (or the error).
Everything else -- participation, aggregation, privacy accounting, byte counts,
timings, treatment of failed clients -- happens here, identically whatever the
transport.  A Flower adapter maps a phase of kind ``"train"`` to a Flower
``train`` message and a phase of kind ``"query"`` to a ``query`` message, and a
:class:`Payload` to an ``ArrayRecord`` (arrays), a ``MetricRecord`` (metrics) and
a ``ConfigRecord`` (config).

Secure sums and privacy releases
--------------------------------
What the server does with a phase whose replies it may only see summed, and with
the privatised releases clients report, lives in :mod:`fedspectral.fed.releases`
(import them from there).

Randomness
----------
Client-side randomness is derived from ``(seed, round, cid, phase)``, never carried over
from earlier rounds (:mod:`fedspectral.fed.randomness`: :func:`client_generators`,
:func:`derive_seed`, :func:`sample_clients`, importable from here too).
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedspectral.config import is_valid
from fedspectral.config_checks import MethodParams
from fedspectral.fed.manifest import Manifests, train_manifests
from fedspectral.fed.phases import RoundPhase, TrainPhase, phases_of_kind
from fedspectral.fed.randomness import client_generators, derive_seed, sample_clients
from fedspectral.fed.records import PhaseRecord, RoundRecord
from fedspectral.fed.releases import (
    PhaseRelease,
    Scalar,
    SecureSumSpec,
    over_budget,
    reconcile_release,
    record_release,
    secure_phase,
)
from fedspectral.fed.state import ServerState
from fedspectral.fed.weights import arrays_to_net
from fedspectral.kinds import PHASE_KINDS, PhaseKind

if TYPE_CHECKING:
    from fedspectral.config import ExperimentConfig
    from fedspectral.fed.postprocess import PostProcessor

__all__ = [
    "PHASE_KINDS",
    "ClientRuntime",
    "Method",
    "Payload",
    "RoundPhase",
    "ServerState",
    "TrainPhase",
    "Transport",
    "client_generators",
    "derive_seed",
    "run_round",
    "sample_clients",
]


# --------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------
@dataclass
class Payload:
    """One message between the server and a client.

    Parameters
    ----------
    arrays : dict[str, numpy.ndarray]
        Tensors (model weights under ``"w.<parameter name>"``, correlation
        matrices, ...).  Maps to a Flower ``ArrayRecord``.
    metrics : dict[str, int | float]
        Numbers the receiver may average or log (``"num-examples"``, losses).
        Maps to a ``MetricRecord``.
    config : dict[str, int | float | str | bool]
        Instructions and metadata (learning rate, α, release reports).  Maps to
        a ``ConfigRecord``.
    release : PhaseRelease, optional
        The privacy release the message reports (a reply's): the object itself.  Its
        wire form is the ``release.*`` keys of ``config`` (:meth:`PhaseRelease.config`),
        written here when a release is given and parsed here, once, when only the keys
        are (a reply decoded from the wire); nothing else reads those keys.
    """

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    metrics: dict[str, int | float] = field(default_factory=dict)
    config: dict[str, Scalar] = field(default_factory=dict)
    release: PhaseRelease | None = None

    def __post_init__(self) -> None:
        if self.release is not None:  # the object is the release; the keys its wire form
            self.config = {**self.config, **self.release.config()}  # the caller's dict kept
        elif "release.sigma" in self.config:  # from the wire: parsed once, here
            try:
                self.release = PhaseRelease.from_config(self.config)
            except (KeyError, TypeError, ValueError) as exc:  # an undecodable reply
                raise ValueError(f"malformed release report in a payload: {exc}") from None

    def nbytes(self) -> int:
        """Bytes of the array payload (what dominates the wire; scalars not counted)."""
        return int(sum(np.asarray(a).nbytes for a in self.arrays.values()))

    def weights(self, prefix: str = "w.") -> dict[str, np.ndarray]:
        """The arrays whose key starts with ``prefix``, with the prefix removed."""
        n = len(prefix)
        return {k[n:]: v for k, v in self.arrays.items() if k.startswith(prefix)}

    @staticmethod
    def with_weights(weights: Mapping[str, np.ndarray], prefix: str = "w.", **kw: Any) -> Payload:
        """A payload holding ``weights`` under ``prefix`` (plus
        ``arrays``/``metrics``/``config``)."""
        arrays = {f"{prefix}{k}": v for k, v in weights.items()}
        arrays.update(kw.pop("arrays", {}))
        return Payload(arrays=arrays, **kw)


# --------------------------------------------------------------------------------------
# client runtime
# --------------------------------------------------------------------------------------
@dataclass
class ClientRuntime:
    """What a client handler may use.  Owned by the runner, reused across rounds.

    Parameters
    ----------
    cid : str
        Client id (also its privacy-ledger party name).
    data : Any
        The client's local data (a :class:`fedspectral.data.ImageData`).
    net : torch.nn.Module
        A model object to load weights into and train; runners reuse one per
        process (no per-round model copies).  Handlers must load the weights
        they are sent before using it.
    augment : Callable
        ``augment(batch, generator) -> batch`` (SimCLR views).
    generator : torch.Generator
        Batch order and augmentations of this (round, phase); see
        :func:`client_generators`.
    noise_rng : numpy.random.Generator or SecureNoise
        DP noise source of this (round, phase): seeded numpy in experiments, the
        secure source on a device (:func:`client_generators`).
    state : dict[str, numpy.ndarray]
        Persistent, method-owned client state (saved in checkpoints; in Flower it
        lives in ``context.state``).
    config : ExperimentConfig
        The experiment configuration (:class:`fedspectral.config.ExperimentConfig`).
    device : str
        Torch device for local computation.
    releases : tuple of PhaseRelease, optional
        The releases this answer makes as the party that answers priced and ledgered them
        (a Flower node: under its own relation, before any data was read); the handler
        draws its noise from these objects (:meth:`Method.client_releases`).  ``None``:
        the method's own (:meth:`Method.releases`).
    """

    cid: str
    data: Any
    net: Any
    augment: Callable[..., Any]
    generator: Any
    noise_rng: Any
    state: dict[str, np.ndarray]
    config: ExperimentConfig
    device: str = "cpu"
    releases: tuple[PhaseRelease, ...] | None = None


# --------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------
class Method(ABC):
    """A federated method: the phases of a round (client handlers + server reducers).

    Subclasses set :attr:`name` and :attr:`Phase` and implement the abstract hooks.  The
    method's whole contract is here: its phases, the releases each phase makes
    (:meth:`releases`) and what a reply may carry (:meth:`reply_manifests`); runners and
    nodes read them.  Hooks must not perform I/O or keep hidden state between calls:
    everything a later round needs lives in :class:`ServerState` (server) or in
    ``ClientRuntime.state`` (client), so checkpoints and transports see it.
    """

    #: registry name (``fedsc``, ``fedavg_sc``, ...)
    name: str = ""
    #: which pillar the method belongs to: ``"ssl"`` (trains a network) or ``"pca"``
    pillar: ClassVar[str] = "ssl"
    #: the phases of one round, in order, each with its kind (a
    #: :class:`~fedspectral.fed.phases.RoundPhase`: ``Phase.TRAIN == "train"``)
    Phase: ClassVar[type[RoundPhase]] = TrainPhase
    #: the phases' names, in order (from :attr:`Phase`; never set on its own)
    phases: ClassVar[tuple[str, ...]] = ("train",)
    #: client metrics of a train reply beyond its loss (un-noised training statistics)
    reported_metrics: ClassVar[tuple[str, ...]] = ()
    #: ``{ledger mechanism: whom its ε holds against}`` of the method's releases
    threat_models: ClassVar[dict[str, str]] = {}
    #: the typed ``method.params``: a frozen dataclass of types, defaults and constraints
    Params: ClassVar[type[MethodParams]] = MethodParams
    #: every parameter's default (from :attr:`Params`)
    default_params: ClassVar[dict[str, Any]] = {}
    #: switches added later, at values that leave the computation as before: not hashed
    neutral_params: ClassVar[dict[str, Any]] = {}
    #: renamed parameter values ``{param: {new: old}}`` (from :attr:`Params`): the old one
    #: is read as the new one and hashed in the fingerprint, so older runs stay valid
    renamed_values: ClassVar[dict[str, dict[Any, Any]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "phases" in cls.__dict__ or not (
            isinstance(cls.Phase, type) and issubclass(cls.Phase, RoundPhase)
        ):
            raise TypeError(
                f"method {cls.__name__} must declare its round as Phase, a RoundPhase enum "
                f"whose members carry their kind (NAME = 'name', PhaseKind.X), not by "
                f"names alone (fedspectral.fed.phases)"
            )
        cls.phases = tuple(p.value for p in cls.Phase)
        cls.default_params = cls.Params.defaults()
        cls.renamed_values = cls.Params.renamed_values

    def __init__(self, config: ExperimentConfig) -> None:
        self.config = config
        params = getattr(getattr(config, "method", None), "params", None) or {}
        #: the typed parameters (:attr:`Params`); a ValidConfig's were checked already
        if is_valid(config):
            self.params = self.Params(**params)
        else:
            self.params = self.Params.from_mapping(params, config, self.name)

    @classmethod
    def validate_params(
        cls, params: Mapping[str, Any], config: ExperimentConfig | None = None
    ) -> dict[str, Any]:
        """``params`` completed and checked by :attr:`Params` (``ValueError`` naming the
        key), as the plain mapping a config holds."""
        return cls.Params.from_mapping(params, config, cls.name).to_dict()

    def layout_clients(self, parts: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Sample indices of each simulated client, given the partition (default: it)."""
        return list(parts)

    # -- runner hooks (defaults: nothing) ------------------------------------------------
    def extra_metrics(self, net: Any, fed: Any) -> dict[str, float]:
        """Metrics of the global model ``net`` (weights loaded) beside the KNN accuracies,
        at each evaluation and for the initial model; ``fed``: the run's
        :class:`~fedspectral.fed.federation.Federation` (default none; SC: its objective)."""
        return {}

    def privacy_info(self, client_sizes: Mapping[str, int], ledger: Any) -> dict[str, Any]:
        """Entries the method adds to the results' ``privacy`` section once ``ledger``
        (the run's sample-level ledger) holds releases, given the clients' sizes
        (default: none; FedSC reports each client's noise σ)."""
        return {}

    def privacy_plan(self, n: int) -> dict[str, Any] | None:
        """What a client with ``n`` samples is planned to release over the run (checks
        before any data is loaded): ``{"releases", "sigma", "sensitivity", "neighbouring"}``,
        or ``None``: no calibrated release (default)."""
        return None

    @classmethod
    def phase_kind(cls, phase: str) -> PhaseKind:
        """The kind :attr:`Phase` declares for ``phase`` (``train``: a Flower ``train``
        message, post-processed; ``query``; ``secure_sum``); ``ValueError`` for a phase
        the method does not have."""
        if phase not in cls.phases:
            raise ValueError(f"unknown phase {phase!r} of method {cls.name!r}: {cls.phases}")
        return cls.Phase(phase).kind

    @classmethod
    def phases_of_kind(cls, kind: PhaseKind | str) -> tuple[str, ...]:
        """The names of the method's phases of ``kind``, in round order."""
        return phases_of_kind(cls.Phase, kind)

    def secure_sum_spec(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> SecureSumSpec:
        """What a ``secure_sum`` phase sums (only for methods that have one)."""
        raise NotImplementedError(f"{self.name} has no secure-sum phase ({phase!r})")

    def aggregate_secure(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        total: np.ndarray | None,
        contributors: Sequence[str],
    ) -> dict[str, float]:
        """Fold the sum of a ``secure_sum`` phase into ``state`` (``total`` None: aborted,
        fold nothing in); return metrics."""
        raise NotImplementedError(f"{self.name} has no secure-sum phase ({phase!r})")

    def secure_model_releases(
        self, phase: str, state: ServerState
    ) -> list[tuple[str, int, PhaseRelease]]:
        """Every release of ``phase`` under the secure-aggregation threat model so far,
        ``[(party, round, release)]``, after each completed secure sum (default: none)."""
        return []

    # -- the workload: data, model, evaluation (defaults: images, a network, KNN) ------
    def load_federation(self) -> Any:
        """The run's data, split among its clients: an object with ``clients`` (``{cid:
        data}``, each sized by ``len``), ``info`` (the results' ``data`` section),
        ``augment`` and ``public``; or ``None`` (the default): the configured image data
        set, which the runner loads
        (:func:`fedspectral.fed.federation.prepare_federation`)."""
        return None

    @abstractmethod
    def build_net(self) -> Any:
        """A freshly initialised model (its ``state_dict`` gives the global weights), or
        ``None`` for a method that trains no network (the PCA methods)."""

    def evaluate(self, net: Any, fed: Any, state: ServerState) -> dict[str, float]:
        """Metrics of the global model of ``state`` (after a round, every ``eval.every``
        rounds and at the last, and of the initial state), ``net`` the runner's model
        object, ``fed`` the run's data (default: KNN accuracies and
        :meth:`extra_metrics`)."""
        from fedspectral.fed.evaluation import evaluate_knn  # lazy: pulls in torch

        arrays_to_net(net, self.global_weights(state))
        out = dict(evaluate_knn(net, fed, self.config))
        out.update(self.extra_metrics(net, fed))
        return out

    def final_metrics(
        self, net: Any, fed: Any, state: ServerState, last: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The results' ``final`` section once every round ran, ``last`` the values of the
        last round's record (default: its KNN accuracies and, with ``eval.linear_probe``,
        the linear probe's accuracy and seconds)."""
        from fedspectral.fed.evaluation import linear_probe_accuracy  # lazy: pulls in torch

        out: dict[str, Any] = {k: v for k, v in last.items() if k.startswith("knn_")}
        if self.config.eval.linear_probe:
            arrays_to_net(net, self.global_weights(state))
            t = time.perf_counter()
            out.update(linear_probe_accuracy(net, fed, self.config))
            out["seconds_probe"] = time.perf_counter() - t
        return out

    # -- server -----------------------------------------------------------------------
    def init_server_state(
        self, weights: Mapping[str, np.ndarray], client_sizes: Mapping[str, int]
    ) -> ServerState:
        """Round-0 server state: global weights, client ids, sizes and
        :math:`q_j = |D_j| / \\sum_k |D_k|`."""
        sizes = {str(c): int(n) for c, n in client_sizes.items()}
        bad = [c for c, n in sizes.items() if n <= 0]
        if bad:
            raise ValueError(f"clients with no data: {bad}")
        total = sum(sizes.values())
        return ServerState(
            weights={k: np.array(v, copy=True) for k, v in weights.items()},
            clients=list(sizes),
            client_sizes=sizes,
            q={c: n / total for c, n in sizes.items()},
        )

    def public_size(self) -> int:
        """Images of a public split the server needs (default 0: none): when positive,
        :func:`fedspectral.fed.federation.prepare_federation` draws that many training
        images no client holds (stratified; outside ``data.max_train``'s subset when it
        leaves enough, else carved out before partitioning), handed to
        :meth:`prepare_server` before round 1."""
        return 0

    def prepare_server(  # noqa: B027 - an optional hook: by default the server does nothing
        self, state: ServerState, public: Any, augment: Callable[..., Any], seed: int
    ) -> None:
        """Server-side work on the public split before round 1, folded into the
        round-0 ``state`` (default: nothing).  ``public`` is an
        :class:`~fedspectral.data.ImageData`, ``augment`` the view generator,
        ``seed`` the run's seed (derive any randomness from it)."""

    def participants(
        self,
        phase: str,
        rnd: int,
        sampled: Sequence[str],
        all_clients: Sequence[str],
        state: ServerState,
    ) -> list[str]:
        """Clients taking part in ``phase`` of round ``rnd`` (default: the sampled ones)."""
        return list(sampled)

    @abstractmethod
    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        """One payload per participant of ``phase``."""

    @abstractmethod
    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        """Fold the replies of the clients that answered into ``state`` (in place);
        return metrics.  ``replies`` may be empty (every participant failed)."""

    def global_weights(self, state: ServerState) -> dict[str, np.ndarray]:
        """The weights to evaluate after a round (default: ``state.weights``)."""
        return state.weights

    # -- client -----------------------------------------------------------------------
    @abstractmethod
    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        """The client handler of ``phase``: compute the reply to ``payload``."""

    # -- privacy: the method's contract ------------------------------------------------
    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        """The releases a client with ``n`` samples makes when it answers ``phase`` (its
        noise, sensitivity, relation: the one place they are computed; default none).
        ``neighbouring``: account under this relation instead of :attr:`neighbouring`
        (a node's policy fixes its own).  A release of σ = 0 is un-noised."""
        return []

    def client_releases(self, phase: str, rt: ClientRuntime) -> list[PhaseRelease]:
        """The releases a client handler makes its answer with: those the answering party
        ledgered (``rt.releases``: the same objects, so the noise drawn, the report sent
        and the ledger entry cannot differ), else :meth:`releases` for its data."""
        ledgered = getattr(rt, "releases", None)  # a stand-in runtime may have none
        if ledgered is not None:
            return list(ledgered)
        return self.releases(phase, len(rt.data))

    @property
    def neighbouring(self) -> str:
        """The relation of the method's releases (its ``neighbouring`` parameter, or zero_out)."""
        return str(getattr(self.params, "neighbouring", "zero_out"))

    def release_variant(self, phase: str) -> str:
        """Which of ``phase``'s manifests a reply under this configuration needs, client-level
        DP aside: ``"dp"`` (noised on the client), ``"secure"`` (a secure sum's summand) or
        ``"plain"`` (default)."""
        return "plain"

    @classmethod
    def reply_manifests(cls) -> Manifests:
        """``{(phase, variant): items}``: every object a reply may carry and its protection
        (:mod:`fedspectral.fed.manifest`; a node sends nothing else).  Default: the train
        phases' of kind train (:func:`~fedspectral.fed.manifest.train_manifests`)."""
        return train_manifests(
            cls.name, cls.reported_metrics, phases=cls.phases_of_kind(PhaseKind.TRAIN)
        )

    def planned_release(
        self, phase: str, rnd: int, state: ServerState, cid: str
    ) -> PhaseRelease | None:
        """The release client ``cid`` makes when it answers ``phase`` (its first
        :meth:`releases`), or ``None``.  Recorded in the ledger when the request is
        sent."""
        planned = self.releases(phase, int(state.client_sizes[cid]))
        return planned[0] if planned else None

    def release_budget(self) -> tuple[float, float, str] | None:
        """``(epsilon, delta, accountant)`` no party's planned releases may exceed (or None)."""
        return None

    def session_binding(self) -> str:
        """What a secure sum's session must carry so that every contributor was asked the
        same (default ``""``: nothing; the distributed PCA model: the configuration's
        fingerprint, which sets each holder's share of the noise).  A node refuses a
        session that does not carry its own."""
        return ""

    def node_party(self, cid: str) -> str:
        """Whom a node's ledger names for client ``cid``'s releases (default ``cid``; the
        PCA methods: the node's users, ``users@node<j>``, as the LDP-PCA app names them, so
        one budget covers both)."""
        return cid


# --------------------------------------------------------------------------------------
# the round loop
# --------------------------------------------------------------------------------------
Transport = Callable[[str, int, dict[str, Payload]], Mapping[str, "Payload | BaseException"]]


def run_round(
    method: Method,
    state: ServerState,
    rnd: int,
    sampled: Sequence[str],
    transport: Transport,
    ledger: Any,
    post: PostProcessor | None = None,
) -> RoundRecord:
    """Run round ``rnd`` of ``method``: every phase through ``transport``.

    Each phase of :attr:`Method.phases` (FedSC: ``share`` then ``train``) goes through
    the same steps: (1) the method picks the phase's participants among the sampled
    clients; (2) the release each would make is priced, and a client whose budget it
    would exceed is stopped; (3) the server builds each participant's message
    (:meth:`Method.configure`); (4) the planned releases are recorded in the ledger --
    a release counts when it is sent; (5) the messages go out through ``transport``
    and the replies come back (a secure-sum phase runs its masked exchange instead);
    (6) the method aggregates the replies into ``state`` (:meth:`Method.aggregate`).

    Parameters
    ----------
    method, state
        The method and its server state (updated in place).
    rnd : int
        Round index, starting at 1 (the paper's :math:`t`).
    sampled : sequence of str
        Clients sampled for this round (:func:`sample_clients`).
    transport : callable
        ``transport(phase, rnd, {cid: Payload}) -> {cid: Payload | Exception}``.
        A client missing from the answer, or answered by an exception, did not
        participate: it is left out of the aggregation (FedSC keeps its stale
        :math:`\\tilde R_j`) and listed under ``failures``.
    ledger : PrivacyLedger
        Releases reported in replies are recorded here (party = client id).
    post : PostProcessor, optional
        Applied to the phases of kind ``"train"``: its ``on_configure`` to their messages
        after step (3), its ``on_aggregate`` in place of step (6)
        (:mod:`fedspectral.fed.postprocess`: client-level DP).

    Returns
    -------
    RoundRecord
        ``round``, ``sampled``, and per phase a :class:`~fedspectral.fed.records.PhaseRecord`:
        ``participants``, ``failures`` (``{cid: message}``), ``bytes_down``/``bytes_up``
        (``{cid: bytes}``), ``seconds`` (transport + aggregation wall time), ``metrics``
        (from :meth:`Method.aggregate`); ``bytes_down``/``bytes_up`` per client summed
        over the phases.
    """
    if rnd < 1:
        raise ValueError(f"rounds are numbered from 1, got {rnd!r}")
    known = set(state.clients)
    unknown = [c for c in sampled if c not in known]
    if unknown:
        raise ValueError(f"sampled clients not in the federation: {unknown}")
    state.round = int(rnd)
    state.sampled = list(sampled)
    phases: dict[str, PhaseRecord] = {}
    down_total: dict[str, int] = {}
    up_total: dict[str, int] = {}
    for phase in method.phases:
        t0 = time.perf_counter()
        # 1. who takes part in this phase
        cids = method.participants(phase, rnd, sampled, state.clients, state)
        if not cids:
            continue
        # 2. price each participant's release; stop those it would take over budget
        planned = {c: method.planned_release(phase, rnd, state, c) for c in cids}
        stopped = over_budget(method, ledger, planned)
        if stopped:
            cids = [c for c in cids if c not in stopped]
            if not cids:
                phases[phase] = PhaseRecord(
                    kind=PhaseKind(method.phase_kind(phase)),
                    participants=(),
                    budget_stopped=tuple(stopped),
                    failures={},
                    bytes_down={},
                    bytes_up={},
                    seconds=time.perf_counter() - t0,
                    seconds_clients=0.0,
                    metrics={},
                )
                continue
        # 3. the server's message to each participant
        payloads = method.configure(phase, rnd, state, cids)
        if set(payloads) != set(cids):
            raise RuntimeError(
                f"{method.name}.configure({phase!r}) returned payloads for "
                f"{sorted(payloads)}, expected {sorted(cids)}"
            )
        if post is not None and method.phase_kind(phase) == PhaseKind.TRAIN:
            post.on_configure(phase, rnd, state, payloads)
        # 4. a release counts when it is sent: record the planned ones before the transport
        sent = {
            c: record_release(ledger, c, rel, rnd)
            for c in cids
            if (rel := planned.get(c)) is not None
        }
        # 5-6. send, collect the replies, aggregate them into the server state
        t1 = time.perf_counter()
        if method.phase_kind(phase) == PhaseKind.SECURE_SUM:
            rec = secure_phase(method, state, rnd, phase, cids, payloads, transport, ledger, t0, t1)
        else:
            rec = _exchange_phase(
                method, state, rnd, phase, cids, payloads, transport, ledger, sent, t0, t1, post
            )
        rec = replace(rec, releases_sent=len(sent), budget_stopped=tuple(stopped))
        phases[phase] = rec
        for total, counts in ((down_total, rec.bytes_down), (up_total, rec.bytes_up)):
            for c, b in counts.items():
                total[c] = total.get(c, 0) + b
    return RoundRecord(int(rnd), tuple(sampled), phases, down_total, up_total)


def round_contributors(record: RoundRecord) -> tuple[bool, set[str], dict[str, str]]:
    """Of a :func:`run_round` record: whether any phase had participants, the clients
    whose replies some phase aggregated (a secure-sum phase: its ``contributors``), and
    every phase's failures (``{"<cid> in <phase>": why}``)."""
    asked, took_part, failures = False, set(), {}
    for name, ph in record.phases.items():
        asked = asked or bool(ph.participants)
        took_part.update(ph.answered())
        failures.update({f"{c} in {name}": why for c, why in ph.failures.items()})
    return asked, took_part, failures


def _exchange_phase(
    method: Method,
    state: ServerState,
    rnd: int,
    phase: str,
    cids: Sequence[str],
    payloads: dict[str, Payload],
    transport: Transport,
    ledger: Any,
    sent: Mapping[str, Any],
    t0: float,
    t1: float,
    post: PostProcessor | None = None,
) -> PhaseRecord:
    """One ``train`` or ``query`` phase: the transport's replies, their releases reconciled
    with those recorded at send time, the method's fold (a ``train`` phase's through
    ``post``); the phase's record."""
    answers = transport(phase, rnd, payloads)
    t2 = time.perf_counter()
    replies: dict[str, Payload] = {}
    failures: dict[str, str] = {}
    for cid in cids:  # participant order, whatever order the transport answered in
        ans = answers.get(cid) if hasattr(answers, "get") else None
        if isinstance(ans, Payload):
            replies[cid] = ans
        elif ans is None:
            failures[cid] = "no reply"
        else:
            failures[cid] = f"{type(ans).__name__}: {ans}"
    for cid, rep in replies.items():
        if cid not in sent:
            record_release(ledger, cid, rep.release, rnd)
        elif rep.release is not None:
            reconcile_release(ledger, cid, sent[cid], rep.release, rnd)
    if post is not None and method.phase_kind(phase) == PhaseKind.TRAIN:
        fold = functools.partial(method.aggregate, phase, rnd, state)
        metrics = post.on_aggregate(phase, rnd, state, cids, replies, fold)
    else:
        metrics = method.aggregate(phase, rnd, state, replies)
    t3 = time.perf_counter()
    return PhaseRecord(
        kind=PhaseKind(method.phase_kind(phase)),
        participants=tuple(cids),
        failures=failures,
        bytes_down={c: payloads[c].nbytes() for c in cids},
        bytes_up={c: replies[c].nbytes() for c in replies},
        seconds=t3 - t0,
        seconds_clients=t2 - t1,
        metrics={k: float(v) for k, v in metrics.items()},
    )
