r"""Locally private PCA and distributed PCA as federated methods (one round, one phase).

The two privacy models of the LDP-PCA paper's Algorithm 1, written as
:class:`~fedspectral.fed.protocol.Method` s, so that the in-process runner
(:class:`~fedspectral.fed.simulation.Simulation`, ``fedspectral train``) runs them as it
runs FedSC: the same round loop (:func:`~fedspectral.fed.protocol.run_round`), ledger,
budget, checkpoint and ``results.json``.  Each client stands for a group of users (a
hospital's patients, a phone fleet); client ``client-<j>`` holds the rows
:math:`x_i \in \mathbb{R}^p`, :math:`\|x_i\|_2 \le 1`, of its users.

``ldp_pca`` (:class:`LdpPca`, the local model)
    one phase, ``collect`` (a query): each client sends one message per user, that
    user's own perturbed second moment
    :math:`m_i = \mathrm{svec}(x_ix_i^\top) + g_i`, :math:`g_i \sim N(0,\sigma_1^2 I)`
    (:func:`fedspectral.pca.local.perturb_batch`); the server sums them
    (:class:`~fedspectral.pca.local.CovarianceAggregator`), forms
    :math:`\hat S = \frac1n\sum_i m_i` and keeps its top-``k`` eigenspace.  Each user is
    protected by its own noise against everyone, the server included; one ledger entry
    per client stands for its users (one message each, the same σ, disjoint data).
``distributed_pca`` (:class:`DistributedPca`, the distributed model)
    one phase, ``sum`` (a secure sum): each client (a *holder*) enters
    :math:`[\mathrm{svec}(\sum_i x_ix_i^\top) + g_h,\ n_h]` with a share
    :math:`g_h` sized so that any :math:`t` shares make the central Gaussian
    (:func:`fedspectral.pca.holders.holder_noise`); the server sees only the sum.  The
    ledger holds each holder's share alone (the ``fallback`` threat model, recorded when
    the request is sent) and, once the sum completes, the sum's σ (``secagg``).

Parameters (``method.params``; ``dp.epsilon``, ``dp.delta``: the users' guarantee,
``dp.enabled: true``; ``method.rounds: 1``): ``p`` (8), ``k`` (2), ``calibration``
(``analytic``), ``vectorisation`` (``auto``; the distributed model sums ``isometric``
vectors), ``norm_policy`` (``clip``); the users: ``data`` (a ``.npy`` file, one user a
row, split in order over ``partition.num_clients``) or, when it is empty, the paper's
synthetic spiked model, ``users`` a client, seeded by ``seed`` and the client's index
(:func:`synthetic_users`: the same users a Flower node of that partition draws), with
``spike``; ``distributed_pca`` also ``min_contributors`` (0: a majority, at least 2) and
``max_users`` (a holder's users at most: the secure sum's range).

Evaluation: the eigenvalues, and for synthetic users the subspace error
:math:`\|\hat V\hat V^\top - VV^\top\|_F` against the model's :math:`V`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedspectral.config import to_dict
from fedspectral.config_checks import MethodParams, bad, param
from fedspectral.fed.manifest import NUM_EXAMPLES, RELEASE_ITEMS, SECAGG_KEYS, Item, Manifests
from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState
from fedspectral.fed.releases import PhaseRelease, SecureSumSpec
from fedspectral.fed.validation import config_fingerprint
from fedspectral.kinds import PhaseKind
from fedspectral.linalg import VECTORISATIONS, n_packed, subspace_distance, top_k_eigvecs
from fedspectral.pca import holders as _holders
from fedspectral.pca import local as _local
from fedspectral.pca.real_data import load_user_rows
from fedspectral.pca.rows import NORM_POLICIES
from fedspectral.pca.synthetic import federated_model as synthetic_model
from fedspectral.pca.synthetic import federated_users as synthetic_users
from fedspectral.privacy.mechanism import Gaussian

__all__ = [
    "DistributedPca",
    "LdpPca",
    "PcaFederation",
    "PcaParams",
    "synthetic_model",
    "synthetic_users",
]

#: users a distributed-model holder may have at most by default (the secure sum's range)
MAX_USERS = 10**6


class CollectPhase(RoundPhase):
    COLLECT = "collect", PhaseKind.QUERY


class SumPhase(RoundPhase):
    SUM = "sum", PhaseKind.SECURE_SUM


@dataclass(frozen=True)
class PcaParams(MethodParams):
    """The PCA methods' parameters (module docstring)."""

    p: int = param(8, low=1, high=4096, why="p(p+1)/2 values a user's message")
    k: int = param(2, low=1)
    calibration: str = param("analytic", choices=_local.CALIBRATIONS)
    vectorisation: str = param("auto", choices=(*VECTORISATIONS, "auto"))
    norm_policy: str = param("clip", choices=NORM_POLICIES)
    data: str = ""
    users: int = param(200, low=1, high=MAX_USERS)
    seed: int = param(0, low=0, high=2**63 - 1)
    spike: float = param(1.0, low=0.0, low_open=True)
    uses_dp: ClassVar[bool] = True

    def check_values(self) -> None:
        if self.k > self.p:
            raise bad("method.params.k", self.k, f"must be at most method.params.p={self.p}")

    def check(self, config: Any, method: str) -> None:
        if config.method.rounds != 1:
            raise bad("method.rounds", config.method.rounds, f"must be 1 ({method} is one round)")
        dp = config.dp
        if not dp.enabled or dp.epsilon is None:
            raise bad(
                "dp.epsilon",
                dp.epsilon,
                f"{method} needs dp.enabled: true and dp.epsilon (each user's guarantee)",
            )


@dataclass(frozen=True)
class DistributedPcaParams(PcaParams):
    """:class:`PcaParams` and the secure sum's ``min_contributors`` and ``max_users``."""

    min_contributors: int = 0
    max_users: int = param(MAX_USERS, low=1, high=2**40)

    def check_values(self) -> None:
        super().check_values()
        m = self.min_contributors
        if m != 0 and m < 2:
            raise bad("method.params.min_contributors", m, "must be >= 2 (or 0: a majority)")
        if self.vectorisation not in ("auto", "isometric"):
            raise bad(
                "method.params.vectorisation",
                self.vectorisation,
                "must be isometric (or auto): the holders' sums are isometric vectors",
            )


@dataclass
class PcaFederation:
    """The users of each client (``clients``: ``{cid: rows}``) and the results' ``data``
    section; what :meth:`_PcaMethod.load_federation` gives the runner."""

    clients: dict[str, np.ndarray]
    info: dict[str, Any]
    synthetic: bool
    augment: Any = None
    public: Any = None


class _PcaMethod(Method):
    """What the two PCA methods share: their users, the server's estimate, evaluation."""

    Params: ClassVar[type[MethodParams]] = PcaParams
    params: PcaParams
    pillar: ClassVar[str] = "pca"

    # -- the workload -------------------------------------------------------------------
    def load_federation(self) -> PcaFederation:
        pr, n_clients = self.params, int(self.config.partition.num_clients)
        cids = [f"client-{j}" for j in range(n_clients)]
        if pr.data:
            X = load_user_rows(pr.data, pr.p, "method.params.data")
            if len(X) < n_clients:
                raise ValueError(
                    f"method.params.data holds {len(X)} users, fewer than "
                    f"partition.num_clients={n_clients}"
                )
            clients = dict(zip(cids, np.array_split(X, n_clients), strict=True))
        else:
            clients = {
                c: synthetic_users(pr.users, pr.p, pr.k, pr.seed, j, pr.spike)
                for j, c in enumerate(cids)
            }
        info = {
            "users": {c: len(x) for c, x in clients.items()},
            "dimension": pr.p,
            "synthetic": not pr.data,
            "client_sizes": {c: len(x) for c, x in clients.items()},
        }
        return PcaFederation(clients, info, synthetic=not pr.data)

    def build_net(self) -> None:
        return None

    def evaluate(self, net: Any, fed: Any, state: ServerState) -> dict[str, float]:
        """The top-``k`` eigenvalues of :math:`\\hat S` and, for synthetic users, the
        subspace error (nothing before the round)."""
        if "subspace" not in state.arrays:
            return {}
        pr = self.params
        out = {f"eigenvalue_{i + 1}": float(v) for i, v in enumerate(state.arrays["eigenvalues"])}
        out["users"] = float(state.arrays["count"][0])
        if getattr(fed, "synthetic", False):
            _, V = synthetic_model(pr.p, pr.k, pr.seed, pr.spike)
            out["subspace_error"] = float(subspace_distance(state.arrays["subspace"], V))
        return out

    def final_metrics(
        self, net: Any, fed: Any, state: ServerState, last: Mapping[str, Any]
    ) -> dict[str, Any]:
        out: dict[str, Any] = dict(last)
        for key in ("eigenvalues", "subspace"):
            if key in state.arrays:
                out[key] = np.asarray(state.arrays[key]).tolist()
        return out

    def _estimate(self, state: ServerState, agg: Any) -> dict[str, float]:
        """Keep :math:`\\hat S`'s top-``k`` eigenspace of the aggregator ``agg``."""
        S = agg.covariance()
        eigvals, V_hat = top_k_eigvecs(S, self.params.k)
        state.arrays.update(
            {
                "eigenvalues": np.asarray(eigvals, dtype=np.float64),
                "subspace": np.asarray(V_hat, dtype=np.float64),
                "count": np.array([agg.count], dtype=np.int64),
            }
        )
        return {"users": float(agg.count)}

    # -- privacy ------------------------------------------------------------------------
    @property
    def epsilon_delta(self) -> tuple[float, float]:
        """Each user's ``(dp.epsilon, dp.delta)`` (validation requires both)."""
        eps = self.config.dp.epsilon
        if eps is None:
            raise ValueError(f"{self.name} needs dp.epsilon (each user's guarantee)")
        return float(eps), float(self.config.dp.delta)

    def release_variant(self, phase: str) -> str:
        return "dp"

    def node_party(self, cid: str) -> str:
        return f"users@node{_client_index(cid)[0]}"

    @property
    def neighbouring(self) -> str:
        """Replace one user's row (the users' LDP relation; it is fixed)."""
        return "replace_one"

    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        return {c: Payload() for c in cids}


class LdpPca(_PcaMethod):
    """Algorithm 1 of the LDP-PCA paper, the local model (module docstring)."""

    name = "ldp_pca"
    Phase = CollectPhase
    threat_models: ClassVar[dict[str, str]] = {
        _local.MECHANISM: "everyone, the server included: each user's message is noised "
        "alone before it leaves the client"
    }

    @property
    def vectorisation(self) -> str:
        return _local.resolve_vectorisation(self.params.vectorisation, self.params.calibration)

    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        """One message per user, each its own release: one entry stands for the client's
        ``n`` users (disjoint data).  The relation is the users' replace-one at the true
        sensitivity whatever the calibration (``neighbouring`` does not apply)."""
        eps, delta = self.epsilon_delta
        sigma = _local.ldp_noise_scale(eps, delta, self.params.calibration).sigma
        user = Gaussian(float(sigma), _local.SENSITIVITY, "replace_one")  # one user's message
        return [
            PhaseRelease.of(
                user, f"{_local.MECHANISM}[n_users={int(n)}]", values=n_packed(self.params.p)
            )
        ]

    @classmethod
    def reply_manifests(cls) -> Manifests:
        what = "one message per user: the user's own noised second moment"
        return {
            ("collect", "dp"): (Item("array", "messages", "dp", what), NUM_EXAMPLES, *RELEASE_ITEMS)
        }

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        p, vec = self.params.p, self.vectorisation
        agg = _local.CovarianceAggregator(p, vec)
        for cid in sorted(replies, key=_client_index):
            M = np.asarray(replies[cid].arrays["messages"], dtype=np.float64)
            if M.ndim != 2 or M.shape[1] != n_packed(p):
                raise ValueError(
                    f"{cid} sent messages of shape {M.shape}, not (users, {n_packed(p)})"
                )
            agg.add_batch(M)
        if agg.count == 0:
            return {"users": 0.0}
        return self._estimate(state, agg)

    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        (release,) = self.client_releases(phase, rt)  # the object the ledger holds
        pr = self.params
        eps, delta = self.epsilon_delta
        if _local.ldp_noise_scale(eps, delta, pr.calibration).sigma != release.sigma:
            raise ValueError("the ledgered release is not this request's (sigma differs)")
        X = np.asarray(rt.data, dtype=np.float64)
        msgs = _local.perturb_batch(
            X,
            eps,
            delta,
            rng=rt.noise_rng,
            calibration=pr.calibration,
            norm_policy=pr.norm_policy,
            vectorisation=self.vectorisation,
        )
        return Payload(
            arrays={"messages": msgs},
            metrics={"num-examples": float(len(X))},
            release=release,
        )


class DistributedPca(_PcaMethod):
    """The distributed model: the holders' noised sums, summed securely (module
    docstring)."""

    name = "distributed_pca"
    Phase = SumPhase
    Params: ClassVar[type[MethodParams]] = DistributedPcaParams
    params: DistributedPcaParams
    secure = True
    threat_models: ClassVar[dict[str, str]] = {
        _holders.MECHANISM: "an honest-but-curious server under secure aggregation "
        "(secagg); each holder's share alone (fallback) against a server that breaks it"
    }

    def session_binding(self) -> str:
        """The configuration's fingerprint: ε, δ, the calibration and the threshold every
        holder sizes its share for (a server that asks holders different things cannot
        complete one sum)."""
        return config_fingerprint(to_dict(self.config))

    def threshold(self, holders: int) -> int:
        """The secure sum's :math:`t`: ``min_contributors``, else a majority, at least 2."""
        m = self.params.min_contributors
        return max(m, holders // 2 + 1, 2)

    def noise(self, holders: int) -> Any:
        eps, delta = self.epsilon_delta
        return _holders.holder_noise(
            eps, delta, self.threshold(holders), calibration=self.params.calibration
        )

    def _holders_of(self) -> int:
        return int(self.config.partition.num_clients)

    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        """The fallback reading of a holder's entry: its share alone, at the share's σ."""
        share = self.noise(self._holders_of()).share()
        return [
            PhaseRelease.of(
                share, _holders.MECHANISM, threat="fallback", values=n_packed(self.params.p)
            )
        ]

    @classmethod
    def reply_manifests(cls) -> Manifests:
        what = (
            "the holder's sum of its users' x_i x_i^T plus its share of the noise, and its "
            "user count (masked in the later stages; never sent in the clear)"
        )
        return {("sum", "secure"): (*SECAGG_KEYS, Item("array", "summand", "secure-sum", what))}

    def release_variant(self, phase: str) -> str:
        return "secure"

    def secure_sum_spec(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> SecureSumSpec:
        noise = self.noise(len(state.clients))
        bound = float(self.params.max_users) + 12.0 * float(noise.sigma)
        return SecureSumSpec(
            "summand",
            n_packed(self.params.p) + 1,
            self.threshold(len(state.clients)),
            bound,
            64,
            _holders.MECHANISM,
        )

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        raise RuntimeError("distributed_pca's phase is a secure sum (aggregate_secure)")

    def aggregate_secure(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        total: np.ndarray | None,
        contributors: Sequence[str],
    ) -> dict[str, float]:
        if total is None:
            return {"contributors": 0.0}
        n = round(float(total[-1]))
        agg = _local.CovarianceAggregator(self.params.p, "isometric").add_sum(total[:-1], n)
        state.method_state["contributors"] = list(contributors)
        out = self._estimate(state, agg)
        out["contributors"] = float(len(contributors))
        return out

    def secure_model_releases(
        self, phase: str, state: ServerState
    ) -> list[tuple[str, int, PhaseRelease]]:
        contributors = list(state.method_state.get("contributors", []))
        if not contributors:
            return []
        secagg = self.noise(len(state.clients)).secagg(len(contributors))
        rel = PhaseRelease.of(secagg, _holders.MECHANISM, threat="secagg")
        return [(c, int(state.round), rel) for c in contributors]

    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        (release,) = self.client_releases(phase, rt)  # the object the ledger holds
        noise = self.noise(self._holders_of())
        if float(noise.share_sigma) != release.sigma:
            raise ValueError("the ledgered release is not this request's (sigma differs)")
        X = np.asarray(rt.data, dtype=np.float64)
        msg = _holders.holder_message(X, noise, rt.noise_rng, norm_policy=self.params.norm_policy)
        # the count is public (the client's size): it enters the sum as it is
        return Payload(arrays={"summand": np.append(msg, len(X))})


def _client_index(cid: str) -> tuple[int, str]:
    """Sort key of ``client-<j>`` by ``j`` (the order a Flower server sums its nodes in)."""
    head, _, tail = cid.rpartition("-")
    return (int(tail), head) if tail.isdigit() else (-1, cid)
