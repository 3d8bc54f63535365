r"""The release manifest: everything a node's reply may carry, and what protects it.

A node is a reference monitor between its data and the server.  For every
``(method, phase)`` it may serve, this module declares -- in the node's own code,
never in anything the server sends -- each array, metric and config entry a reply
may hold and how that object is protected:

``dp``
    a DP mechanism applied on the node: noise from the node's own source,
    sensitivity and ε in the node's ledger (DP-CalR's :math:`\tilde R_j`, the LDP-PCA
    users' messages); holds against the server.
``client-dp``
    client-level DP applied on the node: the update clipped towards the weights the
    server sent in this very request and noised with the node's share of the noise,
    ledgered; holds against the server.
``secure-sum``
    seen by the server only summed with at least ``min_contributors`` others, and
    noised (the distributed σ) before it is masked; alone it is worth the fallback
    entry of the ledger.
``public``
    not a function of the data beyond :math:`|D_j|` (treated as public: DP-CalR's
    sensitivity :math:`\mu/|D_j|` already assumes it), a fresh random key, or an echo
    of the request.
``unprotected``
    an un-noised function of the whole data set (trained weights, a training loss):
    protected against nobody.  Weights leave only when the node's policy says
    ``allow-unprotected-weights = true``; a metric only when the policy's reply
    metrics allow it and the reply is not a DP release.
``per-sample``
    un-noised values of individual samples (FedCA's dictionary): the data nearly in
    the clear.  Served only with ``allow-nonprivate = true`` *and* the method named
    explicitly in the policy's ``methods``.

:func:`phase_manifest` picks the manifest of one request; :func:`check_manifest`
refuses, before the data is opened, a request whose manifest the policy does not
allow; :func:`enforce` builds the reply from the manifest alone, so nothing else
can leave.  :func:`manifest_table` renders every manifest as the table in
docs/flower.md (a test keeps the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "PROTECTIONS",
    "Item",
    "PhaseManifest",
    "check_manifest",
    "enforce",
    "manifest_table",
    "phase_manifest",
]

#: what each protection means (the module docstring says more)
PROTECTIONS = {
    "dp": "noised on the node (DP mechanism, node's ledger); holds against the server",
    "client-dp": "clipped and noised on the node (client-level DP, node's ledger); holds "
    "against the server",
    "secure-sum": "noised, then masked: the server sees it only summed with >= "
    "min_contributors others",
    "public": "no data beyond |D_j| (public), a fresh random key, or an echo of the request",
    "unprotected": "un-noised function of the data set: unprotected against the server",
    "per-sample": "un-noised per-sample values: the data nearly in the clear",
}


@dataclass(frozen=True)
class Item:
    """One object a reply may carry: ``kind`` (``array``/``metric``/``config``), its key
    (a trailing ``*`` matches a prefix), its protection and what it is."""

    kind: str
    key: str
    protection: str
    what: str

    def matches(self, key: str) -> bool:
        return key.startswith(self.key[:-1]) if self.key.endswith("*") else key == self.key


@dataclass(frozen=True)
class PhaseManifest:
    """The objects one reply of ``method:phase`` may carry, in one ``variant`` (which
    privacy the request asks for)."""

    method: str
    phase: str
    variant: str
    items: tuple[Item, ...]

    @property
    def sample_dp(self) -> bool:
        """Whether the reply is a sample-level DP release (it needs a per-sample encoder)."""
        return any(i.protection in ("dp", "secure-sum") for i in self.items)

    def find(self, kind: str, key: str) -> Item | None:
        return next((i for i in self.items if i.kind == kind and i.matches(key)), None)


# -- the declarations ------------------------------------------------------------------------
_N = Item("metric", "num-examples", "public", "|D_j|, the client's number of samples")
_RELEASE = tuple(
    Item("config", k, "public", "the release's report (from |D_j| and the request)")
    for k in (
        "release.sigma",
        "release.sensitivity",
        "release.mechanism",
        "release.neighbouring",
        "release.count",
        "release.threat",
    )
)
_CACHED = Item("config", "cached", "public", "echo of the request's cache_weights")
_STEPS = Item("metric", "steps", "public", "local steps (a function of |D_j| and the request)")
_LOSS = Item("metric", "loss", "unprotected", "mean local training loss")
_BASELINES = ("fedavg_sc", "fedavg_byol", "fedu", "fedema", "fedx", "fedca")
_METHOD_METRICS = {
    "fedu": ("divergence", "predictor_updated"),
    "fedema": ("mu", "divergence"),
    "fedca": ("negatives", "alignment", "aligned"),
}


def _share(variant: str) -> tuple[Item, ...]:
    if variant == "secure":
        return (
            Item("array", "C", "public", "the round's fresh public key (masks)"),
            Item("array", "S", "public", "the round's fresh public key (shares)"),
            Item("array", "sig", "public", "the node's identity signature of its keys"),
            Item(
                "array",
                "x",
                "secure-sum",
                "q_j (R~_j new - R~_j old), packed "
                "(masked in the later stages; never sent in the clear)",
            ),
        )
    prot = "dp" if variant == "dp" else "unprotected"
    return (
        Item(
            "array",
            "R",
            prot,
            "R~_j, the client's correlation matrix "
            + ("(DP-CalR)" if variant == "dp" else "(no noise)"),
        ),
        _N,
        *_RELEASE,
        _CACHED,
    )


def _train(method: str, variant: str) -> tuple[Item, ...]:
    prot = "client-dp" if variant == "client-dp" else "unprotected"
    items = [
        Item(
            "array",
            "w.*",
            prot,
            "the trained model's floating-point weights"
            + (
                " (only tensors the server sent; clipped towards them, noised)"
                if prot == "client-dp"
                else ""
            ),
        ),
        _N,
    ]
    if variant != "client-dp":  # under client-level DP a failed handler's reply (the
        # reference, noised) must look like any other: no step count, no loss
        items += [_STEPS, _LOSS]
        items += [
            Item("metric", m, "unprotected", f"{method}'s training statistic")
            for m in _METHOD_METRICS.get(method, ())
        ]
    if method == "fedca":
        items.append(
            Item(
                "array",
                "dictionary",
                "per-sample",
                "one un-noised representation per covered sample",
            )
        )
        items.append(Item("config", "fedca.has_public", "public", "echo: public data sent"))
    return tuple(items)


def _ldp_pca() -> tuple[Item, ...]:
    keys = (
        "sigma",
        "users",
        "partition-id",
        "vectorisation",
        "seconds",
        "synthetic",
        "epsilon",
        "epsilon-total",
    )
    return (
        Item("array", "messages", "dp", "one noised x_i x_i^T per user (local model)"),
        *(Item("config", f"release.{k}", "public", "the release's report") for k in keys),
    )


def _declared() -> dict[tuple[str, str, str], tuple[Item, ...]]:
    out: dict[tuple[str, str, str], tuple[Item, ...]] = {}
    for variant in ("dp", "secure", "plain"):
        out[("fedsc", "share", variant)] = _share(variant)
    for method in ("fedsc", *_BASELINES):
        for variant in ("client-dp", "plain"):
            out[(method, "train", variant)] = _train(method, variant)
    out[("ldp-pca", "query", "dp")] = _ldp_pca()
    out[("ldp-pca", "query", "secure")] = (
        *_share("secure")[:3],
        Item(
            "array",
            "x",
            "secure-sum",
            "a holder's sum of its users' x_i x_i^T plus its "
            "share of the noise, and its user count (masked in the later stages)",
        ),
    )
    out[("ldp-pca", "query", "plan")] = (
        Item(
            "config",
            "plan.*",
            "public",
            "the node's own pca-model and pca-min-contributors (its policy, no data)",
        ),
    )
    return out


_DECLARED = _declared()


def phase_manifest(method: str, phase: str, variant: str) -> PhaseManifest:
    """The manifest of ``method:phase`` in ``variant`` (``dp``, ``secure``, ``client-dp``
    or ``plain``); ``KeyError`` for one the node's code does not declare."""
    return PhaseManifest(method, phase, variant, _DECLARED[(method, phase, variant)])


def check_manifest(policy: Any, method: str, phase: str, variant: str) -> PhaseManifest:
    """The manifest of a request, refused (:class:`~.node_policy.PolicyRefusal`) -- before
    the node's data is opened -- if the node's code declares no such reply or its policy
    does not allow one of the objects it would carry."""
    policy.check_phase(method, phase)
    if (method, phase, variant) not in _DECLARED:
        raise policy.refuse(
            f"{method}:{phase} ({variant}) has no release manifest on this "
            "node: nothing of it may leave"
        )
    man = phase_manifest(method, phase, variant)
    for item in man.items:
        if item.kind != "array":
            continue
        if item.protection == "per-sample":
            if f"{method}:{phase}" not in policy.methods or not policy.allow_nonprivate:
                raise policy.refuse(
                    f"{method}:{phase} would send {item.key!r}: {item.what}, un-noised "
                    "(needs allow-nonprivate and the method named in the policy's methods)"
                )
        elif item.protection == "unprotected" and item.key == "w.*":
            policy.check_unprotected_weights(f"{method}'s trained weights")
        elif item.protection == "unprotected":
            policy.check_nonprivate(f"{method}'s {item.key!r} ({item.what})")
    return man


def enforce(man: PhaseManifest, reply: Any, allowed_metrics: frozenset[str]) -> Any:
    """``reply`` (a :class:`~fedspectral.fed.protocol.Payload`) rebuilt from ``man``
    alone: undeclared arrays, metrics and config entries are dropped, and an
    ``unprotected`` metric also unless ``allowed_metrics`` (the policy's) holds it."""
    from fedspectral.fed.protocol import Payload

    def keep(kind: str, key: str) -> bool:
        item = man.find(kind, key)
        if item is None:
            return False
        return kind != "metric" or item.protection != "unprotected" or key in allowed_metrics

    return Payload(
        arrays={k: v for k, v in reply.arrays.items() if keep("array", k)},
        metrics={k: v for k, v in reply.metrics.items() if keep("metric", k)},
        config={k: v for k, v in reply.config.items() if keep("config", k)},
    )


def manifest_table() -> str:
    """Every declared manifest as a Markdown table (docs/flower.md holds it verbatim)."""
    rows = [
        "| method:phase | variant | object | protection | what it is |",
        "|---|---|---|---|---|",
    ]
    for (method, phase, variant), items in _DECLARED.items():
        for i in items:
            rows.append(
                f"| `{method}:{phase}` | {variant} | {i.kind} `{i.key}` | "
                f"{i.protection} | {i.what} |"
            )
    return "\n".join(rows)


#: against whom each protection holds
AGAINST = {
    "dp": "the server and third parties",
    "client-dp": "the server and third parties",
    "secure-sum": "the server while secure aggregation holds (the ledger's fallback entry "
    "otherwise)",
    "public": "not private (public by assumption)",
    "unprotected": "nobody: unprotected against the server",
    "per-sample": "nobody: unprotected against the server",
}


def released_objects(
    method: str, phases: tuple[str, ...], dp: bool, secure: bool, client_dp: str | None = None
) -> list[dict[str, str]]:
    """What a run's clients release, per phase and object, with its protection and against
    whom it holds -- the results' ``privacy.released_objects``.  ``client_dp``: the
    placement of client-level DP (``"client"``, ``"server"``) or ``None``."""
    out = []
    for phase in phases:
        if phase == "share":
            variant = "secure" if secure else ("dp" if dp else "plain")
        else:
            variant = "client-dp" if client_dp == "client" else "plain"
        if (method, phase, variant) not in _DECLARED:
            continue
        for i in _DECLARED[(method, phase, variant)]:
            if i.kind == "config":
                continue
            against = AGAINST[i.protection]
            if client_dp == "server" and i.key == "w.*":
                against += (
                    "; the server adds client-level noise to the aggregate, which "
                    "holds against third parties only"
                )
            out.append(
                {
                    "phase": phase,
                    "object": f"{i.kind} {i.key}",
                    "what": i.what,
                    "protection": i.protection,
                    "against": against,
                }
            )
    return out
