r"""The privacy policy a Flower node owns: what it will release, whatever the server asks.

In the local model (and in FedSC's threat model) the party the clients do not
trust is the server.  So nothing the server sends decides how private a node's
release is: the node reads its policy from its *own* configuration --
``flower-supernode --node-config`` or a local policy file -- checks every request
against it before it touches its data, draws its noise from a source the server
cannot seed, keeps its own ledger of what it has released, and strips from its
replies every un-noised metric its policy does not allow.

Where the policy comes from (first match wins, keys as below)
    1. a :class:`NodePolicy` passed to :func:`~.client_app.make_client_app`
       (the simulation engine, where the experimenter owns the virtual nodes);
    2. ``node_config["privacy-policy"]``: path of a TOML file (keys below, all at top
       level or all under ``[privacy]``), then any ``policy-*`` node-config key on top;
    3. the environment variable ``FEDSPECTRAL_NODE_POLICY`` (path of such a file);
    4. ``policy-*`` node-config keys alone, over the defaults.

Keys (file key = node-config key without the ``policy-`` prefix):

``max-epsilon`` (4.0), ``max-delta`` (1e-4)
    one release must be (max-epsilon, max-delta)-DP: the Gaussian release's
    ε at ``max-delta`` (dp-accounting's analytic Gaussian ε, true sensitivity) is
    at most ``max-epsilon``, and a δ the server asks for is at most ``max-delta``.
``max-epsilon-total`` (10.0), ``max-delta-total`` (1e-4)
    everything the node released in this run plus the new release, composed by
    dp-accounting's RDP accountant at ``max-delta-total``, is at most
    ``max-epsilon-total``.
``calibrations`` ("analytic,classic,rdp,pld,closed_form")
    calibrations a server may ask for: LDP-PCA's ``pca-calibration`` and FedSC's
    ``dp.accountant``; ``"paper"`` (calibrated to sensitivity 1, not the true
    :math:`\sqrt2`) is not allowed by default.
``relations`` ("zero_out,add_remove,replace_one")
    neighbouring relations (FedSC's ``neighbouring``).
``norm-policies`` ("clip")
    LDP-PCA row-norm policies: ``"raise"`` would tell the server whether some
    user's norm exceeds 1, so it is off by default.
``allow-nonprivate`` (false)
    serve a request without noise (FedSC with ``dp.enabled: false``, ε = ∞).
``noise-seed`` ("none")
    ``"none"``: noise from the node's secure source (:func:`node_noise_generator`,
    OS entropy), which the server cannot reproduce.  ``"derive"`` or an integer:
    reproducible noise, **for tests only** -- ``"derive"`` uses the run's seeds
    (the in-process runner's streams, for the bit-equality tests), so a server
    knowing the configuration can regenerate it.  Never taken from the server; with
    ``simulation = false`` (a deployed node) anything but ``"none"`` is refused at start.
``reply-metrics`` ("")
    extra metric names the node may send un-noised (the defaults,
    :data:`BASE_REPLY_METRICS` plus the method's ``reported_metrics``, are listed
    in docs/flower.md with what they reveal); a reply under a DP mechanism carries
    no un-noised metric but ``num-examples`` whatever this says
    (:mod:`.manifest`).
``methods`` ("fedsc:share,fedsc:train,ldp-pca:query,ldp_pca:collect")
    the ``method:phase`` pairs served (``"*"``: all the manifest declares, :mod:`.manifest`);
    the rest is refused before the data is opened (FedCA's dictionary is not served).  A
    name no method declares (a typo) is refused at start, the nearest known one named.
``allow-unprotected-weights`` (false)
    send trained model weights without client-level DP (FedSC's or a baseline's
    ``train`` reply when the server asks for no ``client-dp``).  Off by default: the
    operator either has the server run client-level DP with client-side noise or
    opts in here, knowing the weights are unprotected against the server.
``relation`` ("replace_one")
    the neighbouring relation the node accounts every sample-level release under,
    whatever the server's ``method.params.neighbouring`` says (the server cannot pick a
    weaker one); ``""`` follows the request (the simulation engine's policy only: refused
    at start with ``simulation = false``).
``secagg-roster`` (""), ``secagg-identity`` ("")
    for a secure sum (:mod:`.secure_sum`): a TOML file of the peers' Ed25519 identity
    public keys, obtained independently of the server, and the node's own identity key
    (PEM); ``"simulation"`` derives both from the client ids (the simulation engine's
    virtual nodes only: it requires ``noise-seed = "derive"``).  Without a roster the
    node refuses a secure sum.
``secagg-honest-server`` (false)
    run a secure sum without a roster, assuming an honest-but-curious server (noted
    in the node's state).
``secagg-colluders`` (0)
    how many other clients may collude with the server: a secure sum needs
    2 threshold > clients + secagg-colluders.
``ledger-dir`` ("": the node's state directory)
    where the node keeps its ledger, one file per data set
    (``ledger-<digest of the data set's declared identity>.json``: the operator's
    node-config ``data-id``, :func:`~.data.declared_identity`, never a content hash nor a
    path the server sent) across rounds, runs and restarts, whatever its content (a change
    is logged and recorded, :func:`~.data.note_content`); the limits
    ``max-epsilon-total``/``max-delta-total`` are per node and per data set.  Empty:
    ``$FEDSPECTRAL_NODE_STATE`` or ``$XDG_STATE_HOME/fedspectral/node``
    (``~/.local/state/fedspectral/node``).  A relative path in a policy file is resolved
    against the file's folder; in the node config (and the environment) it must be
    absolute.  The node fails closed: a ledger it cannot write refuses the request before
    any data is read.  ``"memory"``: the node's Flower context only (lost on restart; the
    simulation engine's virtual nodes): refused at start with ``simulation = false``.
``simulation`` (false)
    a simulation node: it cuts its partition from the server's plan (the experimenter's
    own virtual nodes, the local simulation's ``flower/local-node-policy.toml``).  Off:
    the node's data comes from its own node config (:mod:`.data`).

A refused request raises :class:`PolicyRefusal`: its message names the policy,
the key and the requested value (set by the server), never a data value; the
ClientApp's error reply carries it to the server, which records the client under
the round's ``failures``.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedspectral.atomic import atomic_write_bytes
from fedspectral.checks import check_bool, check_int, check_real, describe, did_you_mean
from fedspectral.fed.flower.node.data import dataset_key, note_content
from fedspectral.fed.flower.node.files import read_node_file
from fedspectral.fed.protocol import derive_seed
from fedspectral.kinds import POLICY_RELATIONS, REPORTED
from fedspectral.privacy import PrivacyLedger, SecureNoise
from fedspectral.privacy.mechanisms import CALIBRATIONS
from fedspectral.privacy.noise import MECHANISMS
from fedspectral.privacy.report import epsilon_with, release_epsilon

__all__ = [
    "BASE_REPLY_METRICS",
    "dataset_key",
    "POLICY_ENV",
    "STATE_ENV",
    "NodeLedger",
    "NodePolicy",
    "PolicyRefusal",
    "node_noise_generator",
    "node_noise_mechanism",
]

POLICY_ENV = "FEDSPECTRAL_NODE_POLICY"
#: the node's state directory (its ledgers), when the policy's ``ledger-dir`` is empty
STATE_ENV = "FEDSPECTRAL_NODE_STATE"
#: neighbouring relations a policy may fix (FedSC's DP-CalR sensitivities)
RELATIONS = POLICY_RELATIONS
#: metrics any reply may carry (the method's ``reported_metrics`` are added per method)
BASE_REPLY_METRICS = ("num-examples", "loss")
_PREFIX = "policy-"


class PolicyRefusal(PermissionError):
    """A server request outside the node's privacy policy (no data was touched)."""


def _names(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, list | tuple):
        items = [str(s).strip() for s in value]
    else:
        raise TypeError(
            f"policy key {key!r} must be a comma-separated string or a list, got {describe(value)}"
        )
    return tuple(s for s in items if s)


def _refuse_simulation_only(policy: NodePolicy) -> None:
    """Refuse a setting meant for simulations and tests (a fixed or derived noise seed: a
    server knowing it regenerates the noise; an in-memory ledger: a restart resets the
    budget; ``relation = ""``: the server would pick the neighbouring relation the node
    accounts under) in a policy that says ``simulation = false`` (a deployed node)."""
    if policy.simulation:
        return
    for key, on in (
        ("noise-seed", policy.noise_seed is not None),
        ("ledger-dir", policy.ledger_dir == "memory"),
        ("relation", policy.relation == ""),
    ):
        if on:
            raise ValueError(
                f"policy {key} {getattr(policy, key.replace('-', '_'))!r} is a simulation/test "
                "setting, refused with simulation = false (a deployed node keeps its ledger "
                "on disk and draws its noise from OS entropy)"
            )


@dataclass(frozen=True)
class NodePolicy:
    """A node's privacy policy (see the module docstring for each field)."""

    max_epsilon: float = 4.0
    max_delta: float = 1e-4
    max_epsilon_total: float = 10.0
    max_delta_total: float = 1e-4
    calibrations: tuple[str, ...] = (*CALIBRATIONS, *REPORTED)
    relations: tuple[str, ...] = ("zero_out", "add_remove", "replace_one")
    norm_policies: tuple[str, ...] = ("clip",)
    allow_nonprivate: bool = False
    noise_seed: int | str | None = None
    reply_metrics: tuple[str, ...] = ()
    methods: tuple[str, ...] = (
        "fedsc:share",
        "fedsc:train",
        "ldp-pca:query",
        "ldp_pca:collect",  # the same users' release as the LDP-PCA app's query
    )
    allow_unprotected_weights: bool = False
    relation: str = "replace_one"
    ledger_dir: str = ""
    secagg_roster: str = ""
    secagg_identity: str = ""
    secagg_honest_server: bool = False
    secagg_colluders: int = 0
    simulation: bool = False
    source: str = field(default="default policy", compare=False)

    def __post_init__(self) -> None:
        for name in ("max_epsilon", "max_epsilon_total"):
            check_real(name, getattr(self, name), low=0.0, low_open=True, allow_inf=True)
        for name in ("max_delta", "max_delta_total"):
            check_real(name, getattr(self, name), low=0.0, high=1.0, low_open=True, high_open=True)
        check_bool("allow_nonprivate", self.allow_nonprivate)
        check_bool("allow_unprotected_weights", self.allow_unprotected_weights)
        if self.relation not in ("", *RELATIONS):
            raise ValueError(
                f"policy relation must be one of {RELATIONS} or '' (follow the "
                f"request), got {self.relation!r}"
            )
        check_bool("secagg_honest_server", self.secagg_honest_server)
        check_bool("simulation", self.simulation)
        check_int("secagg_colluders", self.secagg_colluders, low=0)
        if self.secagg_roster == "simulation" and self.noise_seed != "derive":
            raise ValueError(
                "secagg-roster 'simulation' derives every identity key from the "
                "client ids (anyone can): only with noise-seed 'derive', the "
                "simulation engine's own nodes"
            )
        s = self.noise_seed
        if not (s is None or s == "derive"):
            check_int("noise_seed", s, low=0)
        for name in ("calibrations", "relations", "norm_policies", "reply_metrics", "methods"):
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, _names(getattr(self, name), name))
        known = {"calibrations": (*CALIBRATIONS, "paper", *REPORTED), "relations": RELATIONS}
        known["norm_policies"] = ("clip", "raise")
        if not set(self.methods) <= {"*", *NodePolicy.methods}:  # the registry: lazily
            from fedspectral.fed.manifest import served_phases

            known["methods"] = ("*", *served_phases())
        for name, allowed in known.items():
            for v in getattr(self, name):  # fail closed on a typo (it would refuse all)
                if v not in allowed:
                    known_ = f"{did_you_mean(v, allowed)} (known: {', '.join(allowed)})"
                    raise ValueError(f"policy {name.replace('_', '-')}: unknown {v!r}{known_}")
        _refuse_simulation_only(self)

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str, base: NodePolicy | None = None
    ) -> NodePolicy:
        """A policy from ``{key: value}`` with the file's key names (``max-epsilon``...)."""
        known = {f.name.replace("_", "-"): f.name for f in fields(cls) if f.name != "source"}
        kw: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ValueError(
                    f"{source}: unknown privacy-policy key {key!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
            name = known[key]
            if name == "noise_seed":
                value = None if value in ("none", "", None, -1) else value
            elif name in ("calibrations", "relations", "norm_policies", "reply_metrics", "methods"):
                value = _names(value, key)
            elif name in ("ledger_dir", "relation", "secagg_roster", "secagg_identity"):
                if not isinstance(value, str):  # never an int or a list made a path
                    raise TypeError(
                        f"{source}: policy key {key!r} must be text, got {describe(value)}"
                    )
            elif (
                name in ("max_epsilon", "max_delta", "max_epsilon_total", "max_delta_total")
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = float(value)
            kw[name] = value
        try:
            return replace(base or cls(), source=source, **kw)
        except (TypeError, ValueError) as exc:  # a bad value: named with the file it is in
            raise type(exc)(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> NodePolicy:
        """Read a TOML policy file: keys at top level, or all of them under ``[privacy]``.

        Fails closed, naming the file: a path that is not a regular file (a folder, a
        device, a pipe), a file over 1 MiB, text that is not UTF-8 or not TOML, an unknown
        key, or a top-level key beside a ``[privacy]`` table (it would be ignored).  A
        relative ``ledger-dir`` is resolved against the file's folder, never the working
        directory (a node restarted elsewhere keeps its budget)."""
        p = Path(path).expanduser()
        where = f"privacy policy file {str(p)!r}"
        text = read_node_file(p, where).decode("utf-8", "strict")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{where} is not valid TOML: {exc}") from None
        if "privacy" in data:
            table = data["privacy"]
            if not isinstance(table, dict):
                raise ValueError(
                    f"{where}: 'privacy' must be a table ([privacy]), got {describe(table)}"
                )
            beside = sorted(k for k in data if k != "privacy")
            if beside:
                raise ValueError(
                    f"{where}: top-level key(s) {', '.join(map(repr, beside))} beside the "
                    "[privacy] table would be ignored; put every key under [privacy] "
                    "(or none of them)"
                )
            data = table
        data = dict(data)
        for key, keep in (
            ("ledger-dir", ("", NodeLedger.MEMORY)),
            ("secagg-roster", ("", "simulation")),
            ("secagg-identity", ("",)),
        ):
            value = data.get(key)
            if isinstance(value, str) and value not in keep:
                d = Path(value).expanduser()
                data[key] = str(d if d.is_absolute() else (p.resolve().parent / d))
        return cls.from_mapping(data, f"privacy policy {p}")

    @classmethod
    def from_node(cls, node_config: Mapping[str, Any]) -> NodePolicy:
        """The policy of a node from its ``node_config`` and environment (module docstring)."""
        path = node_config.get("privacy-policy") or os.environ.get(POLICY_ENV, "")
        base = cls.from_file(str(path)) if path else None
        inline = {
            k[len(_PREFIX) :]: v
            for k, v in node_config.items()
            if isinstance(k, str) and k.startswith(_PREFIX)
        }
        if not inline:
            return base or cls()
        led = inline.get("ledger-dir")
        if (
            isinstance(led, str)
            and led not in ("", NodeLedger.MEMORY)
            and not Path(led).expanduser().is_absolute()
        ):
            raise ValueError(
                f"node-config policy-ledger-dir {led!r} is a relative path: it would "
                "depend on the node's working directory (a restart elsewhere would "
                "reset the budget); give an absolute path"
            )
        source = (
            f"{base.source} + node-config" if base is not None else "node-config privacy policy"
        )
        return cls.from_mapping(inline, source, base)

    def to_dict(self) -> dict[str, Any]:
        return {
            f.name.replace("_", "-"): (list(v) if isinstance(v, tuple) else v)
            for f in fields(self)
            for v in [getattr(self, f.name)]
        }

    # -- checks (on what the server asks, before any data is touched) -----------------
    def refuse(self, what: str) -> PolicyRefusal:
        return PolicyRefusal(f"refused by the node's {self.source}: {what}")

    def require(self, key: str, value: str, allowed: Iterable[str]) -> None:
        """``value`` (a server's choice) must be in ``allowed`` (policy key ``key``)."""
        allowed = tuple(allowed)
        if value not in allowed:
            raise self.refuse(
                f"{key} {value!r} is not allowed (policy {key}: {', '.join(allowed) or 'none'})"
            )

    def check_nonprivate(self, what: str) -> None:
        if not self.allow_nonprivate:
            raise self.refuse(
                f"{what} would be released without noise (policy allow-nonprivate: false)"
            )

    def check_delta(self, delta: float, total: bool = False) -> None:
        limit = self.max_delta_total if total else self.max_delta
        key = "max-delta-total" if total else "max-delta"
        if not delta <= limit:
            raise self.refuse(f"requested delta {delta!r} exceeds {key} {limit!r}")

    def check_release(self, release: Any, ledger: NodeLedger) -> dict[str, float]:
        """Refuse ``release`` (a :class:`~fedspectral.privacy.accounting.Release`) if it,
        or the run's total with it, exceeds the policy.

        Returns ``{"epsilon": ε of the release at max-delta, "epsilon_total": ...}``.
        """
        if release.noise_multiplier == 0:
            self.check_nonprivate(f"a {release.mechanism} release")
            return {"epsilon": math.inf, "epsilon_total": math.inf}
        one = release_epsilon(release, self.max_delta)
        if not one <= self.max_epsilon:
            raise self.refuse(
                f"one {release.mechanism} release would spend epsilon "
                f"{one:.4g} at delta {self.max_delta:g}, above max-epsilon "
                f"{self.max_epsilon:g}"
            )
        total = ledger.epsilon_with(release, self.max_delta_total)
        if not total <= self.max_epsilon_total:
            raise self.refuse(
                f"this {release.mechanism} release would bring the run's total "
                f"to epsilon {total:.4g} at delta {self.max_delta_total:g}, "
                f"above max-epsilon-total {self.max_epsilon_total:g}"
            )
        return {"epsilon": float(one), "epsilon_total": float(total)}

    def allowed_metrics(self, method_metrics: Iterable[str] = ()) -> frozenset[str]:
        return frozenset((*BASE_REPLY_METRICS, *method_metrics, *self.reply_metrics))

    def reply_metrics_for(self, method: Any, man: Any) -> frozenset[str]:
        """The un-noised metrics a reply of manifest ``man`` may carry: in a DP reply only
        those the policy's ``reply-metrics`` names explicitly (``"*"``: every declared
        one), otherwise also :data:`BASE_REPLY_METRICS` and the method's own."""
        declared = frozenset(i.key for i in man.items if i.kind == "metric")
        if "*" in self.reply_metrics:
            return declared
        if man.variant in ("dp", "secure", "client-dp"):
            return frozenset(self.reply_metrics)
        return self.allowed_metrics(getattr(method, "reported_metrics", ()))

    def check_phase(self, method: str, phase: str) -> None:
        """Refuse a ``method:phase`` the policy's ``methods`` does not list."""
        if "*" in self.methods or f"{method}:{phase}" in self.methods:
            return
        raise self.refuse(
            f"method:phase {method + ':' + phase!r} is not served (policy "
            f"methods: {', '.join(self.methods) or 'none'})"
        )

    def check_unprotected_weights(self, what: str) -> None:
        if not self.allow_unprotected_weights:
            raise self.refuse(
                f"{what} would leave without client-level DP, unprotected "
                "against the server (policy allow-unprotected-weights: false; "
                "ask the server for client-side client-level DP)"
            )

    def relation_for(self, requested: str) -> str:
        """The neighbouring relation a sample-level release is accounted under: the
        policy's own (``relation``), never a weaker one chosen by the server."""
        return self.relation or requested


def node_noise_generator(
    policy: NodePolicy, derived: Any = None, parts: tuple[Any, ...] = ()
) -> Any:
    """The source a node draws its privacy noise from -- the ONE place where that is decided.

    By default (``policy.noise_seed is None``) the secure source
    :class:`fedspectral.privacy.SecureNoise`: OS entropy through a counter-mode
    generator and a floating-point-safe discrete Gaussian on a grid.  Nothing the
    server knows (run seed, round, client id, phase) enters it, so the server cannot
    regenerate and subtract the noise.

    Test modes, set by the node's own policy only: ``"derive"`` returns
    ``derived`` (the in-process runner's stream, from the run's seeds); an integer
    ``s`` seeds numpy from ``(s, *parts)``.
    """
    s = policy.noise_seed
    if s is None:
        return SecureNoise()
    if s == "derive":
        if derived is None:
            raise ValueError("noise-seed 'derive' needs the derived generator")
        return derived

    return np.random.default_rng(derive_seed("node-noise", int(s), *parts))


def node_noise_mechanism(policy: NodePolicy) -> str:
    """The noise mechanism :func:`node_noise_generator` draws with, as the node's ledger
    records it (:func:`fedspectral.privacy.noise.noise_mechanism`)."""
    return MECHANISMS["secure" if policy.noise_seed is None else "fast"]


def state_dir(policy: NodePolicy) -> Path:
    """The directory holding the node's ledgers (``ledger-dir`` or the default state dir);
    always absolute (a relative one would move with the working directory)."""
    if policy.ledger_dir:
        d = Path(policy.ledger_dir).expanduser()
        what = f"ledger-dir {policy.ledger_dir!r}"
    elif os.environ.get(STATE_ENV, ""):
        d = Path(os.environ[STATE_ENV]).expanduser()
        what = f"${STATE_ENV} {os.environ[STATE_ENV]!r}"
    else:
        base = os.environ.get("XDG_STATE_HOME", "") or str(Path.home() / ".local" / "state")
        d = Path(base) / "fedspectral" / "node"
        what = f"the state directory {str(d)!r}"
    if not d.is_absolute():
        raise policy.refuse(
            f"{what} is a relative path: the node's budget would depend on its working "
            "directory; the node fails closed"
        )
    return d


def ledger_key(identity: str) -> str:
    """The name of the node's ledger for the data set its operator declares as
    ``identity`` (:func:`~.data.declared_identity`), whatever its content."""
    return dataset_key("fedspectral-declared-data-set", identity)


# one lock per in-memory ledger of this process (threads of one node process)
_MEMORY_LOCK = __import__("threading").Lock()


class NodeLedger:
    """Everything this node has released from one data set, kept by the node itself,
    across rounds, runs and restarts.

    A :class:`~fedspectral.privacy.PrivacyLedger` (no fixed unit: sample- and
    client-level entries side by side, each with its ``unit`` and ``threat``) stored
    in ``<state dir>/ledger-<dataset>.json`` (:func:`state_dir`), where ``dataset`` names
    the data set as the node's operator declares it (:func:`ledger_key` of the node-config
    ``data-id``; never a content hash, never a path the server sent), or, with
    ``ledger-dir = "memory"``, in the node's Flower ``context.state``.

    ``digest``: the data's content digest, recorded under ``data``; a change is logged and
    recorded (``data.changes``), the budget kept (:func:`~.data.note_content`).

    :meth:`spend` is the one way in: under an exclusive ``fcntl.flock`` on
    ``ledger-<dataset>.json.lock`` it reads the ledger as it is on disk now, checks the
    new releases against the policy with everything already there, records them and
    writes the file atomically (:func:`fedspectral.atomic.atomic_write_bytes`) -- *before*
    the computation it accounts starts, so an attempt that fails is spent all the same.
    Concurrent requests (threads or processes) therefore see each other's releases, and
    the limits hold.  A ledger that cannot be read or written refuses the request
    (:class:`PolicyRefusal`: fail closed).
    """

    STATE_KEY = "fedspectral.node-ledger"
    MEMORY = "memory"

    def __init__(
        self, policy: NodePolicy, dataset: str, context: Any = None, digest: str | None = None
    ) -> None:
        self.policy = policy
        self.dataset = str(dataset)
        self.context = context
        self.digest = digest
        self.data: dict[str, Any] = {}  # the content digests it recorded (key "data")
        self.path = (
            None
            if policy.ledger_dir == self.MEMORY
            else state_dir(policy) / f"ledger-{self.dataset}.json"
        )
        self.ledger = self._read()

    @staticmethod
    def check_writable(policy: NodePolicy) -> None:
        """Refuse (fail closed) when the policy's ledger directory cannot be used, before
        the node opens any data (the ledger's name needs the data's identity)."""
        if policy.ledger_dir == NodeLedger.MEMORY:
            return
        d = state_dir(policy)
        try:
            d.mkdir(parents=True, exist_ok=True)
            if not os.access(d, os.W_OK):
                raise PermissionError(f"directory {str(d)!r} not writable")
        except OSError as exc:
            raise policy.refuse(
                f"its ledger directory {str(d)!r} cannot be used "
                f"({type(exc).__name__}: {exc}); the node fails closed"
            ) from None

    def _fail(self, what: str, exc: BaseException) -> PolicyRefusal:
        return self.policy.refuse(
            f"its ledger {str(self.path)!r} cannot be {what} "
            f"({type(exc).__name__}: {exc}); the node fails closed"
        )

    def _read(self) -> Any:
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                if self.path.exists():
                    return self._parse(self.path.read_text())
                if not os.access(self.path.parent, os.W_OK):
                    raise PermissionError(f"directory {str(self.path.parent)!r} not writable")
            except (OSError, ValueError, TypeError, KeyError) as exc:
                raise self._fail("read", exc) from None
            return PrivacyLedger(unit=None)
        key = f"{self.STATE_KEY}.{self.dataset}"
        if self.context is not None and key in self.context.state:
            rec = self.context.state.config_records[key]
            return self._parse(str(rec["json"]))
        return PrivacyLedger(unit=None)

    def _parse(self, text: str) -> Any:
        d = json.loads(text)
        self.data = d.pop("data", {}) if isinstance(d, dict) else {}
        if not isinstance(self.data, dict):
            raise ValueError("ledger key 'data' must be a table")
        return PrivacyLedger.from_dict(d)

    def _locked(self) -> Any:
        """An exclusive lock on this ledger (a context manager)."""
        import contextlib
        import fcntl

        if self.path is None:
            return _MEMORY_LOCK

        @contextlib.contextmanager
        def lock() -> Any:
            try:
                fd = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            except OSError as exc:
                raise self._fail("locked", exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the lock

        return lock()

    def epsilon_with(self, release: Any, delta: float) -> float:
        """RDP ε of this party's releases of ``release``'s unit, ``release`` included."""
        return epsilon_with(self.ledger.releases, release, delta)

    def _write(self) -> None:
        d = self.ledger.to_dict()
        if self.data:
            d["data"] = self.data
        text = json.dumps(d)
        if self.path is not None:
            atomic_write_bytes(self.path, text.encode())
        elif self.context is not None:
            from flwr.app import ConfigRecord

            self.context.state[f"{self.STATE_KEY}.{self.dataset}"] = ConfigRecord({"json": text})

    def spend(self, releases: Iterable[Any], check: bool = True) -> list[dict[str, float]]:
        """Check ``releases`` against the policy (``check``) with everything the ledger
        holds *now*, and record them, as one step under the ledger's lock; returns
        :meth:`NodePolicy.check_release`'s figures per release.  Nothing is recorded if
        one is refused (:class:`PolicyRefusal`) or the ledger cannot be written."""
        releases = [r for r in releases if r is not None]
        with self._locked():
            self.ledger = self._read()  # what other requests recorded meanwhile
            if releases and self.digest is not None:
                note_content(self.data, self.digest, self.dataset)
            out, added = [], []
            try:
                for r in releases:
                    if check:
                        out.append(self.policy.check_release(r, self))
                    added.append(self.ledger.add(r))
                if releases:
                    self._write()
            except (PolicyRefusal, OSError) as exc:
                ids = {id(a) for a in added}
                self.ledger.remove(lambda x: id(x) in ids)
                if isinstance(exc, PolicyRefusal):
                    raise
                raise self._fail("written", exc) from None
        return out

    def record(self, release: Any) -> None:
        """Add ``release`` (unit and threat kept) and persist the ledger atomically under
        its lock, without a policy check; :class:`PolicyRefusal` if it cannot be
        written."""
        self.spend([release], check=False)
