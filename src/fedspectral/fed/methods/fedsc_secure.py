r"""Secure FedSC: FedSC's share phase through secure aggregation (docs/fedsc.md section 7).

The same method as :class:`~fedspectral.fed.methods.fedsc.FedSC` (name ``fedsc``, the same
parameters), chosen by the registry (:data:`fedspectral.fed.methods.PROTOCOLS`) when
``method.params.secure_aggregation`` is true; only the share phase and what the server
keeps differ.

The share phase is a ``secure_sum``.  Every client contributes in every sharing round
(fresh noise of :meth:`SecureFedSC.distributed_sigma`, :math:`\sigma_{plain}/\sqrt{m_{min}-1}`)
the packed summand :math:`q_j(v_{j,new} - v_{j,last})` and nothing else; the server keeps
only :math:`A = \sum_k q_k v_{k,last}`, :math:`Q` and who contributed when; a client commits
its new :math:`v_j` when a later message says it was counted, and computes
:math:`\tilde R_{-j} = (A - q_j\tilde R_j)/(Q - q_j)` itself.  Fewer than
``min_contributors`` contributors abort the sum.  The ledger records each request under
the fallback threat model and each completed sum under the secure-aggregation model
(:meth:`SecureFedSC.secure_model_releases`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from fedspectral.fed.correlation import MECHANISM, dp_correlation
from fedspectral.fed.methods._fedsc_schedules import is_share_round
from fedspectral.fed.methods.fedsc import (
    CACHE_PREFIX,
    NO_OTHERS_WEIGHT,
    SUMMAND,
    FedSC,
    FedSCPhase,
)
from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import ClientRuntime, Payload, ServerState
from fedspectral.fed.releases import PhaseRelease, SecureSumSpec
from fedspectral.fed.weights import arrays_to_net
from fedspectral.kinds import PhaseKind
from fedspectral.linalg import pack_symmetric, unpack_symmetric

__all__ = ["SUMMAND", "TAIL_SIGMAS", "SecureFedSC"]

#: client state of the secure path (packed vectors, kept on the client only)
_SEC = "fedsc.secure."
#: a summand's noise is bounded by this many standard deviations (else it is refused)
TAIL_SIGMAS = 12.0


class SecureFedSCPhase(RoundPhase):
    """FedSC's round with the correlations summed securely: ``share`` is a secure sum."""

    SHARE = "share", PhaseKind.SECURE_SUM
    TRAIN = "train", PhaseKind.TRAIN


class SecureFedSC(FedSC):
    """FedSC whose correlations are shared through secure aggregation (see the module
    docstring)."""

    Phase = SecureFedSCPhase
    secure: ClassVar[bool] = True

    def min_contributors(self) -> int:
        """:math:`m_{min}`: ``min_contributors``, or every client when 0."""
        m = int(self.params.min_contributors)
        return m if m else int(self.config.partition.num_clients)

    def distributed_sigma(self, n: int) -> float:
        """:math:`\\sigma_k = \\sigma_{k,plain}/\\sqrt{m_{min}-1}`: the noise each contributor
        adds under secure aggregation (docs/fedsc.md, "Secure aggregation")."""
        return self.noise_sigma(n) / math.sqrt(self.min_contributors() - 1)

    # -- server -----------------------------------------------------------------------
    def release_variant(self, phase: str) -> str:
        """``"secure"`` for a share reply (a summand of the secure sum)."""
        return "secure" if phase == FedSCPhase.SHARE else super().release_variant(phase)

    def init_share_state(self, state: ServerState) -> None:
        """The sums' bookkeeping: each client's last counted round, the history of
        completed sums and the aborted rounds; refuses a ``min_contributors`` above the
        clients and a field too narrow for the configured noise."""
        if len(state.clients) < self.min_contributors():
            raise ValueError(
                f"method.params.min_contributors={self.min_contributors()} "
                f"exceeds the {len(state.clients)} clients"
            )
        state.method_state.update({"secure_last": {}, "secure_history": [], "secure_aborted": []})
        self._summand_bound(state)  # refuses a field too narrow for the configured noise

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
        return list(all_clients)  # fresh contributions: every client, every sharing round

    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase == FedSCPhase.SHARE:
            sampled = set(state.sampled)  # set by run_round
            return {c: self._secure_share_payload(state, c, c in sampled) for c in cids}
        out = super().configure(phase, rnd, state, cids)
        last = state.method_state["secure_last"]
        for c, pl in out.items():
            pl.config["secure.committed"] = int(last.get(c, 0))
        return out

    def _secure_share_payload(self, state: ServerState, cid: str, sampled: bool) -> Payload:
        """A sampled client (or one that never contributed) recomputes its correlation
        with :math:`\theta^{t-1}`; every other re-noises its stale one (no weights sent)."""
        last = state.method_state["secure_last"]
        recompute = sampled or cid not in last
        cfg = {
            "cache_weights": sampled,
            "recompute": recompute,
            "q": float(state.q[cid]),
            "secure.committed": int(last.get(cid, 0)),
        }
        return Payload.with_weights(state.weights if recompute else {}, config=cfg)

    def train_config(self, rnd: int, state: ServerState, cid: str) -> tuple[dict, dict]:
        # the client computes R_-j from A, Q and its own committed R_j
        a = state.arrays.get("A")
        q, q_sum = float(state.q[cid]), float(state.method_state["q_sum"])
        den = q_sum - q if cid in state.method_state["secure_last"] else q_sum
        if a is None or den <= NO_OTHERS_WEIGHT:
            return {}, {"alpha": 1.0}
        return {"A": a}, {"alpha": self.alpha(rnd, q), "Q": q_sum, "q": q}

    # -- privacy ----------------------------------------------------------------------
    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        """The fallback reading of a share request: the client's summand at
        :meth:`distributed_sigma` seen alone (``threat = "fallback"``)."""
        if phase != FedSCPhase.SHARE:
            return []
        return [self.dpcalr_release(n, self.distributed_sigma(n), neighbouring, "fallback")]

    def privacy_info(self, client_sizes: Mapping[str, int], ledger: Any) -> dict[str, Any]:
        """``sigma`` (every client's plain :math:`\\sigma_j`) and, once releases went
        through secure aggregation, ``sigma_distributed`` (:meth:`distributed_sigma`)."""
        out = super().privacy_info(client_sizes, ledger)
        if any(r.threat == "secagg" for r in ledger.releases):
            out["sigma_distributed"] = {
                c: self.distributed_sigma(n) for c, n in client_sizes.items()
            }
        return out

    def release_budget(self) -> tuple[float, float, str] | None:
        """``None``: every client's signal stays in the aggregate, so leaving a client out
        would not stop its releases; the calibration over the sharing rounds
        (``dp.plan: worst_case``) is the guarantee, and the ledger reports both threat
        models."""
        return None

    def _packed_length(self, state: ServerState) -> int:
        """Entries of the packed upper triangle of a correlation matrix, d(d+1)/2."""
        d = int(self.config.model.projector_out)
        return d * (d + 1) // 2

    def _summand_bound(self, state: ServerState) -> float:
        r"""The bound on every entry of a summand :math:`q_j(v_{new} - v_{old})`: the
        signal's range (entries of :math:`R_j` in :math:`[0,\mu]` on the diagonal and
        :math:`[-\mu/2,\mu/2]` off it, a difference of two of them at most :math:`\mu`,
        times :math:`\sqrt2` off the diagonal in the isometric packing) plus
        :data:`TAIL_SIGMAS` standard deviations of each of the two noises, times
        :math:`q_j`; the largest over clients.  ``ValueError`` when ``secure_bits``
        cannot carry the sum of every client's summand at that bound."""
        # lazy: pulls in cryptography
        from fedspectral.fed.secagg_primitives import quantisation_scale

        mu = float(self.params.mu)
        signal = mu * (math.sqrt(2.0) if self.config.dp.vectorisation == "isometric" else 1.0)
        sizes, q = state.client_sizes, state.q
        bound = max(
            q[c] * (signal + 2.0 * TAIL_SIGMAS * self.distributed_sigma(int(n)))
            for c, n in sizes.items()
        )
        try:
            quantisation_scale(bound, len(sizes), int(self.params.secure_bits))
        except ValueError as exc:
            raise ValueError(
                f"method.params.secure_bits={self.params.secure_bits}: {exc}"
            ) from None
        return bound

    def secure_sum_spec(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> SecureSumSpec:
        return SecureSumSpec(
            key=SUMMAND,
            length=self._packed_length(state),
            min_contributors=self.min_contributors(),
            bound=self._summand_bound(state),
            bits=int(self.params.secure_bits),
            mechanism=MECHANISM,
        )

    def aggregate_secure(
        self,
        phase: str,
        rnd: int,
        state: ServerState,
        total: np.ndarray | None,
        contributors: Sequence[str],
    ) -> dict[str, float]:
        r"""A completed sum: :math:`A \leftarrow A + \sum_{k} q_k(v_{k,new} - v_{k,old})`,
        :math:`Q` grows by the :math:`q_k` of first-time contributors, and the server
        notes who contributed in this round (never a per-client matrix)."""
        info = state.method_state
        sampled = set(state.sampled)
        if total is None:
            info["secure_aborted"] = [*info["secure_aborted"], int(rnd)]
            info["cached"] = []
            return {"clients": 0.0, "aborted": 1.0}
        last = dict(info["secure_last"])
        q_sum = float(info["q_sum"])
        shared = list(info["shared"])
        for c in contributors:
            if c not in last:
                q_sum += state.q[c]
                shared.append(c)
            last[c] = int(rnd)
        a = state.arrays.get("A")
        state.arrays["A"] = (np.zeros_like(total) if a is None else a) + total
        info.update(
            {
                "secure_last": last,
                "q_sum": q_sum,
                "shared": shared,
                "cached": [c for c in contributors if c in sampled],
                "secure_history": [
                    *info["secure_history"],
                    {"round": int(rnd), "contributors": list(contributors)},
                ],
            }
        )
        return {"clients": float(len(contributors)), "aborted": 0.0}

    def secure_model_releases(
        self, phase: str, state: ServerState
    ) -> list[tuple[str, int, PhaseRelease]]:
        r"""The releases under the secure-aggregation threat model, from the history of
        completed sums (docs/fedsc.md, "Secure aggregation").

        In completed sum :math:`i` (contributors :math:`C_i`) every client :math:`j` whose
        signal is in :math:`A` is released with sensitivity :math:`q_j\Delta_j`, protected
        by the fresh noise of :math:`K_i = C_i\cap C_{i+1}` (a noise replaced in the next
        completed sum; all of :math:`C_i` for the last one) less the largest term of a
        single other client, who may subtract its own:
        :math:`\sigma_{ij}^2 = \sum_{k\in K_i} q_k^2\sigma_k^2 - \max_{k\in K_i, k\neq j}
        q_k^2\sigma_k^2`."""
        if phase != FedSCPhase.SHARE:
            return []
        sizes, q = state.client_sizes, state.q
        hist = state.method_state["secure_history"]
        out: list[tuple[str, int, PhaseRelease]] = []
        in_a: list[str] = []
        for i, h in enumerate(hist):
            contrib = list(h["contributors"])
            nxt = set(hist[i + 1]["contributors"]) if i + 1 < len(hist) else set(contrib)
            fresh = [k for k in contrib if k in nxt]
            w2 = {k: (q[k] * self.distributed_sigma(int(sizes[k]))) ** 2 for k in fresh}
            in_a += [c for c in contrib if c not in in_a]
            for j in in_a:
                others = [w2[k] for k in fresh if k != j]
                var = math.fsum(w2.values()) - (max(others) if others else 0.0)
                rel = self.dpcalr_release(int(sizes[j]), math.sqrt(max(var, 0.0)))
                rel = replace(rel, sensitivity=q[j] * rel.sensitivity, threat="secagg")
                out.append((j, int(h["round"]), rel))
        return out

    # -- client -----------------------------------------------------------------------
    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        self._reconcile(payload, rt)
        if phase == FedSCPhase.SHARE:
            return self._secure_share(rnd, payload, rt)
        if "A" in payload.arrays:
            payload = self._with_r_minus(payload, rt)
        return super().client_phase(phase, rnd, payload, rt)

    @staticmethod
    def _reconcile(payload: Payload, rt: ClientRuntime) -> None:
        """Commit the pending contribution if the server counted it (its message says the
        client's last counted round), else drop it: the client's own :math:`\tilde R_j`
        and the aggregate cannot drift apart."""
        pend = rt.state.get(_SEC + "pending_round")
        if pend is None:
            return
        if int(payload.config.get("secure.committed", 0)) == int(pend):
            rt.state[_SEC + "noisy"] = rt.state[_SEC + "pending"]
            rt.state[_SEC + "plain"] = rt.state[_SEC + "pending_plain"]
        for k in ("pending", "pending_plain", "pending_round"):
            rt.state.pop(_SEC + k, None)

    def _secure_share(self, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        """The summand :math:`q_j(v_{new} - v_{old})` and nothing else: :math:`v` the packed
        upper triangle of the noised correlation (fresh noise of
        :meth:`distributed_sigma` every round, on a recomputed or the stale signal)."""
        p, vec = self.params, self.config.dp.vectorisation
        (release,) = self.client_releases(FedSCPhase.SHARE, rt)  # the ledgered object
        sigma = release.sigma
        for k in [k for k in rt.state if k.startswith(CACHE_PREFIX)]:
            del rt.state[k]
        if payload.config.get("recompute", True) or _SEC + "plain" not in rt.state:
            weights = payload.weights()
            if not weights:
                raise RuntimeError(
                    f"client {rt.cid!r}: asked to recompute its correlation without weights"
                )
            arrays_to_net(rt.net, weights)
            if payload.config.get("cache_weights", False):
                rt.state.update({CACHE_PREFIX + k: v for k, v in weights.items()})
            r = dp_correlation(
                rt.net,
                rt.data.images,
                rt.augment,
                p.share_views,
                p.mu,
                0.0,
                rt.generator,
                rt.noise_rng,
                p.share_batch_size,
                device=rt.device,
                vectorisation=vec,
                check_independence=sigma > 0,
            )
            # the values the plain path uploads (float32), packed
            plain = pack_symmetric(r.astype(np.float32).astype(np.float64), vec)
        else:
            plain = rt.state[_SEC + "plain"]
        noisy = release.gaussian.add(plain, rt.noise_rng)
        old = rt.state.get(_SEC + "noisy")
        q = float(payload.config["q"])
        x = q * (noisy - old) if old is not None else q * noisy
        rt.state.update(
            {
                _SEC + "pending": noisy,
                _SEC + "pending_plain": plain,
                _SEC + "pending_round": np.asarray(int(rnd)),
            }
        )
        return Payload(arrays={SUMMAND: x})

    def _with_r_minus(self, payload: Payload, rt: ClientRuntime) -> Payload:
        """The train payload with :math:`\tilde R_{-j} = (A - q_j\tilde R_j)/(Q - q_j)`
        computed here from the broadcast aggregate and the client's committed
        :math:`\tilde R_j` (``A/Q`` before its first counted contribution)."""
        vec = self.config.dp.vectorisation
        a = np.asarray(payload.arrays["A"], dtype=np.float64)
        q_sum, q = float(payload.config["Q"]), float(payload.config["q"])
        own = rt.state.get(_SEC + "noisy")
        num, den = (a - q * own, q_sum - q) if own is not None else (a, q_sum)
        d = round((math.sqrt(8 * a.shape[0] + 1) - 1) / 2)
        rm = unpack_symmetric(num, d, vec) / den
        arrays = {k: v for k, v in payload.arrays.items() if k != "A"}
        arrays["R_minus"] = rm.astype(np.float32)
        if own is not None and self.params.cross_term == "tracked":
            arrays["R_own"] = unpack_symmetric(own, d, vec).astype(np.float32)
        return Payload(arrays=arrays, metrics=dict(payload.metrics), config=dict(payload.config))
