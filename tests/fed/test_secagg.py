"""The five-stage secure aggregation (fedspectral.fed.secagg), with simulated clients, and
the attacks of an active server on it (issue 23): each shown succeeding on a deliberately
weakened protocol and failing on the real one."""

from __future__ import annotations

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedspectral.fed.secagg import SecAggAborted, SecAggClient, SecAggParams, advert_digest
from fedspectral.fed.secagg_primitives import (
    PRIME,
    QuantisationOverflow,
    _hkdf,
    _raw_ed_public,
    _raw_public,
    dequantise,
    prg_mask,
    quantise,
    shamir_reconstruct,
    shamir_split,
)
from fedspectral.fed.secagg_server import InProcessStages, SecAggServer, run_stages, secure_sum

CLIENTS = tuple(f"c{i}" for i in range(7))
L = 64


def _inputs(bits=64, seed=0):
    rng = np.random.default_rng(seed)
    return {
        c: rng.integers(0, 2**62, size=L, dtype=np.uint64) % np.uint64(2**bits - 1)
        if bits < 64
        else rng.integers(0, 2**63, size=L, dtype=np.uint64) * np.uint64(2)
        for c in CLIENTS
    }


def _modsum(vs, bits=64):
    vs = list(vs)
    tot = np.zeros(len(vs[0]), dtype=np.uint64)
    for v in vs:
        tot = tot + v
    return tot & np.uint64(2**bits - 1) if bits < 64 else tot


@pytest.mark.parametrize("bits", [64, 40])
def test_sum_exact_without_dropouts(bits):
    p = SecAggParams(CLIENTS, threshold=4, length=L, bits=bits, session=b"r1")
    xs = _inputs(bits)
    total, contributors = secure_sum(xs, p)
    assert contributors == list(CLIENTS)
    np.testing.assert_array_equal(total, _modsum(xs.values(), bits))


@pytest.mark.parametrize("stage", [2, 3, 4])
def test_dropout_after_key_sharing_yields_survivors_exact_sum(stage):
    """An honest run with dropouts completes: c2 and c5 shared their keys, then went
    silent (before sending y: stage 2; after sending y, before signing the consistency
    statement: stage 3; after signing, before unmasking: stage 4)."""
    p = SecAggParams(CLIENTS, threshold=4, length=L, session=b"r2")
    xs = _inputs(seed=1)
    total, contributors = secure_sum(xs, p, drop_before={"c2": stage, "c5": stage})
    if stage == 2:  # their masked inputs never arrived: the sum is over the survivors
        assert contributors == [c for c in CLIENTS if c not in ("c2", "c5")]
    else:  # their y arrived; the others' shares rebuild their self-masks
        assert contributors == list(CLIENTS)
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in contributors]))


@pytest.mark.parametrize("stage", [0, 1, 2, 3, 4])
def test_below_threshold_aborts_cleanly(stage):
    p = SecAggParams(CLIENTS, threshold=5, length=L, session=b"r3")
    xs = _inputs(seed=2)
    with pytest.raises(SecAggAborted, match="fewer than the threshold 5"):
        secure_sum(xs, p, drop_before={"c0": stage, "c1": stage, "c4": stage})
    # one dropout fewer: the sum goes through
    total, contributors = secure_sum(xs, p, drop_before={"c0": stage, "c1": stage})
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in contributors]))


def _identities(clients):
    ids = {c: Ed25519PrivateKey.generate() for c in clients}
    return ids, {c: _raw_ed_public(k) for c, k in ids.items()}


def _run_stages(p, xs):
    ids, trusted = _identities(p.clients)
    clients = {c: SecAggClient(c, p, ids[c], trusted) for c in p.clients}
    server = SecAggServer(p)
    roster = server.collect_keys({c: k.advertise_keys() for c, k in clients.items()})
    inbox = server.route_shares({c: k.share_keys(roster) for c, k in clients.items()})
    masked = {c: clients[c].masked_input(xs[c], inbox[c]) for c in p.clients}
    assert server.collect_masked(masked) == list(p.clients)
    return clients, server, masked


def _signed(v):
    return v.view(np.int64).astype(np.float64)


def test_server_cannot_recover_a_single_input_from_an_honest_run():
    """Everything the server receives (keys, ciphertexts, masked inputs, signatures, the
    unmasking shares) leaves any single input hidden: its best reading of one client is
    off by a uniformly random vector, while the sum comes out exact."""
    p = SecAggParams(CLIENTS, threshold=4, length=4096, session=b"r4")
    rng = np.random.default_rng(3)
    xs = {c: rng.integers(0, 1000, size=4096).astype(np.uint64) for c in CLIENTS}
    clients, server, masked = _run_stages(p, xs)
    sigs = server.collect_signatures({c: k.consistency(list(CLIENTS)) for c, k in clients.items()})
    answers = {c: clients[c].unmask(sigs) for c in CLIENTS}
    total = server.unmask(answers)
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in CLIENTS]))
    # with all self masks rebuilt (every client survived), strip c0's self mask: the
    # pairwise masks still hide x_c0 completely
    b0 = shamir_reconstruct({a["x"][""]: a["b"]["c0"] for a in answers.values()}).to_bytes(
        32, "big"
    )
    guess = masked["c0"] - prg_mask(_hkdf(b0, b"fedspectral/secagg/self/r4"), 4096, 64)
    resid = guess - xs["c0"]
    # uniform on [0, 2^64): mean of the top bit 1/2, and every byte value appears
    top = (resid >> np.uint64(63)).astype(float)
    assert abs(top.mean() - 0.5) < 0.05
    assert len(np.unique(resid & np.uint64(255))) == 256
    others = sum(xs[c] for c in CLIENTS if c != "c0").astype(float)
    assert np.abs(_signed(resid)).mean() > 1e6 * np.abs(others).mean()


# --------------------------------------------------------------------------------------
# an active server (honest keys): the attacks of issue 23, weakened protocol against real
# --------------------------------------------------------------------------------------
class NoConsistencyCheck(SecAggClient):
    """The protocol with the consistency round disabled: a client unmasks on any
    announced signers without verifying their signatures (test-only weakening)."""

    def check_consistency(self, signatures):
        return list(signatures)


FIVE = tuple(f"c{i}" for i in range(5))
#: the U3 the server announces to each client
VIEWS = {
    "c0": ["c0", "c1", "c2"],
    "c1": ["c1", "c3", "c4"],
    "c2": ["c2", "c3", "c4"],
    "c3": ["c0", "c3", "c4"],
    "c4": ["c0", "c3", "c4"],
}


def _rebuild(answers, kind, v, t):
    """A secret from the revealed shares, or None below the threshold."""
    shares = {a["x"][""]: a[kind][v] for a in answers.values() if v in a[kind]}
    return shamir_reconstruct(shares) if len(shares) >= t else None


def _pair_mask(secret_s: int, public_s: bytes, session: bytes, n: int) -> np.ndarray:
    sk = X25519PrivateKey.from_private_bytes(secret_s.to_bytes(32, "big"))
    shared = sk.exchange(X25519PublicKey.from_public_bytes(public_s))
    return prg_mask(_hkdf(shared, b"fedspectral/secagg/pair/" + session), n, 64)


def inconsistent_views_attack(client_cls):
    """The server of issue 23 (point 5 of its "Why"), with honest keys: five clients,
    threshold 3.  It routes client 0's shares only to c3, c4 and gives c0 only the shares
    of c1, c2 (so y0 is masked with c1, c2 alone), announces U3 = {0,3,4} to c3, c4,
    {1,3,4} to c1, {2,3,4} to c2, {0,1,2} to c0, forwards to each client the consistency
    signatures of its U3, and rebuilds b0, s1, s2 from whatever shares come back.

    Returns (x0 as recovered or None, answers, refusals, inputs, masked inputs)."""
    p = SecAggParams(FIVE, threshold=3, length=L, session=b"attack-views")
    xs = _inputs(seed=7)
    ids, trusted = _identities(FIVE)
    clients = {c: client_cls(c, p, ids[c], trusted) for c in FIVE}
    roster = {c: k.advertise_keys() for c, k in clients.items()}  # honest keys
    sent = {c: k.share_keys(roster) for c, k in clients.items()}
    inbox = {r: {s: sent[s][r] for s in FIVE if s != r} for r in FIVE}
    for r in ("c1", "c2"):
        del inbox[r]["c0"]
    inbox["c0"] = {s: inbox["c0"][s] for s in ("c1", "c2")}
    y = {c: clients[c].masked_input(xs[c], inbox[c]) for c in FIVE}
    sigs = {c: clients[c].consistency(VIEWS[c]) for c in FIVE}
    answers, refused = {}, {}
    for c in FIVE:
        try:
            answers[c] = clients[c].unmask({v: sigs[v] for v in VIEWS[c]})
        except PermissionError as exc:
            refused[c] = str(exc)
    b0, s1, s2 = (_rebuild(answers, k, v, 3) for k, v in (("b", "c0"), ("s", "c1"), ("s", "c2")))
    if b0 is None or s1 is None or s2 is None:
        return None, answers, refused, xs, y
    # c0 precedes c1 and c2 in the roster: y0 = x0 + PRG(b0) + m01 + m02
    x0 = y["c0"] - prg_mask(
        _hkdf(b0.to_bytes(32, "big"), b"fedspectral/secagg/self/" + p.session), L, 64
    )
    for s in (s1, s2):
        x0 = x0 - _pair_mask(s, roster["c0"][1], p.session, L)
    return x0, answers, refused, xs, y


def test_inconsistent_views_attack():
    # weakened (no consistency check): client 0's input, bit for bit, although no client
    # revealed both secrets of one peer
    x0, answers, refused, xs, _ = inconsistent_views_attack(NoConsistencyCheck)
    assert not refused and x0 is not None
    np.testing.assert_array_equal(x0, xs["c0"])
    assert all(not set(a["b"]) & set(a["s"]) for a in answers.values())
    # the real protocol: every client holds fewer than 3 signatures over its own view,
    # refuses, and the server holds no share at all
    x0, answers, refused, xs, _ = inconsistent_views_attack(SecAggClient)
    assert x0 is None and answers == {} and sorted(refused) == list(FIVE)
    assert all("consistency check failed" in why for why in refused.values())


def key_substitution_attack(authenticated: bool):
    """The server hands client 0 a roster in which every peer's keys are its own (signed
    with its own identity key), decrypts the shares c0 sends them (b0, s0), feeds c0
    shares from its fake peers and strips every mask from y0.  Returns (x0 or None, x0
    true, refusal)."""
    p = SecAggParams(FIVE, threshold=3, length=L, session=b"attack-keys")
    ids, trusted = _identities(FIVE)
    victim = (
        SecAggClient("c0", p, ids["c0"], trusted)
        if authenticated
        else SecAggClient("c0", p, honest_server=True)
    )
    mine = Ed25519PrivateKey.generate()  # the server's signing key
    fake = {v: (X25519PrivateKey.generate(), X25519PrivateKey.generate()) for v in FIVE[1:]}
    roster = {"c0": victim.advertise_keys()}
    for v, (c, s) in fake.items():
        cp, sp = _raw_public(c.public_key()), _raw_public(s.public_key())
        roster[v] = (cp, sp, mine.sign(advert_digest(p, v, cp, sp)))
    x_true = _inputs(seed=8)["c0"]
    try:
        sent = victim.share_keys(roster)
    except PermissionError as exc:
        return None, x_true, str(exc)
    c0_pub = roster["c0"][0]

    def channel(v):
        key = _hkdf(
            fake[v][0].exchange(X25519PublicKey.from_public_bytes(c0_pub)),
            b"fedspectral/secagg/channel/" + p.session,
        )
        return ChaCha20Poly1305(key)

    shares = {}
    for v, ct in sent.items():
        plain = channel(v).decrypt(ct[:12], ct[12:], b"|".join([p.session, b"c0", v.encode()]))
        shares[FIVE.index(v) + 1] = int.from_bytes(plain[:66], "big")
    b0 = shamir_reconstruct(shares).to_bytes(32, "big")
    inbox = {}
    for v in fake:  # shares of nothing, from the fake peers
        nonce = b"\0" * 12
        inbox[v] = nonce + channel(v).encrypt(
            nonce, b"\0" * 132, b"|".join([p.session, v.encode(), b"c0"])
        )
    y0 = victim.masked_input(x_true, inbox)
    x0 = y0 - prg_mask(_hkdf(b0, b"fedspectral/secagg/self/" + p.session), L, 64)
    for _, s in fake.values():
        shared = s.exchange(X25519PublicKey.from_public_bytes(roster["c0"][1]))
        x0 = x0 - prg_mask(_hkdf(shared, b"fedspectral/secagg/pair/" + p.session), L, 64)
    return x0, x_true, None


def test_key_substitution_attack():
    # weakened (no trusted identity keys: the honest-but-curious opt-in): x0 exactly
    x0, x_true, refusal = key_substitution_attack(authenticated=False)
    assert refusal is None
    np.testing.assert_array_equal(x0, x_true)
    # the real protocol: the victim checks its peers' keys against its trusted roster
    # and refuses before it shares or masks anything
    x0, _, refusal = key_substitution_attack(authenticated=True)
    assert x0 is None and "not signed by their identity keys" in refusal


def colluder_attack(threshold: int):
    """A server colluding with client c4 (it holds c4's keys, shares and identity key, so
    c4 signs whatever it is told) shows two halves of the honest clients different U3:
    {c0, c1, ..} with c0 (to collect b0) and {.., c3} without c0 (to collect s0), c4
    signing both.  Returns (x0 as recovered or None, x0 true, refusals)."""
    p = SecAggParams(FIVE, threshold=threshold, length=L, session=b"collude")
    xs = _inputs(seed=10)
    ids, trusted = _identities(FIVE)
    clients = {c: SecAggClient(c, p, ids[c], trusted) for c in FIVE}
    roster = {c: k.advertise_keys() for c, k in clients.items()}
    sent = {c: k.share_keys(roster) for c, k in clients.items()}
    y = {c: clients[c].masked_input(xs[c], {s: sent[s][c] for s in FIVE if s != c}) for c in FIVE}
    with_0 = ["c0", "c1", "c2", "c4"][: threshold - 1] + ["c4"]
    without_0 = ["c1", "c2", "c3", "c4"][-threshold:]
    groups = [sorted(set(with_0)), sorted(set(without_0))]
    sigs, refused = {}, {}
    for u3 in groups:
        for c in (c for c in u3 if c != "c4"):
            try:
                sigs[(c, tuple(u3))] = clients[c].consistency(u3)
            except PermissionError as exc:  # an honest client signs once
                refused[c] = str(exc)
    # the colluder's own statements, signed with its identity key
    c4 = SecAggClient.from_state(clients["c4"].to_state(), ids["c4"], trusted)
    for u3 in groups:
        c4._u3 = u3
        sigs[("c4", tuple(u3))] = ids["c4"].sign(c4.statement())
    answers = {}
    for u3 in groups:
        for c in u3:
            if c == "c4" or c in refused or c in answers:
                continue
            try:
                answers[c] = clients[c].unmask(
                    {v: sigs[(v, tuple(u3))] for v in u3 if (v, tuple(u3)) in sigs}
                )
            except PermissionError as exc:
                refused[c] = str(exc)
    held = dict(clients["c4"]._held)  # the colluder adds its own shares
    answers["c4"] = {"x": {"": 5}, "b": {"c0": held["c0"][0]}, "s": {"c0": held["c0"][1]}}
    b0, s0 = _rebuild(answers, "b", "c0", threshold), _rebuild(answers, "s", "c0", threshold)
    if b0 is None or s0 is None:
        return None, xs["c0"], refused
    x0 = y["c0"] - prg_mask(
        _hkdf(b0.to_bytes(32, "big"), b"fedspectral/secagg/self/" + p.session), L, 64
    )
    for v in FIVE[1:]:  # c0 precedes every peer: y0 carries +m_0v
        x0 = x0 - _pair_mask(s0, roster[v][1], p.session, L)
    return x0, xs["c0"], refused


def test_a_colluding_client_needs_the_stricter_threshold():
    """With one client colluding, t > n/2 is not enough (module docstring, (c): 2t > n +
    n_C): at t = 3 of 5 the server has two statements certified, rebuilds both secrets
    of c0 and reads x0; at t = 4 of 5 the honest clients would have to sign twice, the
    second group refuses and the server holds too few shares of s0."""
    x0, x_true, refused = colluder_attack(3)
    assert not refused
    np.testing.assert_array_equal(x0, x_true)
    x0, _, refused = colluder_attack(4)
    assert x0 is None and refused
    assert any("already signed" in why for why in refused.values())


def test_random_active_servers_get_at_most_one_view_unmasked():
    """A server that routes shares and announces U3 at random (each client its own view,
    half the time one common view) and forwards to each client the signatures of the
    U3 it announced to it: every client that reveals shares holds the same statement,
    and the secrets that can be rebuilt are b of that U3 and s of that U2 minus U3 --
    never both of one client.  (The NoConsistencyCheck clients break this.)"""
    p = SecAggParams(FIVE, threshold=3, length=4, session=b"random")
    rng = np.random.default_rng(11)
    released = 0
    for trial in range(30):
        ids, trusted = _identities(FIVE)
        clients = {c: SecAggClient(c, p, ids[c], trusted) for c in FIVE}
        roster = {c: k.advertise_keys() for c, k in clients.items()}
        sent = {c: k.share_keys(roster) for c, k in clients.items()}
        common = trial % 2 == 0
        views = {}
        for r in FIVE:  # a random U2 view of at least 3 (r included)
            peers = [s for s in FIVE if s != r and rng.random() < 0.8]
            peers = peers if len(peers) >= 2 else [s for s in FIVE if s != r][:2]
            views[r] = sorted([r, *peers])
        for r in FIVE:
            clients[r].masked_input(
                np.zeros(4, dtype=np.uint64), {s: sent[s][r] for s in views[r] if s != r}
            )
        u3_common = sorted(rng.choice(FIVE, size=int(rng.integers(3, 6)), replace=False))
        sigs, u3 = {}, {}
        for c in FIVE:
            cand = (
                u3_common
                if common
                else sorted(rng.choice(FIVE, size=int(rng.integers(3, 6)), replace=False))
            )
            if c in cand and set(cand) <= set(views[c]):
                u3[c] = list(cand)
                sigs[c] = clients[c].consistency(cand)
        statements, answers = {}, {}
        for c, seen in u3.items():
            try:
                answers[c] = clients[c].unmask({v: sigs[v] for v in seen if v in sigs})
                statements[c] = (tuple(views[c]), tuple(seen))
            except PermissionError:
                pass
        if not answers:
            continue
        released += 1
        assert len(set(statements.values())) == 1
        ((u2s, u3s),) = set(statements.values())
        rebuilt_b = {v for v in FIVE if _rebuild(answers, "b", v, 3) is not None}
        rebuilt_s = {v for v in FIVE if _rebuild(answers, "s", v, 3) is not None}
        assert rebuilt_b <= set(u3s) and rebuilt_s <= set(u2s) - set(u3s)
        assert not rebuilt_b & rebuilt_s
    assert released >= 5  # the check is not vacuous: honest views do get unmasked


def test_no_trusted_roster_refused_unless_honest_server_opt_in():
    p = SecAggParams(FIVE, threshold=3, length=L, session=b"trust")
    with pytest.raises(PermissionError, match="no trusted identity keys"):
        SecAggClient("c0", p)
    SecAggClient("c0", p, honest_server=True)  # the explicit opt-in
    ids, trusted = _identities(FIVE)
    with pytest.raises(PermissionError, match=r"\['c4'\].*not in the trusted roster"):
        SecAggClient("c0", p, ids["c0"], {c: k for c, k in trusted.items() if c != "c4"})
    with pytest.raises(ValueError, match="does not match"):
        SecAggClient("c0", p, ids["c1"], trusted)


def test_signatures_do_not_replay_across_sessions():
    """A peer's key advertisement or consistency signature from one sum is refused in
    another (a new round or run): every signed digest covers the session."""
    ids, trusted = _identities(FIVE)
    xs = _inputs(seed=9)

    def run_to_consistency(session):
        p = SecAggParams(FIVE, threshold=3, length=L, session=session)
        cl = {c: SecAggClient(c, p, ids[c], trusted) for c in FIVE}
        adv = {c: k.advertise_keys() for c, k in cl.items()}
        return p, cl, adv

    _, old, old_adv = run_to_consistency(b"round-1")
    _, new, new_adv = run_to_consistency(b"round-2")
    with pytest.raises(PermissionError, match=r"keys of \['c1'\]"):
        new["c0"].share_keys({**new_adv, "c1": old_adv["c1"]})
    rosters = [old_adv, new_adv]
    sigs = []
    for cl, adv in zip((old, new), rosters, strict=True):
        sent = {c: k.share_keys(adv) for c, k in cl.items()}
        for r in FIVE:
            cl[r].masked_input(xs[r], {s: sent[s][r] for s in FIVE if s != r})
        sigs.append({c: k.consistency(list(FIVE)) for c, k in cl.items()})
    with pytest.raises(PermissionError, match="consistency check failed"):
        new["c0"].unmask(sigs[0])
    assert set(new["c1"].unmask(sigs[1])) == {"x", "b", "s"}  # the right ones pass
    with pytest.raises(PermissionError, match="already signed"):
        new["c2"].consistency(["c0", "c1", "c2"])


def test_shamir_threshold_property():
    secret = int.from_bytes(b"\x07" * 32, "big")
    shares = shamir_split(secret, range(1, 8), threshold=4)
    assert shamir_reconstruct({x: shares[x] for x in (1, 3, 5, 7)}) == secret
    assert shamir_reconstruct({x: shares[x] for x in (2, 4, 6, 7)}) == secret
    assert shamir_reconstruct({x: shares[x] for x in (1, 2, 3)}) != secret
    # three shares are consistent with any secret: a fourth point fixes the polynomial
    with pytest.raises(ValueError, match="threshold=9"):
        shamir_split(secret, range(1, 8), threshold=9)
    with pytest.raises(ValueError, match="secret"):
        shamir_split(PRIME, range(1, 3), 2)


def test_masks_are_chacha20_streams_of_full_keys():
    a, b = prg_mask(b"\x01" * 32, 1000, 64), prg_mask(b"\x02" * 32, 1000, 64)
    assert (a != b).mean() > 0.99
    np.testing.assert_array_equal(prg_mask(b"\x01" * 32, 1000, 64), a)
    # keys differing in the last byte only give unrelated streams (no folding to 32 bits)
    c = prg_mask(b"\x01" * 31 + b"\x03", 1000, 64)
    assert (a != c).mean() > 0.99
    assert prg_mask(b"\x01" * 32, 1000, 20).max() < 2**20


def test_quantisation_round_trip_and_overflow_refused():
    p = SecAggParams(CLIENTS, threshold=4, length=L, bits=32, session=b"q")
    bound = 3.0
    s = p.scale_for(bound)
    rng = np.random.default_rng(5)
    xs = {c: rng.uniform(-bound, bound, L) for c in CLIENTS}
    # the worst case: every client at +bound or -bound sums without wrapping
    for extreme in (bound, -bound):
        tot = _modsum([quantise(np.full(L, extreme), s, bound, 32) for _ in CLIENTS], 32)
        np.testing.assert_allclose(
            dequantise(tot, s, 32), len(CLIENTS) * extreme, atol=len(CLIENTS) / s
        )
    total, _ = secure_sum({c: quantise(x, s, bound, 32) for c, x in xs.items()}, p)
    np.testing.assert_allclose(
        dequantise(total, s, 32), sum(xs.values()), atol=len(CLIENTS) / (2 * s)
    )
    with pytest.raises(QuantisationOverflow, match="exceeds the bound"):
        quantise(np.r_[np.zeros(L - 1), 3.01], s, bound, 32)
    with pytest.raises(ValueError, match="could overflow"):
        SecAggParams(CLIENTS, threshold=4, length=L, bits=8).scale_for(40.0)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"threshold": 3}, "exceed half"),
        ({"threshold": 8}, "threshold"),
        ({"clients": ("a",)}, "at least 2"),
        ({"bits": 65}, "bits"),
        ({"length": 0}, "length"),
        ({"threshold": True}, "threshold"),
    ],
)
def test_bad_params_refused(kw, match):
    base = {"clients": CLIENTS, "threshold": 4, "length": L}
    with pytest.raises((ValueError, TypeError), match=match):
        SecAggParams(**{**base, **kw})


def test_client_state_round_trip_between_stages():
    """A client saved with to_state after every stage and restored with from_state (what
    a Flower node does between messages) takes part exactly as one kept in memory: the
    state is plain JSON (no identity key in it), the sum exact; a restored client still
    refuses a second unmask, and an authenticated one is not restored without its roster."""
    import json

    p = SecAggParams(CLIENTS, threshold=4, length=L, session=b"rt")
    xs = _inputs(seed=3)
    ids, trusted = _identities(CLIENTS)

    def hop(c: SecAggClient) -> SecAggClient:
        return SecAggClient.from_state(json.loads(json.dumps(c.to_state())), ids[c.cid], trusted)

    clients = {c: hop(SecAggClient(c, p, ids[c], trusted)) for c in CLIENTS}
    server = SecAggServer(p)
    roster = server.collect_keys({c: k.advertise_keys() for c, k in clients.items()})
    clients = {c: hop(k) for c, k in clients.items()}
    inbox = server.route_shares(
        {c: k.share_keys(roster) for c, k in clients.items() if c != "c6"}
    )  # c6 drops after advertising its keys
    clients = {c: hop(k) for c, k in clients.items() if c != "c6"}
    u3 = server.collect_masked(
        {c: k.masked_input(xs[c], inbox[c]) for c, k in clients.items() if c != "c1"}
    )  # c1: after sharing
    clients = {c: hop(k) for c, k in clients.items()}
    sigs = server.collect_signatures({c: clients[c].consistency(u3) for c in u3})
    clients = {c: hop(k) for c, k in clients.items()}
    answers = {c: clients[c].unmask(sigs) for c in u3}
    np.testing.assert_array_equal(server.unmask(answers), _modsum([xs[c] for c in u3]))
    assert u3 == [c for c in CLIENTS if c not in ("c1", "c6")]
    with pytest.raises(PermissionError, match="already answered"):
        hop(clients["c0"]).unmask(sigs)
    with pytest.raises(PermissionError, match="needs its trusted roster"):
        SecAggClient.from_state(clients["c0"].to_state())
    assert "Ed25519" not in json.dumps(clients["c0"].to_state())


def test_one_sequence_drives_any_transport_through_the_five_stages():
    """:func:`run_stages` is the one order of the stages: a transport that records what it
    is asked sees stages 0-4 once each, each addressed to the clients the server kept
    (a client silent from stage 2 is not asked at 3 or 4), and the sum is the survivors'."""
    xs = _inputs()
    p = SecAggParams(CLIENTS, 4, L, 64, b"seq")
    ids = {c: Ed25519PrivateKey.generate() for c in CLIENTS}
    trusted = {c: _raw_ed_public(k) for c, k in ids.items()}
    asked: list[tuple[str, list[str]]] = []

    class Recording(InProcessStages):
        def advertise_keys(self, clients):
            asked.append(("advertise_keys", list(clients)))
            return super().advertise_keys(clients)

        def share_keys(self, roster):
            asked.append(("share_keys", list(roster)))
            return super().share_keys(roster)

        def masked_input(self, inbox):
            asked.append(("masked_input", list(inbox)))
            return super().masked_input(inbox)

        def consistency(self, survivors):
            asked.append(("consistency", list(survivors)))
            return super().consistency(survivors)

        def unmask(self, signatures):
            asked.append(("unmask", list(signatures)))
            return super().unmask(signatures)

    total, contributors = run_stages(p, Recording(p, xs, ids, trusted, False, {"c3": 2}))
    rest = [c for c in CLIENTS if c != "c3"]
    assert asked == [
        ("advertise_keys", list(CLIENTS)),
        ("share_keys", list(CLIENTS)),
        ("masked_input", list(CLIENTS)),
        ("consistency", rest),
        ("unmask", rest),
    ]
    assert contributors == rest
    np.testing.assert_array_equal(total, _modsum(xs[c] for c in rest))
