r"""The release manifest: everything a node's reply may carry, and what protects it.

A node is a reference monitor between its data and the server.  For every
``(method, phase)`` it may serve, the method declares
(:meth:`~fedspectral.fed.protocol.Method.reply_manifests`, built from this module's
pieces; the LDP-PCA app's are :data:`APPS`) -- in the node's own code, never in anything
the server sends -- each array, metric and config entry a reply may hold and how that
object is protected:

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedspectral.fed.methods import METHODS, method_class
from fedspectral.fed.records import RELEASE_KEYS

__all__ = [
    "APPS",
    "NUM_EXAMPLES",
    "PROTECTIONS",
    "RELEASE_ITEMS",
    "SECAGG_KEYS",
    "Item",
    "Manifests",
    "PhaseManifest",
    "check_manifest",
    "declared",
    "enforce",
    "manifest_table",
    "per_sample_phases",
    "phase_manifest",
    "released_objects",
    "served_phases",
    "train_manifests",
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


# -- building blocks of the declarations (a method declares its own: Method.reply_manifests)
#: ``|D_j|``: public (DP-CalR's sensitivity already assumes it)
NUM_EXAMPLES = Item("metric", "num-examples", "public", "|D_j|, the client's number of samples")
#: the report of a DP release (:data:`fedspectral.fed.releases.RELEASE_KEYS`)
RELEASE_ITEMS = tuple(
    Item("config", k, "public", "the release's report (from |D_j| and the request)")
    for k in RELEASE_KEYS
)
#: the public keys of a secure sum's first stage (:mod:`fedspectral.fed.flower.node.secure_sum`)
SECAGG_KEYS = (
    Item("array", "C", "public", "the round's fresh public key (masks)"),
    Item("array", "S", "public", "the round's fresh public key (shares)"),
    Item("array", "sig", "public", "the node's identity signature of its keys"),
)
_STEPS = Item("metric", "steps", "public", "local steps (a function of |D_j| and the request)")
_LOSS = Item("metric", "loss", "unprotected", "mean local training loss")

Manifests = dict[tuple[str, str], tuple[Item, ...]]


def train_manifests(
    method: str,
    metrics: Sequence[str] = (),
    extra: Sequence[Item] = (),
    phases: Sequence[str] = ("train",),
) -> Manifests:
    """The manifests of ``method``'s phases of kind train (``phases``, by name): ``plain``
    (trained weights, |D_j|, the step count, the loss and the method's training
    ``metrics``, un-noised) and ``client-dp`` (the weights clipped and noised on the
    node); ``extra``: further items of both."""
    stats = [Item("metric", m, "unprotected", f"{method}'s training statistic") for m in metrics]
    what = "the trained model's floating-point weights"
    cdp = " (only tensors the server sent; clipped towards them, noised)"
    out: Manifests = {}
    for phase in phases:
        # under client-level DP a failed handler's reply (the reference, noised) must
        # look like any other: no step count, no loss
        out[(str(phase), "client-dp")] = (
            Item("array", "w.*", "client-dp", what + cdp),
            NUM_EXAMPLES,
            *extra,
        )
        out[(str(phase), "plain")] = (
            Item("array", "w.*", "unprotected", what),
            NUM_EXAMPLES,
            _STEPS,
            _LOSS,
            *stats,
            *extra,
        )
    return out


def _ldp_pca() -> Manifests:
    keys = (
        "sigma",
        "users",
        "partition-id",
        "vectorisation",
        "synthetic",
        "epsilon",
        "epsilon-total",
    )
    return {
        ("query", "dp"): (
            Item("array", "messages", "dp", "one noised x_i x_i^T per user (local model)"),
            *(Item("config", f"release.{k}", "public", "the release's report") for k in keys),
        ),
        ("query", "secure"): (
            *SECAGG_KEYS,
            Item(
                "array",
                "x",
                "secure-sum",
                "a holder's sum of its users' x_i x_i^T plus its "
                "share of the noise, and its user count (masked in the later stages)",
            ),
        ),
        ("query", "plan"): (
            Item(
                "config",
                "plan.*",
                "public",
                "the node's own pca-model and pca-min-contributors (its policy, no data)",
            ),
        ),
    }


#: the manifests of the node's apps that are not federated methods: the LDP-PCA query
APPS: dict[str, Manifests] = {"ldp-pca": _ldp_pca()}


def declared(method: Any) -> tuple[str, Manifests]:
    """``(name, {(phase, variant): items})`` of ``method``: a method (class or instance:
    its :meth:`~fedspectral.fed.protocol.Method.reply_manifests`) or a name (an app of
    :data:`APPS`, or a registered method); ``KeyError`` for an unknown name."""
    if isinstance(method, str):
        if method in APPS:
            return method, APPS[method]

        if method not in METHODS:
            raise KeyError(method)
        method = method_class(method)
    return str(method.name), dict(method.reply_manifests())


def per_sample_phases() -> tuple[str, ...]:
    """``method:phase`` of every registered method whose reply may carry per-sample values
    (a policy serves them only when it names them explicitly)."""
    out: dict[str, None] = {}
    for name in METHODS:
        for (phase, _), items in declared(name)[1].items():
            if any(i.protection == "per-sample" for i in items):
                out[f"{name}:{phase}"] = None
    return tuple(out)


def served_phases() -> tuple[str, ...]:
    """``method:phase`` of every phase the node's code declares a reply for (each registered
    method's and app's): the names a node policy's ``methods`` may list, beside ``"*"``."""
    out = {f"{name}:{phase}": None for name in [*METHODS, *APPS] for phase, _ in declared(name)[1]}
    return tuple(out)


def phase_manifest(method: Any, phase: str, variant: str) -> PhaseManifest:
    """The manifest of ``method:phase`` in ``variant`` (``dp``, ``secure``, ``client-dp``
    or ``plain``); ``KeyError`` for one the node's code does not declare.  ``method``: as
    for :func:`declared`."""
    name, manifests = declared(method)
    return PhaseManifest(name, phase, variant, manifests[(phase, variant)])


def check_manifest(policy: Any, method: Any, phase: str, variant: str) -> PhaseManifest:
    """The manifest of a request, refused (:class:`~.node_policy.PolicyRefusal`) -- before
    the node's data is opened -- if the node's code declares no such reply or its policy
    does not allow one of the objects it would carry.  ``method``: as for
    :func:`declared`."""
    name = method if isinstance(method, str) else str(method.name)
    policy.check_phase(name, phase)
    try:
        man = phase_manifest(method, phase, variant)
    except KeyError:
        raise policy.refuse(
            f"{name}:{phase} ({variant}) has no release manifest on this "
            "node: nothing of it may leave"
        ) from None
    for item in man.items:
        if item.kind != "array":
            continue
        if item.protection == "per-sample":
            if f"{name}:{phase}" not in policy.methods or not policy.allow_nonprivate:
                raise policy.refuse(
                    f"{name}:{phase} would send {item.key!r}: {item.what}, un-noised "
                    "(needs allow-nonprivate and the method named in the policy's methods)"
                )
        elif item.protection == "unprotected" and item.key == "w.*":
            policy.check_unprotected_weights(f"{name}'s trained weights")
        elif item.protection == "unprotected":
            policy.check_nonprivate(f"{name}'s {item.key!r} ({item.what})")
    return man


def enforce(man: PhaseManifest, reply: Any, allowed_metrics: frozenset[str]) -> Any:
    """``reply`` (a :class:`~fedspectral.fed.protocol.Payload`) rebuilt from ``man``
    alone: undeclared arrays, metrics and config entries are dropped, and an
    ``unprotected`` metric also unless ``allowed_metrics`` (the policy's) holds it."""

    def keep(kind: str, key: str) -> bool:
        item = man.find(kind, key)
        if item is None:
            return False
        return kind != "metric" or item.protection != "unprotected" or key in allowed_metrics

    return type(reply)(
        arrays={k: v for k, v in reply.arrays.items() if keep("array", k)},
        metrics={k: v for k, v in reply.metrics.items() if keep("metric", k)},
        config={k: v for k, v in reply.config.items() if keep("config", k)},
    )


def manifest_table() -> str:
    """Every declared manifest -- each registered method's, in the registry's order, then
    the apps' -- as a Markdown table (docs/flower.md holds it verbatim)."""
    rows = [
        "| method:phase | variant | object | protection | what it is |",
        "|---|---|---|---|---|",
    ]
    for name in [*METHODS, *APPS]:
        for (phase, variant), items in declared(name)[1].items():
            for i in items:
                rows.append(
                    f"| `{name}:{phase}` | {variant} | {i.kind} `{i.key}` | "
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
    whom it holds -- the results' ``privacy.released_objects``.  Each phase's manifest is
    the method's ``secure`` one under secure aggregation, its ``dp`` one with ``dp``, its
    ``client-dp`` one under client-side client-level DP (``client_dp``: its placement,
    ``"client"`` or ``"server"``, or ``None``), else its ``plain`` one."""
    _, manifests = declared(method)
    out = []
    for phase in phases:
        wanted = [("secure", secure), ("dp", dp), ("client-dp", client_dp == "client")]
        variant = next((v for v, on in wanted if on and (phase, v) in manifests), "plain")
        for i in manifests.get((phase, variant), ()):
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
