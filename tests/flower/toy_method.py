r"""A toy federated method, defined here alone: what adding a method takes.

One module (this one) and its registration (:func:`register_toy`); nothing in
``src/`` names it.  A round has two phases:

``mean`` (a query; a DP release)
    each client clips every image (flattened) to L2 norm :data:`CLIP` and releases the
    mean, noised on the client (Gaussian, σ = ``dp.sigma``; sensitivity ``CLIP/n``
    under zero-out, ``2 CLIP/n`` under replace-one); the server keeps the
    size-weighted mean of the releases.
``shrink`` (kind train: a Flower ``train`` message, under client-level DP when the run
asks for it, though it is not called "train")
    each client shrinks the weights it is sent by a factor that depends on the
    released mean and its own data, and the server takes the plain mean of the results
    (client-level DP's fold).

Its contract: the phases and their kinds (:class:`ToyPhase`), the release of each phase for
:math:`|D_j| = n` (:meth:`ToyMethod.releases`), the reply manifests
(:meth:`ToyMethod.reply_manifests`), the threat model of its mechanism.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedspectral.config_checks import MethodParams
from fedspectral.fed.manifest import NUM_EXAMPLES, RELEASE_ITEMS, Item, Manifests
from fedspectral.fed.phases import RoundPhase
from fedspectral.fed.protocol import ClientRuntime, Method, Payload, ServerState
from fedspectral.fed.releases import PhaseRelease
from fedspectral.fed.weights import arrays_to_net, mean_arrays
from fedspectral.kinds import PhaseKind

NAME = "toy"
MECHANISM = "toy/clipped-mean"
#: L2 bound of one (flattened) image
CLIP = 1.0


class ToyPhase(RoundPhase):
    MEAN = "mean", PhaseKind.QUERY
    SHRINK = "shrink", PhaseKind.TRAIN


@dataclass(frozen=True)
class ToyParams(MethodParams):
    """No parameters; its release is what ``dp`` protects."""

    uses_dp: ClassVar[bool] = True


class ToyMethod(Method):
    """See the module docstring."""

    name = NAME
    Phase = ToyPhase
    Params: ClassVar[type[MethodParams]] = ToyParams
    threat_models: ClassVar[dict[str, str]] = {
        MECHANISM: "untrusted server: each client noises its mean before it leaves"
    }

    # -- the contract -------------------------------------------------------------------
    def releases(self, phase: str, n: int, neighbouring: str | None = None) -> list[PhaseRelease]:
        if phase != ToyPhase.MEAN:
            return []
        nb = neighbouring or self.neighbouring
        sens = (2.0 if nb == "replace_one" else 1.0) * CLIP / n
        dp = self.config.dp
        sigma = float(dp.sigma) if dp.enabled else 0.0
        return [PhaseRelease(MECHANISM, sigma, sens, nb)]

    def release_variant(self, phase: str) -> str:
        noised = self.config.dp.enabled and float(self.config.dp.sigma) > 0
        return "dp" if phase == ToyPhase.MEAN and noised else "plain"

    @classmethod
    def reply_manifests(cls) -> Manifests:
        def mean(protection: str) -> tuple[Item, ...]:
            what = "the clipped mean of the client's images"
            return (Item("array", "mean", protection, what), NUM_EXAMPLES, *RELEASE_ITEMS)

        return {
            ("mean", "dp"): mean("dp"),
            ("mean", "plain"): mean("unprotected"),
            **super().reply_manifests(),
        }

    # -- model --------------------------------------------------------------------------
    def build_net(self) -> Any:
        from fedspectral.fed.methods.sc import build_ssl_net

        return build_ssl_net(self.config)

    # -- server -------------------------------------------------------------------------
    def configure(
        self, phase: str, rnd: int, state: ServerState, cids: Sequence[str]
    ) -> dict[str, Payload]:
        if phase == ToyPhase.MEAN:
            return {c: Payload() for c in cids}
        extra = {"mean": state.arrays["mean"]} if "mean" in state.arrays else {}
        return {c: Payload.with_weights(state.weights, arrays=dict(extra)) for c in cids}

    def aggregate(
        self, phase: str, rnd: int, state: ServerState, replies: Mapping[str, Payload]
    ) -> dict[str, float]:
        if not replies:
            return {"clients": 0.0}
        sizes = [float(r.metrics["num-examples"]) for r in replies.values()]
        if phase == ToyPhase.MEAN:
            means = [
                {"mean": np.asarray(r.arrays["mean"], dtype=np.float64)} for r in replies.values()
            ]
            state.arrays["mean"] = mean_arrays(means, sizes)["mean"]
            return {
                "clients": float(len(replies)),
                "mean_norm": float(np.linalg.norm(state.arrays["mean"])),
            }
        state.weights.update(mean_arrays([r.weights() for r in replies.values()]))
        return {"clients": float(len(replies))}

    # -- client -------------------------------------------------------------------------
    def client_phase(self, phase: str, rnd: int, payload: Payload, rt: ClientRuntime) -> Payload:
        x = rt.data.images.reshape(len(rt.data), -1).double().cpu().numpy()
        n = len(x)
        if phase == ToyPhase.MEAN:
            (release,) = self.client_releases(phase, rt)  # the object the ledger holds
            norms = np.maximum(np.linalg.norm(x, axis=1, keepdims=True) / CLIP, 1.0)
            noisy = release.gaussian.add((x / norms).mean(axis=0), rt.noise_rng)
            return Payload(
                arrays={"mean": noisy.astype(np.float32)},
                metrics={"num-examples": float(n)},
                release=release,
            )
        weights = payload.weights()
        arrays_to_net(rt.net, weights)
        shared = float(np.abs(payload.arrays["mean"]).mean()) if "mean" in payload.arrays else 0.0
        factor = 1.0 - 0.01 * min(1.0, shared + float(np.abs(x).mean()))
        out = {
            k: (v * factor).astype(v.dtype) if np.issubdtype(v.dtype, np.floating) else v
            for k, v in weights.items()
        }
        return Payload.with_weights(out, metrics={"num-examples": float(n)})


def register_toy() -> None:
    """Register the toy method under :data:`NAME` (the one line a method needs)."""
    from fedspectral.fed.methods import register

    register(NAME, ToyMethod)
