r"""Client-level DP on model updates, Flower's way (fixed clipping, Gaussian noise), as a
post-processor of the round loop.

This is what ``flwr.serverapp.strategy.DifferentialPrivacyServerSideFixedClipping``
does to a FedAvg round (McMahan et al. 2018, "DP-FedAvg"), applied to the
``train`` phase of any fedspectral method:

1. each returned model is clipped towards the global model it started from,
   :math:`\theta_j \leftarrow \theta + \Delta_j \min(1, C/\|\Delta_j\|_2)`,
   :math:`\Delta_j = \theta_j - \theta` (:func:`clip_update`: Flower's
   ``compute_clip_model_update``, made total);
2. the method aggregates as usual (plain mean over the :math:`m` clients that
   answered -- a weighted mean is refused, its sensitivity is not :math:`C/m`);
3. Gaussian noise of standard deviation :math:`zC/m`
   (:func:`~fedspectral.privacy.client_level.mean_sigma`, Flower's ``compute_stdv``)
   is added to every floating-point weight of the new global model.

:class:`ClientDP` is a :class:`~fedspectral.fed.postprocess.PostProcessor`: the method
stays the one the registry built, and :func:`~fedspectral.fed.protocol.run_round`
applies the post-processor to the ``train`` phase (``on_configure`` to its requests,
``on_aggregate`` in place of the method's fold) while the node applies ``on_reply``
around the method's client handler (:func:`privatised_reply`), so that the in-process
runner and the Flower runner apply exactly the same operation.  A runner takes it as a
constructor argument (``Simulation(cfg, client_dp=...)``, ``FlowerRunner(...,
client_dp=...)``, ``run_flower_simulation(..., client_dp=...)`` or the run config's
``dp-*`` keys).

Accounting, in the project's ledger only: every release of a round is recorded in the
run's *client-level* :class:`~fedspectral.privacy.PrivacyLedger` (``unit="client"``),
once per participating client (party = client id, mechanism
``"flower/client-dp-fixed-clipping"``, noise multiplier :math:`z`, add or remove one
client).  That ledger is kept apart from the sample-level one of DP-CalR: the two
guarantees are in different units and are reported side by side, never composed.  The
released aggregates' ε (:meth:`ClientDP.epsilon`, each round's ``epsilon_client_dp``)
composes one Gaussian event per round from the ledger's releases through the ledger's
RDP accountant (:func:`~fedspectral.privacy.client_level.aggregate_epsilon`, no
sampling amplification) -- the events Flower's ``RdpAccountant`` composes, which the
tests keep as an oracle: equal ε within the accountants' orders.
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
(:func:`~fedspectral.privacy.client_level.share_sigma`; :func:`privatise_update`, on
the node: the ClientApp checks that release against its own policy, draws the noise
from its own source -- the secure one on a node, never seeded by the server -- and
ledgers it); the server only averages.  Under the sum the noise adds up to
:math:`N(0, (zC)^2 m)`, i.e. standard deviation :math:`zC/m` on the mean -- the
server-side noise, split.  Each update the server sees carries noise multiplier
:math:`z/\sqrt m`: that is the ε against the server, recorded per client (mechanism
``"flower/client-dp-local-noise"``, sensitivity :math:`C`); the aggregate's
(noise multiplier :math:`z\sqrt{m'/m}` with :math:`m'` clients answering) is the ε
against third parties.

Integer weights (BatchNorm's ``num_batches_tracked``) are neither clipped nor noised.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedspectral.checks import check_choice, check_int, check_real
from fedspectral.fed.manifest import released_objects
from fedspectral.fed.methods import threat_models as method_threats
from fedspectral.fed.postprocess import Aggregate, Handler, PostProcessor
from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState, derive_seed
from fedspectral.kinds import PhaseKind
from fedspectral.privacy import PrivacyLedger, Release, SecureNoise, add_gaussian
from fedspectral.privacy.client_level import (
    aggregate_epsilon,
    mean_sigma,
    share_sigma,
    summed_noise_multiplier,
)
from fedspectral.privacy.mechanism import Gaussian

__all__ = [
    "CLIENT_MECHANISM",
    "MECHANISM",
    "NODE_POST_PROCESSORS",
    "PLACEMENTS",
    "THREAT",
    "THREAT_MODELS",
    "ClientDP",
    "ClientDPNode",
    "client_dp_request",
    "clip_update",
    "fallback_reply",
    "node_reference",
    "privatise_update",
    "share_mechanism",
    "privatised_reply",
    "share_release",
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
    known = {**method_threats(), **THREAT_MODELS}
    out = {}
    for r in (r for ledger in ledgers for r in ledger.releases):
        base = r.mechanism.split("[", 1)[0]
        out[r.mechanism] = known.get(base, "unknown: see docs/flower.md")
    return out


def share_release(
    cid: str,
    rnd: int,
    clip: float,
    std: float,
    noise: str | None = None,
    values: int | None = None,
) -> Release:
    """The client-level release of one client-side share: ``cid``'s update clipped to
    ``clip`` with N(0, std^2) noise in round ``rnd`` (``noise``: the mechanism that draws
    it, ``values``: how many values it noises, where the node knows them) -- the one place
    this release is built, for the server's ledger and the node's."""
    return share_mechanism(clip, std).entry(
        str(cid),
        CLIENT_MECHANISM,
        int(rnd),
        unit="client",
        threat=THREAT,
        noise=noise,
        values=values,
    )


def share_mechanism(clip: float, std: float) -> Gaussian:
    """One client-side share of client-level DP as a mechanism: N(0, std^2) on an update
    clipped to L2 ``clip``, add or remove one client.  Its ledger entry
    (:func:`share_release`) and its noise (:func:`privatise_update`) both come from it."""
    return Gaussian(float(std), float(clip), "add_remove")


class ClientDPNode(PostProcessor):
    """Client-side client-level DP as a node applies it, read from the request alone: a
    train request with :data:`CLIP_KEY` and :data:`STD_KEY` is answered under the
    ``client-dp`` manifest, its reply clipped towards the weights the server sent and
    noised from the node's own source (:func:`privatised_reply`), and its release
    (:func:`share_release`) spent in the node's ledger first.  :class:`ClientDP`, the
    runner's post-processor, inherits these hooks: the in-process transport and a Flower
    node run the same code."""

    variant: ClassVar[str] = "client-dp"

    def requested(self, payload: Payload) -> bool:
        return CLIP_KEY in payload.config

    def check_request(self, payload: Payload) -> None:
        if self.requested(payload):
            client_dp_request(payload)

    def node_releases(
        self, payload: Payload, cid: str, rnd: int, net: Any, noise: str | None
    ) -> list[Release]:
        """The node's share, as its ledger records it: the request's clip and std, the
        node's noise mechanism and the number of floating-point values of its model."""
        if not self.requested(payload):
            return []
        clip, std = client_dp_request(payload)
        values = sum(v.numel() for v in net.state_dict().values() if v.is_floating_point())
        return [share_release(cid, rnd, clip, std, noise, values)]

    def on_reply(self, payload: Payload, rt: ClientRuntime, handler: Handler) -> Payload:
        """Node: the reply clipped and noised as the request asks (:func:`privatised_reply`)."""
        return privatised_reply(payload, rt, handler)


#: the post-processors a Flower node applies, each when a request asks for it
NODE_POST_PROCESSORS: tuple[PostProcessor, ...] = (ClientDPNode(),)


@dataclass
class ClientDP(ClientDPNode):
    r"""Client-level DP on model updates, a post-processor of ``train`` phases.

    The round loop applies it (:mod:`fedspectral.fed.postprocess`): server-side noise in
    :meth:`on_aggregate` (clip each reply, the method's fold, noise on the new global
    weights); client-side noise in :meth:`on_configure` (each request asks for the clip
    and the share of noise) and :meth:`on_reply` (the node clips and noises its own
    reply).  Every release is recorded in the run's client-level ledger (:meth:`bind`:
    the runner binds it to the run's state); the aggregate's ε is the ledger's
    (:meth:`epsilon`).

    Parameters
    ----------
    clipping_norm : float
        :math:`C > 0`, the L2 bound of a client's model update.
    noise_multiplier : float
        :math:`z > 0`; the noise on the mean has standard deviation :math:`zC/m`.
    seed : int
        ``>= 0``: server-side noise drawn from a generator seeded by ``(seed, round)``
        (reproducible experiments); ``-1``: the secure source
        (:class:`~fedspectral.privacy.SecureNoise`, deployment).  Client-side noise is
        the node's own (its ``noise_rng``: seeded in simulations, secure on a node).
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

    def __post_init__(self) -> None:
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
        """Refuse (``ValueError``) a method whose training aggregation cannot be made
        client-level DP: a weighted mean, or no phase of kind train."""
        cfg = getattr(method, "config", None)
        if cfg is not None and getattr(cfg.method, "weighted", False):
            raise ValueError(
                "client-level DP needs the plain mean of the updates; set method.weighted: false"
            )
        if not method.phases_of_kind(PhaseKind.TRAIN):
            raise ValueError(
                f"method {method.name!r} has no phase of kind train to privatise "
                f"(its phases: {', '.join(method.phases)})"
            )

    # -- accounting: the run's client-level ledger ----------------------------------------
    def bind(self, ledger: PrivacyLedger) -> None:
        """Record into ``ledger`` (the run's client-level ledger, fresh or read back from a
        checkpoint: its releases count in :meth:`epsilon`)."""
        self.ledger = ledger

    def on_state(self, sim: Any, state: Any) -> None:
        """The runner's hook: bind the run's client-level ledger (fresh or resumed; a
        resumed one is checked, :meth:`check_resumed`)."""
        self.bind(state.client_ledger)
        try:
            self.check_resumed(state.records)
        except ValueError as exc:
            where = getattr(sim, "out_dir", None)
            raise ValueError(
                f"checkpoint in {str(where)!r}: {exc}; it was edited or is not this run's"
            ) from None

    def check_resumed(self, records: Sequence[Any]) -> None:
        """The bound ledger holds the releases the round ``records`` say were made: a
        release of each round whose ``train`` phase reported ``epsilon_client_dp``, and an
        ε not below the last one reported (a ledger that forgot releases would report a
        smaller ε); else ``ValueError``.  (Their noise is not checked against this run's
        options: a resumed run may use another noise multiplier.)"""
        steps = {r.step for r in (self.ledger.releases if self.ledger is not None else [])}
        said = None
        for rec in records:
            ph = rec.phases.get("train")
            eps = None if ph is None else ph.metrics.get("epsilon_client_dp")
            if eps is None:
                continue
            if rec.round not in steps:
                raise ValueError(
                    f"round {rec.round} reported client-level releases (epsilon_client_dp="
                    f"{eps:.6g}), but the client-level ledger has none of that round"
                )
            said = float(eps)
        if said is not None and math.isfinite(said) and self.epsilon() < said * (1 - 1e-9):
            raise ValueError(
                f"the client-level ledger's epsilon is {self.epsilon():.6g}, below the "
                f"{said:.6g} its last round reported"
            )

    def client_std(self, asked: int) -> float:
        r"""σ of one client's share when ``asked`` clients are asked: :math:`zC/\sqrt m`."""
        return share_sigma(self.noise_multiplier, self.clipping_norm, asked)

    def release(self, rnd: int, cids: Sequence[str], asked: int | None = None) -> None:
        """Ledger one noised aggregate of the updates of ``cids`` in round ``rnd``, one
        release per client (client placement: ``asked`` clients were sent their share of
        the noise)."""
        if self.ledger is None:
            self.ledger = PrivacyLedger(unit="client")
        for cid in cids:
            if self.placement == "client":
                std = self.client_std(int(asked or len(cids)))
                self.ledger.add(share_release(cid, rnd, self.clipping_norm, std))
            else:
                self.ledger.record_noise_multiplier(
                    cid,
                    MECHANISM,
                    float(self.noise_multiplier),
                    neighbouring="add_remove",
                    step=int(rnd),
                    unit="client",
                )
        self.events.append(
            {"round": int(rnd), "sample_size": len(cids), "epsilon_rdp": self.epsilon()}
        )

    def round_multipliers(self) -> list[float]:
        r"""The noise multiplier of each round's released aggregate, from the ledger's
        releases (server-side: :math:`z`; client-side: the answering clients' shares
        summed, :math:`z\sqrt{m'/m}`)."""
        steps: dict[int, list[Release]] = {}
        for r in self.ledger.releases if self.ledger is not None else []:
            if r.mechanism in (MECHANISM, CLIENT_MECHANISM) and r.step is not None:
                steps.setdefault(r.step, []).append(r)
        out = []
        for _, rels in sorted(steps.items()):
            z = rels[0].noise_multiplier
            out.append(
                summed_noise_multiplier(z, len(rels))
                if rels[0].mechanism == CLIENT_MECHANISM
                else z
            )
        return out

    def epsilon(self) -> float:
        """ε(δ) of the released aggregates so far, every round composed (RDP, the
        ledger's accountant: :func:`~fedspectral.privacy.client_level.aggregate_epsilon`)."""
        return aggregate_epsilon(self.round_multipliers(), self.delta)

    def summary(self) -> dict[str, Any]:
        return {
            "placement": self.placement,
            "threat_model": THREAT_MODELS[
                MECHANISM if self.placement == "server" else CLIENT_MECHANISM
            ],
            "clipping_norm": self.clipping_norm,
            "noise_multiplier": self.noise_multiplier,
            "delta": self.delta,
            "epsilon_rdp": self.epsilon(),
            "releases": len(self.events),
            "events": list(self.events),
        }

    def on_results(self, sim: Any, results: dict[str, Any]) -> None:
        """The results' ``privacy.mechanism_threats`` and ``privacy.released_objects``
        (the train phase's, as this placement releases it)."""
        priv = results.setdefault("privacy", {})
        priv["mechanism_threats"] = threat_models(sim.state.ledger, sim.state.client_ledger)
        m = getattr(sim, "method", None)
        if m is None:
            return
        priv["released_objects"] = released_objects(
            m.name,
            tuple(m.phases),
            bool(m.config.dp.enabled),
            bool(getattr(m, "secure", False)),
            self.placement,
        )

    # -- the post-processor's hooks (train phases) ----------------------------------------
    def on_configure(
        self, phase: str, rnd: int, state: ServerState, payloads: Mapping[str, Payload]
    ) -> None:
        """Client placement: each request asks for the clip and this round's share of the
        noise (:data:`CLIP_KEY`, :data:`STD_KEY`)."""
        if self.placement != "client" or not payloads:
            return
        std = self.client_std(len(payloads))
        for p in payloads.values():
            p.config[CLIP_KEY] = float(self.clipping_norm)
            p.config[STD_KEY] = std

    def on_aggregate(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        asked: Sequence[str],
        replies: Mapping[str, Payload],
        aggregate: Aggregate,
    ) -> dict[str, float]:
        """Server: client placement -- the clients clipped and noised, only average and
        ledger; server placement -- clip each reply towards the global weights, average,
        add :math:`N(0, (zC/m)^2)` to every floating-point weight, ledger."""
        if not replies:
            return aggregate(replies)
        if self.placement == "client":
            metrics = aggregate(replies)
            self.release(rnd, list(replies), asked=len(asked))
            return {
                **metrics,
                "dp_client_noise_std": self.client_std(len(asked)),
                "epsilon_client_dp": self.epsilon(),
            }
        clipped, norms = _clip_replies(state, replies, float(self.clipping_norm))
        metrics = aggregate(clipped)
        std = mean_sigma(self.noise_multiplier, self.clipping_norm, len(clipped))
        rng: Any = (
            SecureNoise()
            if self.seed < 0
            else np.random.default_rng(derive_seed("client-dp", self.seed, rnd))
        )
        for k in _float_names(state.weights):
            w = np.asarray(state.weights[k])
            state.weights[k] = add_gaussian(w, std, rng).astype(w.dtype)
        self.release(rnd, list(clipped))
        return {
            **metrics,
            "dp_noise_std": std,
            "dp_clipped_fraction": float(np.mean([n > self.clipping_norm for n in norms])),
            "dp_update_norm": float(np.mean(norms)),
            "epsilon_client_dp": self.epsilon(),
        }


def _float_names(weights: Mapping[str, Any]) -> list[str]:
    """The floating-point tensors of a model (integer buffers are neither clipped nor noised)."""
    return [k for k, v in weights.items() if np.issubdtype(np.asarray(v).dtype, np.floating)]


def _clip_replies(
    state: ServerState, replies: Mapping[str, Payload], clip: float
) -> tuple[dict[str, Payload], list[float]]:
    """Each reply's floating-point weights clipped towards the global weights
    (:func:`clip_update`), and each update's norm before clipping."""
    current = {k: np.asarray(v) for k, v in state.weights.items()}
    names = _float_names(current)
    clipped: dict[str, Payload] = {}
    norms = []
    for cid, rep in replies.items():
        w = rep.weights()
        missing = [k for k in names if k not in w]
        if missing:
            raise ValueError(f"client {cid!r} returned no weights for {missing[:3]}")
        ref = [current[k].astype(np.float64) for k in names]
        upd = [np.array(w[k], dtype=np.float64) - r for k, r in zip(names, ref, strict=True)]
        norms.append(float(np.sqrt(sum(float(np.sum(u**2)) for u in upd))))
        clip_update(upd, clip)
        arrays = dict(rep.arrays)
        for k, u, r in zip(names, upd, ref, strict=True):
            arrays[f"w.{k}"] = (r + u).astype(current[k].dtype)
        clipped[cid] = Payload(arrays=arrays, metrics=dict(rep.metrics), config=dict(rep.config))
    return clipped, norms


def reference_weights(payload: Payload, rt: ClientRuntime) -> dict[str, np.ndarray]:
    """The global weights a client's update starts from: those of the train message,
    or -- FedSC caching them in the share phase -- those the node kept (not consumed).
    Either way, weights the server itself sent."""
    w = payload.weights()
    if w:
        return w
    from fedspectral.fed.methods.fedsc import CACHE_PREFIX  # lazy: pulls in torch

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
    share = share_mechanism(clip, std)
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
        arrays[f"w.{k}"] = share.add(r + u, rng).astype(dtype)
    for k, r in reference.items():
        if k not in floats:
            arrays[f"w.{k}"] = np.asarray(r)
    order = [key for key in reply.arrays if key in arrays]  # the reply's order
    arrays = {key: arrays[key] for key in [*order, *(a for a in arrays if a not in order)]}
    return Payload(arrays=arrays, metrics=dict(reply.metrics), config=dict(reply.config))


def privatised_reply(payload: Payload, rt: ClientRuntime, handler: Handler) -> Payload:
    """A node's reply to ``payload`` under client-level DP, as the request asks: without
    :data:`CLIP_KEY`, ``handler``'s reply as it is; with it, the reference taken first
    (:func:`node_reference`, before the handler can consume it), then ``handler(reference)``
    (a total handler falls back to the reference itself), clipped and noised with the
    request's clip and share of noise from the node's own source ``rt.noise_rng``
    (:func:`privatise_update`).  The in-process transport and the Flower node both reply
    through it (:meth:`ClientDP.on_reply`)."""
    if CLIP_KEY not in payload.config:
        return handler({})
    clip, std = client_dp_request(payload)
    ref = node_reference(payload, rt)
    return privatise_update(handler(ref), ref, clip, std, rt.noise_rng)


def client_dp_request(payload: Any) -> tuple[float, float]:
    """(clip, std) of a client-side client-level DP request, parsed where they enter:
    ``ValueError``/``TypeError`` naming the request key (set by the server), raised before
    the node's data is read."""
    if STD_KEY not in payload.config:
        raise ValueError(f"the request has {CLIP_KEY} but no {STD_KEY}")
    clip = check_real(f"request {CLIP_KEY}", payload.config[CLIP_KEY], low=0.0, low_open=True)
    std = check_real(f"request {STD_KEY}", payload.config[STD_KEY], low=0.0)
    return float(clip), float(std)
