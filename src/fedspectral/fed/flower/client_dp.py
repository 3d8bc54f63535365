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

from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState, derive_seed

__all__ = ["MECHANISM", "ClientDP"]

MECHANISM = "flower/client-dp-fixed-clipping"


@dataclass
class ClientDP:
    """Options of client-level DP on model updates.

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
    """

    clipping_norm: float
    noise_multiplier: float
    seed: int = -1
    delta: float = 1e-5
    ledger: Any = field(default=None, repr=False)
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)
    _accountant: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("clipping_norm", "noise_multiplier"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < -1:
            raise ValueError(f"seed must be an integer >= -1, got {self.seed!r}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")

    def wrap(self, method: Method) -> Method:
        """``method`` with its ``train`` aggregation made client-level DP."""
        cfg = getattr(method, "config", None)
        if cfg is not None and getattr(cfg.method, "weighted", False):
            raise ValueError("client-level DP needs the plain mean of the updates; "
                             "set method.weighted: false")
        if "train" not in method.phases:
            raise ValueError(f"method {method.name!r} has no train phase to privatise")
        return _DPMethod(method, self)

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
        self._accountant = RdpAccountant(PrivacyConfig(
            target_delta=self.delta, population_size=int(population),
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION))
        steps: dict[int, int] = {}
        for r in ledger.releases:
            if r.mechanism == MECHANISM and r.step is not None:
                steps[r.step] = steps.get(r.step, 0) + 1
        for _, m in sorted(steps.items()):
            self._accountant.compose(GaussianPrivacyEvent(
                noise_multiplier=float(self.noise_multiplier), sample_size=m,
                population_size=int(population)))
        self._event_cls = GaussianPrivacyEvent

    def release(self, rnd: int, cids: Sequence[str], population: int) -> None:
        """Account one noised aggregate of the updates of ``cids`` in round ``rnd``."""
        if self._accountant is None:
            from fedspectral.privacy import PrivacyLedger

            self.bind(self.ledger if self.ledger is not None else PrivacyLedger(unit="client"),
                      population)
        ev = self._event_cls(noise_multiplier=float(self.noise_multiplier),
                             sample_size=len(cids), population_size=int(population))
        self._accountant.compose(ev)
        for cid in cids:
            self.ledger.record_noise_multiplier(cid, MECHANISM, float(self.noise_multiplier),
                                                neighbouring="add_remove", step=int(rnd),
                                                unit="client")
        spent = self._accountant.get_privacy_spent()
        self.events.append({"round": int(rnd), "sample_size": len(cids),
                            "epsilon_flower": float(spent.epsilon)})

    def epsilon(self) -> float:
        """ε(δ) of Flower's client-level accountant so far."""
        return 0.0 if self._accountant is None else float(
            self._accountant.get_privacy_spent().epsilon)

    def summary(self) -> dict[str, Any]:
        return {"clipping_norm": self.clipping_norm, "noise_multiplier": self.noise_multiplier,
                "delta": self.delta, "epsilon_flower_rdp": self.epsilon(),
                "releases": len(self.events), "events": list(self.events)}


class _DPMethod(Method):
    """A method whose ``train`` aggregation clips the updates and noises the mean."""

    def __init__(self, inner: Method, dp: ClientDP) -> None:  # Method.__init__ not called
        self.inner = inner
        self.dp = dp
        self.name = inner.name
        self.phases = inner.phases
        self.config = getattr(inner, "config", None)
        self.params = getattr(inner, "params", {})

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    def phase_kind(self, phase: str) -> str:
        return self.inner.phase_kind(phase)

    def build_net(self) -> Any:
        return self.inner.build_net()

    def init_server_state(self, weights: Mapping[str, np.ndarray],
                          client_sizes: Mapping[str, int]) -> ServerState:
        return self.inner.init_server_state(weights, client_sizes)

    def public_size(self) -> int:
        return self.inner.public_size()

    def prepare_server(self, state: ServerState, public: Any, augment: Any, seed: int) -> None:
        self.inner.prepare_server(state, public, augment, seed)

    def participants(self, phase: str, rnd: int, sampled: Sequence[str],
                     all_clients: Sequence[str], state: ServerState) -> list[str]:
        return self.inner.participants(phase, rnd, sampled, all_clients, state)

    def configure(self, phase: str, rnd: int, state: ServerState,
                  cids: Sequence[str]) -> dict[str, Payload]:
        return self.inner.configure(phase, rnd, state, cids)

    def global_weights(self, state: ServerState) -> dict[str, np.ndarray]:
        return self.inner.global_weights(state)

    def layout_clients(self, parts: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.inner.layout_clients(parts)

    def client_phase(self, phase: str, rnd: int, payload: Payload,
                     rt: ClientRuntime) -> Payload:
        return self.inner.client_phase(phase, rnd, payload, rt)

    def planned_release(self, phase: str, rnd: int, state: ServerState,
                        cid: str) -> dict[str, Any] | None:
        return self.inner.planned_release(phase, rnd, state, cid)

    def release_budget(self) -> tuple[float, float, str] | None:
        return self.inner.release_budget()

    def aggregate(self, phase: str, rnd: int, state: ServerState,
                  replies: Mapping[str, Payload]) -> dict[str, float]:
        if phase != "train" or not replies:
            return self.inner.aggregate(phase, rnd, state, replies)
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
            norms.append(float(np.sqrt(sum(float(np.sum((u - r) ** 2))
                                           for u, r in zip(upd, ref, strict=True)))))
            compute_clip_model_update(upd, ref, C)
            arrays = dict(rep.arrays)
            for k, u in zip(names, upd, strict=True):
                arrays[f"w.{k}"] = u.astype(current[k].dtype)
            clipped[cid] = Payload(arrays=arrays, metrics=dict(rep.metrics),
                                   config=dict(rep.config))
        metrics = self.inner.aggregate(phase, rnd, state, clipped)
        m = len(clipped)
        std = compute_stdv(z, C, m)
        rng = (np.random.default_rng() if self.dp.seed < 0
               else np.random.default_rng(derive_seed("client-dp", self.dp.seed, rnd)))
        for k in names:
            w = np.asarray(state.weights[k])
            state.weights[k] = (w + rng.normal(0.0, std, w.shape)).astype(w.dtype)
        self.dp.release(rnd, list(clipped), len(state.clients))
        out = dict(metrics)
        out.update({"dp_noise_std": std, "dp_clipped_fraction":
                    float(np.mean([n > C for n in norms])),
                    "dp_update_norm": float(np.mean(norms)),
                    "epsilon_client_dp": self.dp.epsilon()})
        return out


def attach(runner: Any, dp: ClientDP) -> Any:
    """Apply ``dp`` to a runner (:class:`~fedspectral.fed.simulation.Simulation` or
    :class:`~fedspectral.fed.flower.server_app.FlowerRunner`): wrap its method and
    bind the run's ledger (fresh or loaded from a checkpoint) to ``dp``."""
    runner.method = dp.wrap(runner.method)
    fresh, load = runner._fresh_state, runner._load

    def _fresh_state() -> dict[str, Any]:
        st = fresh()
        dp.bind(st["client_ledger"], len(st["server"].clients))
        return st

    def _load() -> dict[str, Any] | None:
        st = load()
        if st is not None:
            dp.bind(st["client_ledger"], len(st["server"].clients))
        return st

    runner._fresh_state = _fresh_state
    runner._load = _load
    return runner
