"""The project's closed vocabularies, one :class:`~enum.StrEnum` each: the one place every
module spells them from.

A module of the bottom layer that imports nothing from the project: the configuration
(:mod:`fedspectral.config`, below :mod:`fedspectral.privacy`), the privacy core, the
protocol and the Flower node all name their choices from here.  A member *is* its
string (``Accountant.RDP == "rdp"``, ``json.dumps`` writes ``"rdp"``), so configuration
files, results and ledgers keep the plain strings; the tuples below are the subsets each
place accepts, as plain strings (``repr`` in error messages and YAML dumps unchanged).

:class:`Accountant`
    How ε is computed from a ledger (:mod:`fedspectral.privacy.accounting`):
    ``rdp`` (dp-accounting's Rényi-DP accountant), ``pld`` (privacy-loss distribution,
    numerically tight), ``closed_form`` (the RDP bound optimised in closed form, the
    FedSC seed's Proposition), ``analytic`` (exact ε of a single Gaussian release,
    Balle & Wang 2018).
:class:`Relation`
    The neighbouring relation a release's sensitivity holds under: ``zero_out`` (one
    record replaced by zeros), ``replace_one`` (one record replaced by any other),
    ``add_remove`` (one record added or removed).
:class:`PhaseKind`
    What one phase of a federated round is (:mod:`fedspectral.fed.protocol`): ``train``
    (a Flower ``train`` message), ``query`` (a Flower ``query`` message, nothing
    trained) or ``secure_sum`` (replies the server sees only summed).
:class:`NoiseSource`
    A noise source asked for by name (:mod:`fedspectral.privacy.noise`): ``fast``
    (seeded numpy) or ``secure`` (OS entropy, the floating-point-safe discrete Gaussian).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ACCOUNTANTS",
    "ANALYTIC",
    "CLOSED_FORM",
    "DISTRIBUTED_RELATIONS",
    "INVERTIBLE",
    "PHASE_KINDS",
    "PLD",
    "POLICY_RELATIONS",
    "RDP",
    "RELATIONS",
    "REPORTED",
    "SOURCES",
    "THREAT_MODEL_ACCOUNTANTS",
    "Accountant",
    "NoiseSource",
    "PhaseKind",
    "Relation",
]


class _Kind(StrEnum):
    """A member is its string in every way a message or a file sees: ``str``, ``format``,
    ``json`` and ``repr`` (so ``f"{kind!r}"`` reads ``'train'`` as the plain string did)."""

    def __repr__(self) -> str:
        return repr(self.value)


class Accountant(_Kind):
    """An accountant of :func:`fedspectral.privacy.accounting.epsilon_of_releases`."""

    RDP = "rdp"
    PLD = "pld"
    CLOSED_FORM = "closed_form"
    ANALYTIC = "analytic"


class Relation(_Kind):
    """A neighbouring relation (module docstring)."""

    ZERO_OUT = "zero_out"
    REPLACE_ONE = "replace_one"
    ADD_REMOVE = "add_remove"


class PhaseKind(_Kind):
    """The kind of one phase of a round (module docstring)."""

    TRAIN = "train"
    QUERY = "query"
    SECURE_SUM = "secure_sum"


class NoiseSource(_Kind):
    """A noise source asked for by name (module docstring)."""

    FAST = "fast"
    SECURE = "secure"


def _values(*members: _Kind) -> tuple[str, ...]:
    return tuple(m.value for m in members)


# -- accountants: plain-string names and the subsets each place accepts -------------------
RDP = Accountant.RDP.value
PLD = Accountant.PLD.value
CLOSED_FORM = Accountant.CLOSED_FORM.value
ANALYTIC = Accountant.ANALYTIC.value
#: every accountant of :func:`fedspectral.privacy.accounting.epsilon_of_releases`
ACCOUNTANTS = _values(*Accountant)
#: the accountants of a run's report (each with ``epsilon_<name>``), in report order; those
#: a configuration may calibrate to (``dp.accountant``)
REPORTED = _values(Accountant.RDP, Accountant.PLD, Accountant.CLOSED_FORM)
#: the accountants :func:`~fedspectral.privacy.calibration.calibrate_noise_multiplier` inverts
INVERTIBLE = _values(Accountant.RDP, Accountant.PLD)
#: the accountants of the report's per-threat-model and client-level parts
THREAT_MODEL_ACCOUNTANTS = _values(Accountant.RDP, Accountant.PLD)

# -- relations --------------------------------------------------------------------------
#: every relation: what a ledger records and DP-CalR's sensitivity is defined under
RELATIONS = _values(*Relation)
#: the relations of the distributed PCA model (:mod:`fedspectral.pca.distributed`)
DISTRIBUTED_RELATIONS = _values(Relation.REPLACE_ONE, Relation.ADD_REMOVE)
#: the relations a node's privacy policy may fix (:mod:`fedspectral.fed.flower.node.policy`;
#: in the order its message has always listed them)
POLICY_RELATIONS = _values(Relation.ZERO_OUT, Relation.ADD_REMOVE, Relation.REPLACE_ONE)

# -- phases and noise sources -----------------------------------------------------------
#: every kind of phase
PHASE_KINDS = _values(*PhaseKind)
#: the noise sources asked for by name
SOURCES = _values(*NoiseSource)
