r"""Client-level DP on model updates, Flower's way (fixed clipping, central Gaussian noise).

This is what ``flwr.serverapp.strategy.DifferentialPrivacyServerSideFixedClipping``
does to a FedAvg round (McMahan et al. 2018, "DP-FedAvg"), applied to the
``train`` phase of any fedspectral method:

1. each returned model is clipped towards the global model it started from,
   :math:`\theta_j \leftarrow \theta + \Delta_j \min(1, C/\|\Delta_j\|_2)`,
   :math:`\Delta_j = \theta_j - \theta` (Flower's ``compute_clip_model_update``);
2. the method aggregates as usual (plain mean over the :math:`m` clients that
   answered -- a weighted mean is refused, its sensitivity is not :math:`C/m`);
3. Gaussian noise of standard deviation :math:`zC/m` (Flower's ``compute_stdv``)
   is added to every floating-point weight of the new global model.

Accounting: each round is one ``flwr.serverapp.GaussianPrivacyEvent`` (noise
multiplier :math:`z`, ``sample_size = m``, ``population_size`` = number of
clients) composed by Flower's client-level ``RdpAccountant`` (no sampling
amplification: ``SamplingMethod.NO_AMPLIFICATION``, add-or-remove-one client);
the same event is recorded in the run's *client-level*
:class:`~fedspectral.privacy.PrivacyLedger` (``unit="client"``) for every participating
client (party = client id, mechanism ``"flower/client-dp-fixed-clipping"``, noise
multiplier :math:`z`).  That ledger is kept apart from the sample-level one of
DP-CalR: the two guarantees are in different units and are reported side by side,
never composed.  With full participation the
ledger's RDP ε of these releases equals the Flower accountant's ε (tested).
Units: this event protects a whole client (add/remove its update, sensitivity
:math:`C`); a client's DP-CalR releases protect one of its samples.  Read as a
sample-level guarantee, one changed sample can move a clipped update anywhere in
the :math:`C`-ball (sensitivity up to :math:`2C`, noise multiplier :math:`z/2`).

Threat model: this is **server-side noise, a trusted server**.  The server
receives every client's clipped, *un-noised* update and adds the noise to the
aggregate; the ε of these releases holds against whoever sees the released model
(third parties, other clients), not against the server.  The ledger's report says
so (:data:`THREAT_MODELS`, ``results["privacy"]["mechanism_threats"]``), beside
DP-CalR's and LDP-PCA's releases, which are noised on the client and hold against
the server too.

Client-side option (``placement="client"``, an untrusted server): each client of
the round clips its own update and adds its share of the noise,
:math:`N(0, (zC)^2/m)` per weight with :math:`m` the clients the round asked
(:func:`privatise_update`, on the node: the ClientApp checks that release against
its own policy, draws the noise from its own generator and ledgers it); the server
only averages.  Under the sum the noise adds up to :math:`N(0, (zC)^2 m)`, i.e.
standard deviation :math:`zC/m` on the mean -- the server-side noise, split.  Each
update the server sees carries noise multiplier :math:`z/\sqrt m`: that is the ε
against the server, recorded per client (mechanism
``"flower/client-dp-local-noise"``, sensitivity :math:`C`); Flower's accountant
composes the aggregate's (noise multiplier :math:`z\sqrt{m'/m}` with :math:`m'`
clients answering), the ε against third parties.

It is implemented as a wrapper around the method (a :class:`Method` whose
``aggregate`` clips, aggregates and adds noise) so that the in-process runner and
the Flower runner apply exactly the same operation.  Integer weights (BatchNorm's
``num_batches_tracked``) are neither clipped nor noised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedspectral.fed.callbacks import Callback
from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState, derive_seed
from fedspectral.fed.releases import SecureSumSpec

__all__ = [
    "CLIENT_MECHANISM",
    "MECHANISM",
    "PLACEMENTS",
    "THREAT",
    "THREAT_MODELS",
    "ClientDP",
    "ClientDPHooks",
    "attach",
    "client_dp_request",
    "clip_update",
    "fallback_reply",
    "node_reference",
    "privatise_update",
    "threat_models",
]

MECHANISM = "flower/client-dp-fixed-clipping"
CLIENT_MECHANISM = "flower/client-dp-local-noise"
PLACEMENTS = ("server", "client")
#: the ledger's threat tag of a client-side release (seen by the server on its own)
THREAT = "any"
#: keys of a train payload's config asking the client to clip and noise its update
CLIP_KEY, STD_KEY = "client-dp.clip", "client-dp.std"

#: who each mechanism's ε holds against (keyed by ledger mechanism name): client-level DP's
#: and the LDP-PCA app's; a federated method's are its own (``Method.threat_models``,
#: :func:`fedspectral.fed.methods.threat_models`)
THREAT_MODELS = {
    MECHANISM: "trusted server: server-side noise on the aggregate; the server sees each "
    "client's clipped un-noised update; holds against third parties only",
    CLIENT_MECHANISM: "untrusted server: each client clips its update and adds its share "
    "of the noise before it leaves; holds against the server (this "
    "release) and third parties (the aggregate, Flower's accountant)",
    "ldp-pca/local-gaussian": "untrusted server: each user's message is noised on its node "
    "(local model); holds against the server and third parties",
}


def threat_models(*ledgers: Any) -> dict[str, str]:
    """``{mechanism: threat model}`` for the mechanisms in ``ledgers`` (PrivacyLedgers: the
    sample-level and the client-level one)."""
    from fedspectral.fed.methods import threat_models as method_threats

    known = {**method_threats(), **THREAT_MODELS}
    out = {}
    for r in (r for ledger in ledgers for r in ledger.releases):
        base = r.mechanism.split("[", 1)[0]
        out[r.mechanism] = known.get(base, "unknown: see docs/flower.md")
    return out


@dataclass
class ClientDP:
    r"""Options of client-level DP on model updates.

    Parameters
    ----------
    clipping_norm : float
        :math:`C > 0`, the L2 bound of a client's model update.
    noise_multiplier : float
        :math:`z > 0`; the noise on the mean has standard deviation :math:`zC/m`.
    seed : int
        ``>= 0``: noise drawn from a generator seeded by ``(seed, round)``
        (reproducible experiments); ``-1``: OS entropy (deployment).
    delta : float
        δ at which ε is reported (Flower's ``PrivacyConfig.target_delta``).
    placement : {"server", "client"}
        Where the noise is added: on the aggregate by the server (trusted server,
        Flower's server-side fixed clipping) or by each client on its own clipped
        update (its share, :math:`zC/\sqrt m`).
    """

    clipping_norm: float
    noise_multiplier: float
    seed: int = -1
    delta: float = 1e-5
    placement: str = "server"
    ledger: Any = field(default=None, repr=False)
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _accountant: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        from fedspectral.checks import check_choice, check_int, check_real

        for name in ("clipping_norm", "noise_multiplier"):
            check_real(name, getattr(self, name), low=0.0, low_open=True)
        check_int("seed", self.seed, low=-1)
        check_real("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_choice("placement", self.placement, PLACEMENTS)

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any], delta: float) -> ClientDP | None:
        """The client-level DP a Flower run configuration asks for, or ``None`` (off):
        ``dp-noise-multiplier`` (> 0: on), ``dp-clip``, ``dp-seed`` (default -1: OS entropy)
        and ``dp-placement`` (default ``"server"``); ε is reported at ``delta``."""
        z = float(rc.get("dp-noise-multiplier", 0.0) or 0.0)
        if z <= 0:
            return None
        return cls(
            clipping_norm=float(rc["dp-clip"]),
            noise_multiplier=z,
            seed=int(rc.get("dp-seed", -1)),
            delta=float(delta),
            placement=str(rc.get("dp-placement", "server")),
        )

    def to_run_config(self) -> dict[str, Any]:
        """These options as Flower run-config keys (read back by :meth:`from_run_config`)."""
        return {
            "dp-clip": float(self.clipping_norm),
            "dp-noise-multiplier": float(self.noise_multiplier),
            "dp-seed": int(self.seed),
            "dp-delta": float(self.delta),
            "dp-placement": str(self.placement),
        }

    def check(self, method: Method) -> None:
        """Refuse (``ValueError``) a method whose ``train`` aggregation cannot be made
        client-level DP: a weighted mean, or no ``train`` phase."""
        cfg = getattr(method, "config", None)
        if cfg is not None and getattr(cfg.method, "weighted", False):
            raise ValueError(
                "client-level DP needs the plain mean of the updates; set method.weighted: false"
            )
        if "train" not in method.phases:
            raise ValueError(f"method {method.name!r} has no train phase to privatise")

    def wrap(self, method: Method, ledger: Any, population: int) -> Method:
        """``method`` with its ``train`` aggregation made client-level DP, each release
        recorded in ``ledger`` (the run's client-level
        :class:`~fedspectral.privacy.PrivacyLedger`, fresh or read back from a checkpoint)
        and composed by Flower's accountant over ``population`` clients (rebuilt from the
        ledger's releases: :meth:`bind`)."""
        self.check(method)
        return _DPMethod(method, self, ledger, population)

    # -- accounting ---------------------------------------------------------------------
    def bind(self, ledger: Any, population: int) -> None:
        """Use ``ledger``; rebuild Flower's accountant from its releases (resume)."""
        from flwr.serverapp import (
            GaussianPrivacyEvent,
            NeighboringRelation,
            PrivacyConfig,
            RdpAccountant,
            SamplingMethod,
        )

        self.ledger = ledger
        self._accountant = RdpAccountant(
            PrivacyConfig(
                target_delta=self.delta,
                population_size=int(population),
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION,
            )
        )
        steps: dict[int, list[Any]] = {}
        for r in ledger.releases:
            if r.mechanism in (MECHANISM, CLIENT_MECHANISM) and r.step is not None:
                steps.setdefault(r.step, []).append(r)
        for _, rels in sorted(steps.items()):
            self._accountant.compose(
                GaussianPrivacyEvent(
                    noise_multiplier=self._aggregate_z(rels),
                    sample_size=len(rels),
                    population_size=int(population),
                )
            )
        self._event_cls = GaussianPrivacyEvent

    def _aggregate_z(self, rels: Sequence[Any]) -> float:
        """Noise multiplier of one round's aggregate (server-side: z; client-side: the
        answering clients' shares summed, z sqrt(m'/m))."""
        if rels and rels[0].mechanism == CLIENT_MECHANISM:
            return float(rels[0].noise_multiplier * math.sqrt(len(rels)))
        return float(self.noise_multiplier)

    def client_std(self, asked: int) -> float:
        r"""σ of one client's share when ``asked`` clients are asked: :math:`zC/\sqrt m`."""
        return float(self.noise_multiplier * self.clipping_norm / math.sqrt(asked))

    def release(
        self, rnd: int, cids: Sequence[str], population: int, asked: int | None = None
    ) -> None:
        """Account one noised aggregate of the updates of ``cids`` in round ``rnd``
        (client placement: ``asked`` clients were sent their share of the noise)."""
        if self._accountant is None:
            from fedspectral.privacy import PrivacyLedger

            self.bind(
                self.ledger if self.ledger is not None else PrivacyLedger(unit="client"), population
            )
        rels = []
        for cid in cids:
            if self.placement == "client":
                rels.append(
                    self.ledger.record(
                        cid,
                        CLIENT_MECHANISM,
                        self.client_std(int(asked or len(cids))),
                        float(self.clipping_norm),
                        neighbouring="add_remove",
                        step=int(rnd),
                        unit="client",
                    )
                )
            else:
                rels.append(
                    self.ledger.record_noise_multiplier(
                        cid,
                        MECHANISM,
                        float(self.noise_multiplier),
                        neighbouring="add_remove",
                        step=int(rnd),
                        unit="client",
                    )
                )
        ev = self._event_cls(
            noise_multiplier=self._aggregate_z(rels),
            sample_size=len(cids),
            population_size=int(population),
        )
        self._accountant.compose(ev)
        spent = self._accountant.get_privacy_spent()
        self.events.append(
            {"round": int(rnd), "sample_size": len(cids), "epsilon_flower": float(spent.epsilon)}
        )

    def epsilon(self) -> float:
        """ε(δ) of Flower's client-level accountant so far."""
        return (
            0.0 if self._accountant is None else float(self._accountant.get_privacy_spent().epsilon)
        )

    def summary(self) -> dict[str, Any]:
        return {
            "placement": self.placement,
            "threat_model": THREAT_MODELS[
                MECHANISM if self.placement == "server" else CLIENT_MECHANISM
            ],
            "clipping_norm": self.clipping_norm,
            "noise_multiplier": self.noise_multiplier,
            "delta": self.delta,
            "epsilon_flower_rdp": self.epsilon(),
            "releases": len(self.events),
            "events": list(self.events),
        }


class _DPMethod(Method):
    """A method whose ``train`` aggregation clips the updates and noises the mean; every
    other hook is the wrapped method's (``inner``)."""

    def __init__(self, inner: Method, dp: ClientDP, ledger: Any, population: int) -> None:
        self.config = inner.config
        self.params = inner.params  # checked by the wrapped method's own Params
        self.inner = inner
        self.dp = dp
        self.name = inner.name
        self.phases = inner.phases
        self._asked: dict[int, int] = {}  # round -> clients sent their share of the noise
        dp.bind(ledger, population)

    # -- delegated as they are ------------------------------------------------------------
    def layout_clients(self, parts: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.inner.layout_clients(parts)

    def phase_kind(self, phase: str) -> str:
        return self.inner.phase_kind(phase)

    def secure_sum_spec(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> SecureSumSpec:
        return self.inner.secure_sum_spec(phase, rnd, state, cids)

    def aggregate_secure(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        total: np.ndarray | None,
        contributors: Sequence[str],
    ) -> dict[str, float]:
        return self.inner.aggregate_secure(phase, rnd, state, total, contributors)

    def secure_model_releases(self, phase: str, state: ServerState) -> list[Any]:
        return self.inner.secure_model_releases(phase, state)

    def build_net(self) -> Any:
        return self.inner.build_net()

    def init_server_state(
        self, weights: Mapping[str, np.ndarray], client_sizes: Mapping[str, int]
    ) -> ServerState:
        return self.inner.init_server_state(weights, client_sizes)

    def public_size(self) -> int:
        return self.inner.public_size()

    def prepare_server(self, state: ServerState, public: Any, augment: Any, seed: int) -> None:
        self.inner.prepare_server(state, public, augment, seed)

    def participants(
        self,
        phase: str,
        rnd: int,
        sampled: Sequence[str],
        all_clients: Sequence[str],
        state: ServerState,
    ) -> list[str]:
        return self.inner.participants(phase, rnd, sampled, all_clients, state)

    def global_weights(self, state: ServerState) -> dict[str, np.ndarray]:
        return self.inner.global_weights(state)

    def planned_release(
        self, phase: str, rnd: int, state: ServerState, cid: str
    ) -> dict[str, Any] | None:
        return self.inner.planned_release(phase, rnd, state, cid)

    def release_budget(self) -> tuple[float, float, str] | None:
        return self.inner.release_budget()

    def extra_metrics(self, net: Any, fed: Any) -> dict[str, float]:
        return self.inner.extra_metrics(net, fed)

    def privacy_info(self, client_sizes: Mapping[str, int], ledger: Any) -> dict[str, Any]:
        return self.inner.privacy_info(client_sizes, ledger)

    def privacy_plan(self, n: int) -> dict[str, Any] | None:
        return self.inner.privacy_plan(n)

    # -- the train phase made client-level DP -------------------------------------------
    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        out = self.inner.configure(phase, rnd, state, cids)
        if phase == "train" and self.dp.placement == "client" and out:
            self._asked[int(rnd)] = len(out)
            std = self.dp.client_std(len(out))
            for p in out.values():
                p.config[CLIP_KEY] = float(self.dp.clipping_norm)
                p.config[STD_KEY] = std
        return out

    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        if CLIP_KEY not in payload.config:
            return self.inner.client_phase(phase, rnd, payload, rt)
        ref = node_reference(payload, rt)
        reply = self.inner.client_phase(phase, rnd, payload, rt)
        return privatise_update(
            reply,
            ref,
            float(payload.config[CLIP_KEY]),
            float(payload.config[STD_KEY]),
            rt.noise_rng,
        )

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        if phase != "train" or not replies:
            return self.inner.aggregate(phase, rnd, state, replies)
        if self.dp.placement == "client":  # the clients clipped and noised: only average
            asked = self._asked.get(int(rnd), len(replies))
            metrics = self.inner.aggregate(phase, rnd, state, replies)
            self.dp.release(rnd, list(replies), len(state.clients), asked=asked)
            return {
                **metrics,
                "dp_client_noise_std": self.dp.client_std(asked),
                "epsilon_client_dp": self.dp.epsilon(),
            }
        from flwr.supercore.differential_privacy import compute_clip_model_update, compute_stdv

        C, z = float(self.dp.clipping_norm), float(self.dp.noise_multiplier)
        current = {k: np.asarray(v) for k, v in state.weights.items()}
        names = [k for k, v in current.items() if np.issubdtype(v.dtype, np.floating)]
        clipped: dict[str, Payload] = {}
        norms = []
        for cid, rep in replies.items():
            w = rep.weights()
            missing = [k for k in names if k not in w]
            if missing:
                raise ValueError(f"client {cid!r} returned no weights for {missing[:3]}")
            upd = [np.array(w[k], dtype=np.float64) for k in names]
            ref = [current[k].astype(np.float64) for k in names]
            norms.append(
                float(
                    np.sqrt(sum(float(np.sum((u - r) ** 2)) for u, r in zip(upd, ref, strict=True)))
                )
            )
            compute_clip_model_update(upd, ref, C)
            arrays = dict(rep.arrays)
            for k, u in zip(names, upd, strict=True):
                arrays[f"w.{k}"] = u.astype(current[k].dtype)
            clipped[cid] = Payload(
                arrays=arrays, metrics=dict(rep.metrics), config=dict(rep.config)
            )
        metrics = self.inner.aggregate(phase, rnd, state, clipped)
        m = len(clipped)
        std = compute_stdv(z, C, m)
        rng = (
            np.random.default_rng()
            if self.dp.seed < 0
            else np.random.default_rng(derive_seed("client-dp", self.dp.seed, rnd))
        )
        for k in names:
            w = np.asarray(state.weights[k])
            state.weights[k] = (w + rng.normal(0.0, std, w.shape)).astype(w.dtype)
        self.dp.release(rnd, list(clipped), len(state.clients))
        out = dict(metrics)
        out.update(
            {
                "dp_noise_std": std,
                "dp_clipped_fraction": float(np.mean([n > C for n in norms])),
                "dp_update_norm": float(np.mean(norms)),
                "epsilon_client_dp": self.dp.epsilon(),
            }
        )
        return out


def reference_weights(payload: Payload, rt: ClientRuntime) -> dict[str, np.ndarray]:
    """The global weights a client's update starts from: those of the train message,
    or -- FedSC caching them in the share phase -- those the node kept (not consumed).
    Either way, weights the server itself sent."""
    w = payload.weights()
    if w:
        return w
    from fedspectral.fed.methods.fedsc import CACHE_PREFIX

    return {k[len(CACHE_PREFIX) :]: v for k, v in rt.state.items() if k.startswith(CACHE_PREFIX)}


def node_reference(payload: Payload, rt: ClientRuntime) -> dict[str, np.ndarray]:
    """The reference of client-level DP: the weights the server sent for *this* request
    (or FedSC cached from its share request), keyed on the node's own model.

    For every tensor of ``rt.net`` the server sent with the tensor's shape: a
    floating-point tensor's sent value as float64 (whatever dtype it came in), an integer
    buffer's sent value as it is.  A tensor the server did not send (or sent with another
    shape) has no reference, and so is not returned (:func:`privatise_update`): the
    node's own value of it -- what an earlier request trained on the node's data, in a
    long-lived node process -- never leaves.  Call it before the client handler."""
    sent = reference_weights(payload, rt)
    out = {}
    for k, v in rt.net.state_dict().items():
        s = sent.get(k)
        if s is None or np.shape(s) != tuple(v.shape):
            continue
        if v.is_floating_point():
            # a non-finite value the server sent counts as 0: a NaN in the reference would
            # make the update's norm NaN, and Flower's min(1, C / NaN) = 1 leaves the rest
            # of the update unclipped
            r = np.asarray(s, dtype=np.float64)
            out[k] = np.where(np.isfinite(r), r, 0.0) if not np.isfinite(r).all() else r
        else:
            out[k] = np.asarray(s)
    return out


def clip_update(update: list[np.ndarray], clip: float) -> None:
    r"""Scale ``update`` (float64 arrays, in place) to L2 norm at most ``clip``:
    :math:`\Delta \min(1, C/\|\Delta\|_2)`, Flower's ``clip_inputs_inplace`` -- total:
    a zero update stays zero (no division by its norm), a norm that overflows float64 is
    computed on the update scaled by its largest entry, and an update with a non-finite
    entry becomes zero (Flower's ``min(1, C / nan)`` is 1: the rest would go unclipped)."""
    from flwr.supercore.differential_privacy import get_norm

    norm = get_norm(update)
    if norm == 0.0:
        return
    if not math.isfinite(norm):
        top = max(float(np.max(np.abs(u))) if u.size else 0.0 for u in update)
        norm = top * get_norm([u / top for u in update]) if math.isfinite(top) else math.nan
    if not math.isfinite(norm):  # a non-finite entry: nothing of this update can be bounded
        for u in update:
            u[...] = 0.0
        return
    factor = min(1.0, float(clip) / norm)
    for u in update:
        u *= factor


def fallback_reply(
    reference: Mapping[str, np.ndarray], num_examples: int, net: Any = None
) -> Payload:
    """The train reply of a node whose handler failed on its data: the reference itself
    (a zero update, inside every clipping ball) and ``num-examples``; clipped and noised
    by :func:`privatise_update` like any reply, so the server sees a release of the same
    form (keys, shapes, dtypes: those of ``net``, the node's model) and price whatever
    happened on the data."""
    dtypes = {}
    if net is not None:
        dtypes = {k: v.detach().cpu().numpy().dtype for k, v in net.state_dict().items()}
    arrays = {}
    for k, v in reference.items():
        a = np.array(v)
        arrays[f"w.{k}"] = a.astype(dtypes[k]) if k in dtypes else a
    return Payload(arrays=arrays, metrics={"num-examples": float(num_examples)}, config={})


def privatise_update(
    reply: Payload, reference: Mapping[str, np.ndarray], clip: float, std: float, rng: Any
) -> Payload:
    """A client's reply with its model clipped towards ``reference`` (L2 bound ``clip``,
    :func:`clip_update`) and N(0, std^2) noise added to every floating-point weight -- the
    client-side share of client-level DP.

    ``reference`` (:func:`node_reference`) names what may leave: every floating-point
    tensor in it is clipped and noised (a non-finite value of the reply is replaced by its
    reference value first: a data-independent replacement inside the clipping ball, so
    the release goes ahead instead of failing on the data, and so is a reply weight of
    another shape); an integer buffer in it is returned as the server sent it.  Anything
    else the reply holds (a tensor the server did not send, any other array) is dropped.
    Metrics and config pass (the node's release manifest keeps ``num-examples`` alone)."""
    from fedspectral.privacy.noise import add_gaussian

    w = reply.weights()
    floats = [k for k, r in reference.items() if np.issubdtype(np.asarray(r).dtype, np.floating)]
    ref = [np.asarray(reference[k], dtype=np.float64) for k in floats]
    upd = []
    for k, r in zip(floats, ref, strict=True):
        u = np.array(w[k], dtype=np.float64) if k in w else r.copy()
        if u.shape != r.shape:
            u = r.copy()
        upd.append(np.where(np.isfinite(u), u, r) - r)
    clip_update(upd, float(clip))
    arrays = {}
    for k, u, r in zip(floats, upd, ref, strict=True):
        dtype = np.asarray(w[k]).dtype if k in w else np.dtype(np.float32)
        if not np.issubdtype(dtype, np.floating):
            dtype = np.dtype(np.float32)
        # seeded numpy or the node's secure source (fedspectral.privacy.add_gaussian)
        arrays[f"w.{k}"] = add_gaussian(r + u, std, rng).astype(dtype)
    for k, r in reference.items():
        if k not in floats:
            arrays[f"w.{k}"] = np.asarray(r)
    order = [key for key in reply.arrays if key in arrays]  # the reply's order
    arrays = {key: arrays[key] for key in [*order, *(a for a in arrays if a not in order)]}
    return Payload(arrays=arrays, metrics=dict(reply.metrics), config=dict(reply.config))


class ClientDPHooks(Callback):
    """The runner callback of client-level DP (:func:`attach`): once the run's state is
    there (fresh, or loaded from a checkpoint) the runner's method is wrapped with that
    state's client-level ledger; the results gain ``privacy.mechanism_threats``."""

    def __init__(self, dp: ClientDP) -> None:
        self.dp = dp

    def on_state(self, sim: Any, state: Any) -> None:
        inner = sim.method.inner if isinstance(sim.method, _DPMethod) else sim.method
        sim.method = self.dp.wrap(inner, state.client_ledger, len(state.server.clients))

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        from fedspectral.fed.manifest import released_objects

        priv = results.setdefault("privacy", {})
        priv["mechanism_threats"] = threat_models(sim.state.ledger, sim.state.client_ledger)
        m = getattr(sim, "method", None)
        if m is None:
            return
        m = m.inner if isinstance(m, _DPMethod) else m
        priv["released_objects"] = released_objects(
            m.name,
            tuple(m.phases),
            bool(m.config.dp.enabled),
            bool(getattr(m, "secure", False)),
            self.dp.placement,
        )


def attach(runner: Any, dp: ClientDP) -> Any:
    """Apply ``dp`` to a runner (:class:`~fedspectral.fed.simulation.Simulation` or
    :class:`~fedspectral.fed.flower.apps.runner.FlowerRunner`): its method is checked now
    (:meth:`ClientDP.check`) and wrapped when the run starts (:class:`ClientDPHooks`,
    added to ``runner.callbacks``); returns the runner."""
    dp.check(runner.method)
    runner.callbacks.append(ClientDPHooks(dp))
    return runner


def client_dp_request(payload: Any) -> tuple[float, float]:
    """(clip, std) of a client-side client-level DP request, parsed where they enter:
    ``ValueError``/``TypeError`` naming the request key (set by the server), raised before
    the node's data is read."""
    from fedspectral.checks import check_real

    if STD_KEY not in payload.config:
        raise ValueError(f"the request has {CLIP_KEY} but no {STD_KEY}")
    clip = check_real(f"request {CLIP_KEY}", payload.config[CLIP_KEY], low=0.0, low_open=True)
    std = check_real(f"request {STD_KEY}", payload.config[STD_KEY], low=0.0)
    return float(clip), float(std)
