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
    2. ``node_config["privacy-policy"]``: path of a TOML file (keys below, at top
       level or under ``[privacy]``), then any ``policy-*`` node-config key on top;
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
    knowing the configuration can regenerate it.  Never taken from the server.
``reply-metrics`` ("")
    extra metric names the node may send un-noised (the defaults,
    :data:`BASE_REPLY_METRICS` plus the method's ``reported_metrics``, are listed
    in docs/flower.md with what they reveal).
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
``ledger-dir`` ("")
    where the node's ledger is kept as ``run-<run id>.json`` (so it survives a
    SuperNode restart within a run); without it the ledger lives in the node's
    Flower context (it survives across the rounds of a run, not a restart).

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

from fedspectral.checks import check_bool, check_int, check_real, describe

# fedspectral.privacy (dp-accounting, scipy: seconds to import) is imported where it
# is used, not when this module is imported

__all__ = [
    "BASE_REPLY_METRICS",
    "POLICY_ENV",
    "NodeLedger",
    "NodePolicy",
    "PolicyRefusal",
    "node_noise_generator",
]

POLICY_ENV = "FEDSPECTRAL_NODE_POLICY"
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
        raise TypeError(f"policy key {key!r} must be a comma-separated string or a list, "
                        f"got {describe(value)}")
    return tuple(s for s in items if s)


@dataclass(frozen=True)
class NodePolicy:
    """A node's privacy policy (see the module docstring for each field)."""

    max_epsilon: float = 4.0
    max_delta: float = 1e-4
    max_epsilon_total: float = 10.0
    max_delta_total: float = 1e-4
    calibrations: tuple[str, ...] = ("analytic", "classic", "rdp", "pld", "closed_form")
    relations: tuple[str, ...] = ("zero_out", "add_remove", "replace_one")
    norm_policies: tuple[str, ...] = ("clip",)
    allow_nonprivate: bool = False
    noise_seed: int | str | None = None
    reply_metrics: tuple[str, ...] = ()
    ledger_dir: str = ""
    secagg_roster: str = ""
    secagg_identity: str = ""
    secagg_honest_server: bool = False
    secagg_colluders: int = 0
    source: str = field(default="default policy", compare=False)

    def __post_init__(self) -> None:
        for name in ("max_epsilon", "max_epsilon_total"):
            check_real(name, getattr(self, name), low=0.0, low_open=True, allow_inf=True)
        for name in ("max_delta", "max_delta_total"):
            check_real(name, getattr(self, name), low=0.0, high=1.0, low_open=True,
                       high_open=True)
        check_bool("allow_nonprivate", self.allow_nonprivate)
        check_bool("secagg_honest_server", self.secagg_honest_server)
        check_int("secagg_colluders", self.secagg_colluders, low=0)
        if self.secagg_roster == "simulation" and self.noise_seed != "derive":
            raise ValueError("secagg-roster 'simulation' derives every identity key from the "
                             "client ids (anyone can): only with noise-seed 'derive', the "
                             "simulation engine's own nodes")
        s = self.noise_seed
        if not (s is None or s == "derive"):
            check_int("noise_seed", s, low=0)
        for name in ("calibrations", "relations", "norm_policies", "reply_metrics"):
            if not isinstance(getattr(self, name), tuple):
                object.__setattr__(self, name, _names(getattr(self, name), name))

    # -- construction ---------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str,
                     base: NodePolicy | None = None) -> NodePolicy:
        """A policy from ``{key: value}`` with the file's key names (``max-epsilon``...)."""
        known = {f.name.replace("_", "-"): f.name for f in fields(cls) if f.name != "source"}
        kw: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ValueError(f"{source}: unknown privacy-policy key {key!r} "
                                 f"(known: {', '.join(sorted(known))})")
            name = known[key]
            if name == "noise_seed":
                value = None if value in ("none", "", None, -1) else value
            elif name in ("calibrations", "relations", "norm_policies", "reply_metrics"):
                value = _names(value, key)
            elif name in ("ledger_dir", "secagg_roster", "secagg_identity"):
                value = str(value)
            elif name in ("max_epsilon", "max_delta", "max_epsilon_total", "max_delta_total") \
                    and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            kw[name] = value
        return replace(base or cls(), source=source, **kw)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> NodePolicy:
        """Read a TOML policy file (keys at top level or under ``[privacy]``)."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"privacy policy file {str(p)!r} not found")
        data = tomllib.loads(p.read_text())
        if "privacy" in data and isinstance(data["privacy"], dict):
            data = data["privacy"]
        return cls.from_mapping(data, f"privacy policy {p}")

    @classmethod
    def from_node(cls, node_config: Mapping[str, Any]) -> NodePolicy:
        """The policy of a node from its ``node_config`` and environment (module docstring)."""
        path = node_config.get("privacy-policy") or os.environ.get(POLICY_ENV, "")
        base = cls.from_file(str(path)) if path else None
        inline = {k[len(_PREFIX):]: v for k, v in node_config.items()
                  if isinstance(k, str) and k.startswith(_PREFIX)}
        if not inline:
            return base or cls()
        source = (f"{base.source} + node-config" if base is not None
                  else "node-config privacy policy")
        return cls.from_mapping(inline, source, base)

    def to_dict(self) -> dict[str, Any]:
        return {f.name.replace("_", "-"): (list(v) if isinstance(v, tuple) else v)
                for f in fields(self) for v in [getattr(self, f.name)]}

    # -- checks (on what the server asks, before any data is touched) -----------------
    def refuse(self, what: str) -> PolicyRefusal:
        return PolicyRefusal(f"refused by the node's {self.source}: {what}")

    def require(self, key: str, value: str, allowed: Iterable[str]) -> None:
        """``value`` (a server's choice) must be in ``allowed`` (policy key ``key``)."""
        allowed = tuple(allowed)
        if value not in allowed:
            raise self.refuse(f"{key} {value!r} is not allowed (policy {key}: "
                              f"{', '.join(allowed) or 'none'})")

    def check_nonprivate(self, what: str) -> None:
        if not self.allow_nonprivate:
            raise self.refuse(f"{what} would be released without noise "
                              "(policy allow-nonprivate: false)")

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
        from fedspectral.privacy.accounting import epsilon_of_releases

        if release.noise_multiplier == 0:
            self.check_nonprivate(f"a {release.mechanism} release")
            return {"epsilon": math.inf, "epsilon_total": math.inf}
        one = epsilon_of_releases([replace(release, count=1)], self.max_delta, "analytic")
        if release.count > 1:
            one = epsilon_of_releases([release], self.max_delta, "rdp")
        if not one <= self.max_epsilon:
            raise self.refuse(f"one {release.mechanism} release would spend epsilon "
                              f"{one:.4g} at delta {self.max_delta:g}, above max-epsilon "
                              f"{self.max_epsilon:g}")
        total = ledger.epsilon_with(release, self.max_delta_total)
        if not total <= self.max_epsilon_total:
            raise self.refuse(f"this {release.mechanism} release would bring the run's total "
                              f"to epsilon {total:.4g} at delta {self.max_delta_total:g}, "
                              f"above max-epsilon-total {self.max_epsilon_total:g}")
        return {"epsilon": float(one), "epsilon_total": float(total)}

    def allowed_metrics(self, method_metrics: Iterable[str] = ()) -> frozenset[str]:
        return frozenset((*BASE_REPLY_METRICS, *method_metrics, *self.reply_metrics))


def node_noise_generator(policy: NodePolicy, derived: Any = None,
                         parts: tuple[Any, ...] = ()) -> Any:
    """The source a node draws its privacy noise from -- the ONE place where that is decided.

    By default (``policy.noise_seed is None``) the secure source
    :class:`fedspectral.privacy.SecureNoise`: OS entropy through a cryptographically
    secure generator and OpenDP's floating-point-safe Gaussian mechanism.  Nothing the
    server knows (run seed, round, client id, phase) enters it, so the server cannot
    regenerate and subtract the noise.

    Test modes, set by the node's own policy only: ``"derive"`` returns
    ``derived`` (the in-process runner's stream, from the run's seeds); an integer
    ``s`` seeds numpy from ``(s, *parts)``.
    """
    s = policy.noise_seed
    if s is None:
        from fedspectral.privacy import SecureNoise

        return SecureNoise()
    if s == "derive":
        if derived is None:
            raise ValueError("noise-seed 'derive' needs the derived generator")
        return derived
    from fedspectral.fed.protocol import derive_seed

    return np.random.default_rng(derive_seed("node-noise", int(s), *parts))


class NodeLedger:
    """What this node has released in one run, kept by the node itself.

    A :class:`~fedspectral.privacy.PrivacyLedger` of the node's releases, stored
    in ``<ledger-dir>/run-<run id>.json`` (written before the reply leaves, so a
    restarted SuperNode continues from it) or, without ``ledger-dir``, in the
    node's Flower ``context.state``.
    """

    STATE_KEY = "fedspectral.node-ledger"

    def __init__(self, policy: NodePolicy, run_id: int, context: Any = None) -> None:
        self.policy = policy
        self.run_id = int(run_id)
        self.context = context
        self.path = (Path(policy.ledger_dir) / f"run-{self.run_id}.json"
                     if policy.ledger_dir else None)
        self.ledger = self._read()

    def _read(self) -> Any:
        from fedspectral.privacy import PrivacyLedger

        if self.path is not None:
            if self.path.exists():
                return PrivacyLedger.from_dict(json.loads(self.path.read_text()))
            return PrivacyLedger()
        if self.context is not None and self.STATE_KEY in self.context.state:
            rec = self.context.state.config_records[self.STATE_KEY]
            return PrivacyLedger.from_dict(json.loads(str(rec["json"])))
        return PrivacyLedger()

    def epsilon_with(self, release: Any, delta: float) -> float:
        from fedspectral.privacy.accounting import epsilon_of_releases

        rel = [r for r in self.ledger.releases if r.party == release.party] + [release]
        return epsilon_of_releases(rel, delta, "rdp")

    def record(self, release: Any) -> None:
        """Add ``release`` and persist the ledger (atomically)."""
        r = release
        self.ledger.record(r.party, r.mechanism, r.sigma, r.sensitivity, r.count,
                           r.neighbouring, r.step)
        text = json.dumps(self.ledger.to_dict())
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)
        elif self.context is not None:
            from flwr.app import ConfigRecord

            self.context.state[self.STATE_KEY] = ConfigRecord({"json": text})

    def epsilon(self, party: str) -> float:
        if party not in self.ledger.parties:
            return 0.0
        return self.ledger.epsilon(self.policy.max_delta_total, party, "rdp")
