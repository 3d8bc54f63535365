r"""FedSC: federated spectral contrastive learning with DP correlation sharing.

Seed 001 (Jing et al., ICML 2024), Algorithm 1.  A round :math:`t` has two phases.

``share`` (a query; Algorithm 1 lines 4-17)
    The participants receive :math:`\theta^{t-1}` and upload
    :math:`\tilde R_j^t = \texttt{DP-CalR}(\theta^{t-1}, \mathcal D_j)`
    (:func:`fedspectral.fed.correlation.dp_correlation`: ``share_views`` views per
    sample, representations clipped to norm :math:`\sqrt\mu`, symmetric Gaussian
    noise of standard deviation :math:`\sigma_j`).  In the *first* sharing round
    every client uploads; later only the sampled ones, and the server keeps the
    others' last (stale) :math:`\tilde R_j` and updates

    .. math:: \tilde R \leftarrow \tilde R - q_j\tilde R_j^{old} + q_j\tilde R_j^{new}.

``train`` (Algorithm 1 lines 18-22)
    Each sampled client gets its own

    .. math:: \tilde R_{-j} = \frac{\tilde R - q_j\tilde R_j}{1-q_j}

    (computed by the server: the same number the paper's client computes from the
    broadcast :math:`\tilde R` and its own :math:`\tilde R_j`, and the same
    :math:`H\times H` bytes) and minimises by SGD

    .. math::

        \mathcal L_j = -\operatorname{Tr}\hat R^+_j + \tfrac12\alpha_t\|\hat R_j\|_F^2
        + (1-\alpha_t)\operatorname{Tr}(\hat R_j\tilde R_{-j}),

    then the server sets :math:`\theta^t` to the plain mean of the returned weights.

Schedules (paper appendix "Detailed Implementation"):

* ``alpha``: ``"linear"`` decays :math:`\alpha_t` from ``alpha_start`` (1) at round 1
  to ``alpha_end`` (0.2) at round :math:`T`; ``"fixed"`` uses ``alpha_start``;
  ``"q"`` uses :math:`\alpha_j = q_j` (the exact gradient alignment of paper Eq. 7).
* ``share_start`` :math:`s` and ``share_every`` :math:`k`: correlations are shared in
  rounds :math:`t \ge s` with :math:`(t-s) \bmod k = 0` (the paper's DP runs share
  from round 101 or 151, some every second round).  **Before round** :math:`s`
  nothing is shared and clients train with :math:`\alpha = 1`, i.e. plain local SC:
  those rounds are exactly FedAvg+SC.  Round :math:`s` plays the role of the
  seed's round 1 (every client uploads).  In rounds after :math:`s` that do not
  share, clients train with the server's current (stale) :math:`\tilde R_{-j}`.

Stability options (not in the seed; docs/fedsc_tuning.md, "Stability"): with many local
steps the frozen :math:`\tilde R_{-j}` lets the clients' displacements overshoot what the
global objective tolerates.  ``server_lr`` :math:`\eta_s \in (0, 1]` applies only that
fraction of the mean displacement, :math:`\theta^t = \theta^{t-1} + \eta_s(\bar\theta -
\theta^{t-1})` (1: the paper's plain mean).  ``cross_term: tracked`` moves the cross
term's :math:`\tilde R_{-j}` with the client's own change of correlation during its
local steps, :math:`\tilde R_{-j} + (\hat R_j - \tilde R_j)` (the server also sends the
client's own :math:`\tilde R_j`); as a loss it adds
:math:`\tfrac12(1-\alpha)\|\hat R_j - \tilde R_j\|_F^2`, which leaves the round's first
gradient (Eq. 7) unchanged.  ``frozen`` (the default) is the paper's.

Privacy: each upload is one Gaussian release of sensitivity :math:`\mu/|D_j|`
(zero-out: one sample replaced by a null sample, the paper's proof), computed in one
place (:meth:`FedSC.dpcalr_release`, through :meth:`FedSC.releases`: the client's
handler, the server's plan and a Flower node's ledger all read it) and recorded in the
run's ledger by :func:`fedspectral.fed.protocol.run_round` when the server sends the
share request (a release counts whether or not its reply arrives).  With a target
``dp.epsilon`` the server never sends a share request that would take a client past it
(:meth:`FedSC.release_budget`): under
``dp.plan: expected`` a client whose planned releases are used up stops sharing and
trains with the stale :math:`\tilde R_{-j}`.  A warning is issued (and kept in the
results) when :math:`\delta \ge 1/|D_j|` for some client.  :math:`\sigma` is either
``dp.sigma`` (the same for all clients, as in the paper's Table 5) or calibrated per
client from ``dp.epsilon``/``dp.delta`` over its planned number of releases
(``dp.plan``).  With ``dp.enabled: false`` the correlations are shared without
noise and the ledger reports :math:`\varepsilon=\infty`.

Robustness beyond the seed (which assumes every client answers): a client whose
upload is missing is asked again in the next sharing round, and until every
client has uploaded once :math:`\tilde R` is the :math:`q`-weighted mean over
those that have (identical to the paper's formula once all have); a client that
is the only one with a matrix trains with :math:`\alpha = 1`.

Secure aggregation (``secure_aggregation: true``) is a second protocol of the same method,
:class:`~fedspectral.fed.methods.fedsc_secure.SecureFedSC` (the share phase is a
``secure_sum``); the registry (:func:`fedspectral.fed.methods.build_method`) builds it
when the configuration asks for it.

Communication: a client sampled in a sharing round receives :math:`\theta^{t-1}`
once (it keeps it from the share phase for training, as in Algorithm 1); it
uploads :math:`\tilde R_j` (float32, :math:`H^2` numbers) and its weights.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from fedspectral.config_checks import (
    MAX_BATCH_SIZE,
    MAX_VIEWS,
    ConfigError,
    MethodParams,
    bad,
    param,
)
from fedspectral.fed.correlation import (
    LEDGER_RELATION,
    MECHANISM,
    SENSITIVITY_RELATIONS,
    calibrate_correlation_sigma,
    correlation_sensitivity,
    dp_correlation,
)
from fedspectral.fed.losses import FedSCLocalLoss
from fedspectral.fed.manifest import NUM_EXAMPLES, RELEASE_ITEMS, SECAGG_KEYS, Item, Manifests
from fedspectral.fed.methods._fedsc_schedules import (
    ALPHA_SCHEDULES,
    alpha_schedule,
    is_share_round,
    planned_releases,
    share_rounds,
)
from fedspectral.fed.methods._privacy import delta_warnings
from fedspectral.fed.methods.sc import SCMethod, SCParams
from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState
from fedspectral.fed.releases import PhaseRelease
from fedspectral.fed.weights import arrays_to_net
from fedspectral.kinds import PhaseKind

__all__ = [
    "CACHE_PREFIX",
    "NO_OTHERS_WEIGHT",
    "SUMMAND",
    "FedSC",
    "FedSCParams",
    "FedSCPhase",
    "alpha_schedule",
    "is_share_round",
    "planned_releases",
    "share_rounds",
]

#: the cross term's R_-j during local steps: the paper's (frozen at the round's start) or
#: moved by the client's own change of correlation (docs/fedsc_tuning.md, "Stability")
CROSS_TERMS = ("frozen", "tracked")
#: client state keeping the weights of a share phase for the train phase of the same round
CACHE_PREFIX = "fedsc.cache."
#: the summed array of a secure share reply (:mod:`.fedsc_secure`)
SUMMAND = "x"
#: the others' weight :math:`\sum_{i \ne j} q_i = Q - q_j` at or below which no other client
#: has shared: the weights are data fractions (each at least 1/n), so what is left is the
#: rounding residue of subtracting :math:`q_j` from a sum that holds it alone, and
#: :math:`R_{-j}` is undefined (the round trains without the cross term)
NO_OTHERS_WEIGHT = 1e-12


class FedSCPhase(RoundPhase):
    """FedSC's round: the clients share their correlations (a query), then train."""

    SHARE = "share", PhaseKind.QUERY
    TRAIN = "train", PhaseKind.TRAIN


@functools.lru_cache(maxsize=256)
def _calibrated_sigma(
    epsilon: float,
    delta: float,
    releases: int,
    mu: float,
    n: int,
    accountant: str,
    neighbouring: str,
) -> float:
    return calibrate_correlation_sigma(epsilon, delta, releases, mu, n, accountant, neighbouring)


@dataclass(frozen=True)
class FedSCParams(SCParams):
    """FedSC's parameters (docs/fedsc.md lists them): the SC ones (``mu``, ``pairing``),
    the ``alpha`` schedule, when and how correlations are shared (``share_*``), the
    neighbouring relation of DP-CalR, secure aggregation (``secure_aggregation``,
    ``min_contributors``: 0 is every client, ``secure_bits``) and the stability options
    (``cross_term``, ``server_lr``)."""

    alpha: str = param("linear", choices=ALPHA_SCHEDULES)
    alpha_start: float = param(1.0, low=0.0, high=1.0)
    alpha_end: float = param(0.2, low=0.0, high=1.0)
    share_start: int = param(1, low=1)
    share_every: int = param(1, low=1)
    share_views: int = param(
        5,
        low=1,
        size=MAX_VIEWS,
        why="views of every local sample whose features DP-CalR holds; the default is 5",
    )
    share_batch_size: int = param(
        256, low=1, size=MAX_BATCH_SIZE, why="a sharing batch's activations must fit in memory"
    )
    neighbouring: str = param("zero_out", choices=SENSITIVITY_RELATIONS)
    secure_aggregation: bool = False
    min_contributors: int = 0
    secure_bits: int = param(64, low=8, high=64)
    cross_term: str = param("frozen", choices=CROSS_TERMS)
    server_lr: float = param(1.0, low=0.0, low_open=True, high=1.0)
    uses_dp: ClassVar[bool] = True

    def check_values(self) -> None:
        super().check_values()
        m = self.min_contributors
        if m != 0 and m < 2:
            raise bad("method.params.min_contributors", m, "must be >= 2 (or 0: every client)")

    def check(self, config: Any, method: str) -> None:
        super().check(config, method)
        rounds = config.method.rounds
        if self.share_start > rounds:
            raise bad(
                "method.params.share_start",
                self.share_start,
                f"after the last round ({rounds}); nothing would be shared (use method fedavg_sc)",
            )
        if self.secure_aggregation:
            self._check_secure(config)

    def _check_secure(self, config: Any) -> None:
        j, m = int(config.partition.num_clients), self.min_contributors
        if j < 2:
            raise ConfigError(
                "method.params.secure_aggregation",
                True,
                "needs >= 2 clients",
                also=("partition.num_clients",),
                message=f"config method.params.secure_aggregation needs >= 2 clients, "
                f"got partition.num_clients={j}",
            )
        if m > j:
            raise bad("method.params.min_contributors", m, f"more than the {j} clients")
        dp = getattr(config, "dp", None)
        if dp is not None and dp.enabled and dp.plan != "worst_case":
            raise ConfigError(
                "dp.plan",
                dp.plan,
                "only 'worst_case' with method.params.secure_aggregation",
                also=("method.params.secure_aggregation",),
                message=f"config dp.plan={dp.plan!r} with "
                f"method.params.secure_aggregation: every client contributes "
                f"to every sharing round (fresh noise each round), so only "
                f"'worst_case' plans its releases",
            )


class FedSC(SCMethod):
    """FedSC (see the module docstring)."""

    name = "fedsc"
    Phase: ClassVar[type[RoundPhase]] = FedSCPhase
    Params: ClassVar[type[MethodParams]] = FedSCParams
    params: FedSCParams
    neutral_params: ClassVar[dict[str, Any]] = {
        "secure_aggregation": False,
        "min_contributors": 0,
        "secure_bits": 64,
        # the stability options at their seed values leave a fingerprint as it was
        "cross_term": "frozen",
        "server_lr": 1.0,
    }

    threat_models: ClassVar[dict[str, str]] = {
        MECHANISM: "untrusted server: each client noises its correlation matrix before "
        "it leaves; holds against the server and third parties",
    }

    #: whether correlations are shared through secure aggregation: the protocol of
    #: :class:`~fedspectral.fed.methods.fedsc_secure.SecureFedSC` (chosen by the registry)
    secure: ClassVar[bool] = False

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        if bool(self.params.secure_aggregation) != self.secure:
            raise ValueError(
                f"config method.params.secure_aggregation="
                f"{self.params.secure_aggregation!r} does not fit the protocol "
                f"{type(self).__name__}; build the method with "
                f"fedspectral.fed.methods.build_method(config)"
            )

    # -- schedules --------------------------------------------------------------------
    def alpha(self, rnd: int, q: float) -> float:
        p = self.params
        return alpha_schedule(
            p.alpha, rnd, self.config.method.rounds, p.alpha_start, p.alpha_end, q
        )

    def planned_releases(self) -> int:
        c, p = self.config, self.params
        return planned_releases(
            c.method.rounds,
            p.share_start,
            p.share_every,
            c.partition.num_clients,
            c.method.clients_per_round,
            c.dp.plan,
        )

    def noise_sigma(self, n: int) -> float:
        """:math:`\\sigma_j` of a client with ``n`` samples (0 without DP)."""
        dp = self.config.dp
        if not dp.enabled:
            return 0.0
        if dp.sigma is not None:
            return float(dp.sigma)
        if dp.epsilon is None:  # validation refuses this config
            raise ValueError("dp.enabled needs dp.epsilon or dp.sigma")
        return _calibrated_sigma(
            float(dp.epsilon),
            float(dp.delta),
            self.planned_releases(),
            float(self.params.mu),
            int(n),
            dp.accountant,
            self.params.neighbouring,
        )

    # -- server -----------------------------------------------------------------------
    def init_server_state(
        self, weights: Mapping[str, np.ndarray], client_sizes: Mapping[str, int]
    ) -> ServerState:
        st = super().init_server_state(weights, client_sizes)
        st.method_state.update({"shared": [], "q_sum": 0.0, "cached": []})
        self.init_share_state(st)
        notes = delta_warnings(self.config, client_sizes)
        if notes:
            st.privacy_warnings = notes
        return st

    def init_share_state(self, state: ServerState) -> None:
        """What the share phase keeps in the round-0 ``state`` beyond the shared matrices
        (plain FedSC: nothing; the secure protocol: its sums' bookkeeping)."""

    # -- privacy: the method's contract ----------------------------------------------
    def dpcalr_release(
        self, n: int, sigma: float, neighbouring: str | None = None, threat: str = "any"
    ) -> PhaseRelease:
        """DP-CalR's release on ``n`` samples at noise ``sigma``: sensitivity
        :math:`\\Delta_j` under ``neighbouring`` (default the ``neighbouring`` parameter),
        the ledger's relation, and the :math:`d(d+1)/2` values of the packed
        :math:`d\times d` matrix -- the one place this release is computed."""
        nb = neighbouring or self.params.neighbouring
        d = int(self.config.model.projector_out)
        return PhaseRelease(
            MECHANISM,
            float(sigma),
            float(correlation_sensitivity(self.params.mu, n, nb)),
            LEDGER_RELATION[nb],
            threat=threat,
            values=d * (d + 1) // 2,
        )

    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        """A share reply's DP-CalR release at :meth:`noise_sigma` (σ = 0 without DP)."""
        if phase != FedSCPhase.SHARE:
            return []
        return [self.dpcalr_release(n, self.noise_sigma(n), neighbouring)]

    def release_variant(self, phase: str) -> str:
        """``"dp"`` for a share reply whose correlation is noised, else ``"plain"``."""
        dp = self.config.dp
        noised = bool(dp.enabled) and not (dp.sigma is not None and float(dp.sigma) == 0)
        return "dp" if phase == FedSCPhase.SHARE and noised else "plain"

    @classmethod
    def reply_manifests(cls) -> Manifests:
        """The share reply's (noised, through secure aggregation, or plain), then the
        train reply's."""
        share = {("share", v): _share_items(v) for v in ("dp", "secure", "plain")}
        return {**share, **super().reply_manifests()}

    def privacy_plan(self, n: int) -> dict[str, Any] | None:
        r"""The planned DP-CalR releases of ``n`` samples at the plain :math:`\sigma_j`."""
        releases = self.planned_releases()
        if releases < 1:
            return None
        rel = self.dpcalr_release(n, self.noise_sigma(n))
        return {
            "releases": releases,
            "sigma": rel.sigma,
            "sensitivity": rel.sensitivity,
            "neighbouring": rel.neighbouring,
        }

    def privacy_info(self, client_sizes: Mapping[str, int], ledger: Any) -> dict[str, Any]:
        """``sigma``: every client's :math:`\\sigma_j`."""
        return {"sigma": {c: self.noise_sigma(n) for c, n in client_sizes.items()}}

    def release_budget(self) -> tuple[float, float, str] | None:
        """The requested ``(dp.epsilon, dp.delta, dp.accountant)`` (``None`` without a
        target): no client is asked for a release that would take it past it."""
        dp = self.config.dp
        if not dp.enabled or dp.epsilon is None:
            return None
        return float(dp.epsilon), float(dp.delta), str(dp.accountant)

    def participants(
        self,
        phase: str,
        rnd: int,
        sampled: Sequence[str],
        all_clients: Sequence[str],
        state: ServerState,
    ) -> list[str]:
        if phase == FedSCPhase.TRAIN:
            return list(sampled)
        if not is_share_round(rnd, self.params.share_start, self.params.share_every):
            return []
        shared = set(state.method_state["shared"])
        if not shared:  # the first sharing round: every client uploads
            return list(all_clients)
        sampled_set = set(sampled)
        return [c for c in all_clients if c in sampled_set or c not in shared]

    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase == FedSCPhase.SHARE:
            sampled = set(state.sampled)  # set by run_round
            return {
                c: Payload.with_weights(state.weights, config={"cache_weights": c in sampled})
                for c in cids
            }
        return super().configure(phase, rnd, state, cids)

    def send_weights(self, rnd: int, state: ServerState, cid: str) -> bool:
        return cid not in set(state.method_state.get("cached", []))

    def r_minus(self, state: ServerState, cid: str) -> np.ndarray | None:
        """:math:`\\tilde R_{-j} = (\\tilde R - q_j\\tilde R_j)/(1-q_j)` (``None`` before any
        sharing, or when no other client has uploaded)."""
        if "R_sum" not in state.arrays:
            return None
        q = state.q[cid]
        r_sum, q_sum = state.arrays["R_sum"], float(state.method_state["q_sum"])
        key = f"R/{cid}"
        if key in state.arrays:
            num, den = r_sum - q * state.arrays[key], q_sum - q
        else:
            num, den = r_sum, q_sum
        if den <= NO_OTHERS_WEIGHT:
            return None
        return num / den

    def train_config(self, rnd: int, state: ServerState, cid: str) -> tuple[dict, dict]:
        rm = self.r_minus(state, cid)
        if rm is None:
            return {}, {"alpha": 1.0}
        alpha = self.alpha(rnd, state.q[cid])
        arrays = {"R_minus": rm.astype(np.float32)}
        own = state.arrays.get(f"R/{cid}")
        if self.params.cross_term == "tracked" and own is not None:
            arrays["R_own"] = np.asarray(own, dtype=np.float32)
        return arrays, {"alpha": alpha}

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        if phase == FedSCPhase.TRAIN:
            state.method_state["cached"] = []
            return self._aggregate_train(rnd, state, replies)
        q = state.q
        shared = list(state.method_state["shared"])
        r_sum = state.arrays.get("R_sum")
        q_sum = float(state.method_state["q_sum"])
        cached = []
        for cid, rep in replies.items():  # participant order
            new = np.asarray(rep.arrays["R"], dtype=np.float64)
            key = f"R/{cid}"
            if r_sum is None:
                r_sum = np.zeros_like(new)
            if key in state.arrays:  # R <- R - q_j R_j(old) + q_j R_j(new)
                r_sum = r_sum - q[cid] * state.arrays[key] + q[cid] * new
            else:
                r_sum = r_sum + q[cid] * new
                q_sum += q[cid]
                shared.append(cid)
            state.arrays[key] = new
            if rep.config.get("cached"):
                cached.append(cid)
        if r_sum is not None:
            state.arrays["R_sum"] = r_sum
        state.method_state["shared"] = shared
        state.method_state["q_sum"] = q_sum
        state.method_state["cached"] = cached
        m: dict[str, float] = {"clients": float(len(replies))}
        if replies:
            m["sigma_mean"] = float(
                np.mean([r.release.sigma for r in replies.values() if r.release is not None])
            )
        return m

    def _aggregate_train(
        self, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        r"""The mean of the returned weights, applied with the server step size
        :math:`\eta_s` (``server_lr``): :math:`\theta^t = \theta^{t-1} + \eta_s
        (\bar\theta - \theta^{t-1})` (:math:`\eta_s = 1`: the paper's plain mean)."""
        eta = float(self.params.server_lr)
        old = (
            {k: np.array(v, copy=True) for k, v in state.weights.items()}
            if eta != 1.0 and replies
            else None
        )
        out = super().aggregate(FedSCPhase.TRAIN, rnd, state, replies)
        for k, v in (old or {}).items():
            new = np.asarray(state.weights[k])
            if np.issubdtype(new.dtype, np.floating):
                state.weights[k] = (v + eta * (new - v)).astype(new.dtype)
        return out

    # -- client -----------------------------------------------------------------------
    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        if phase == FedSCPhase.SHARE:
            return self._share(rnd, payload, rt)
        return super().client_phase(phase, rnd, payload, rt)

    def _share(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        p = self.params
        weights = payload.weights()
        arrays_to_net(rt.net, weights)
        for k in [k for k in rt.state if k.startswith(CACHE_PREFIX)]:
            del rt.state[k]
        cache = bool(payload.config.get("cache_weights", False))
        if cache:
            rt.state.update({CACHE_PREFIX + k: v for k, v in weights.items()})
        n = len(rt.data)
        (release,) = self.client_releases(FedSCPhase.SHARE, rt)  # the ledgered object
        sigma = release.sigma
        # no clip_fraction in the reply: it is an un-noised function of the data
        r = dp_correlation(
            rt.net,
            rt.data.images,
            rt.augment,
            p.share_views,
            p.mu,
            sigma,
            rt.generator,
            rt.noise_rng,
            p.share_batch_size,
            device=rt.device,
            vectorisation=self.config.dp.vectorisation,
        )
        return Payload(
            arrays={"R": r.astype(np.float32)},
            metrics={"num-examples": float(n)},
            config={"cached": cache},
            release=release,
        )

    def received_weights(self, payload: Payload, rt: ClientRuntime) -> dict[str, np.ndarray]:
        w = payload.weights()
        if w:
            return w
        keys = [k for k in rt.state if k.startswith(CACHE_PREFIX)]
        if not keys:
            raise RuntimeError(
                f"client {rt.cid!r}: no weights in the train message and none "
                f"kept from the share phase"
            )
        return {k[len(CACHE_PREFIX) :]: rt.state.pop(k) for k in keys}

    def make_loss(
        self, payload: Payload, rt: ClientRuntime
    ) -> Callable[[list[torch.Tensor]], torch.Tensor]:
        alpha = float(payload.config.get("alpha", 1.0))
        bar = payload.arrays.get("R_minus")
        own = payload.arrays.get("R_own") if self.params.cross_term == "tracked" else None
        r_bar: torch.Tensor | None = None
        r_own: torch.Tensor | None = None
        if bar is None:
            alpha = 1.0
        else:
            r_bar = torch.from_numpy(np.asarray(bar, dtype=np.float32)).to(rt.device)
            if own is not None:
                r_own = torch.from_numpy(np.asarray(own, dtype=np.float32)).to(rt.device)
        loss = FedSCLocalLoss(self.params.mu, alpha, self.params.pairing)
        return lambda views: loss(views, r_bar, r_own)


def _share_items(variant: str) -> tuple[Item, ...]:
    """What a share reply of ``variant`` may carry (:meth:`FedSC.reply_manifests`)."""
    if variant == "secure":
        what = (
            "q_j (R~_j new - R~_j old), packed (masked in the later stages; never sent "
            "in the clear)"
        )
        return (*SECAGG_KEYS, Item("array", SUMMAND, "secure-sum", what))
    dp = variant == "dp"
    what = "R~_j, the client's correlation matrix " + ("(DP-CalR)" if dp else "(no noise)")
    return (
        Item("array", "R", "dp" if dp else "unprotected", what),
        NUM_EXAMPLES,
        *RELEASE_ITEMS,
        Item("config", "cached", "public", "echo of the request's cache_weights"),
    )
