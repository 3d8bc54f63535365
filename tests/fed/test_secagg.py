"""The four-stage secure aggregation (fedspectral.fed.secagg), with simulated clients."""

from __future__ import annotations

import numpy as np
import pytest

from fedspectral.fed.secagg import (
    PRIME,
    QuantisationOverflow,
    SecAggAborted,
    SecAggClient,
    SecAggParams,
    SecAggServer,
    dequantise,
    prg_mask,
    quantise,
    secure_sum,
    shamir_reconstruct,
    shamir_split,
)

CLIENTS = tuple(f"c{i}" for i in range(7))
L = 64


def _inputs(bits=64, seed=0):
    rng = np.random.default_rng(seed)
    return {c: rng.integers(0, 2**62, size=L, dtype=np.uint64) % np.uint64(2**bits - 1)
            if bits < 64 else rng.integers(0, 2**63, size=L, dtype=np.uint64) * np.uint64(2)
            for c in CLIENTS}


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


@pytest.mark.parametrize("stage", [2, 3])
def test_dropout_after_key_sharing_yields_survivors_exact_sum(stage):
    """c2 and c5 shared their keys, then went silent (before sending y: stage 2; after
    sending y, before unmasking: stage 3)."""
    p = SecAggParams(CLIENTS, threshold=4, length=L, session=b"r2")
    xs = _inputs(seed=1)
    total, contributors = secure_sum(xs, p, drop_before={"c2": stage, "c5": stage})
    if stage == 2:  # their masked inputs never arrived: the sum is over the survivors
        assert contributors == [c for c in CLIENTS if c not in ("c2", "c5")]
    else:  # their y arrived; the others' shares rebuild their self-masks
        assert contributors == list(CLIENTS)
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in contributors]))


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_below_threshold_aborts_cleanly(stage):
    p = SecAggParams(CLIENTS, threshold=5, length=L, session=b"r3")
    xs = _inputs(seed=2)
    with pytest.raises(SecAggAborted, match="fewer than the threshold 5"):
        secure_sum(xs, p, drop_before={"c0": stage, "c1": stage, "c4": stage})
    # one dropout fewer: the sum goes through
    total, contributors = secure_sum(xs, p, drop_before={"c0": stage, "c1": stage})
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in contributors]))


def _run_stages(p, xs):
    clients = {c: SecAggClient(c, p) for c in p.clients}
    server = SecAggServer(p)
    roster = server.collect_keys({c: k.advertise_keys() for c, k in clients.items()})
    inbox = server.route_shares({c: k.share_keys(roster) for c, k in clients.items()})
    masked = {c: clients[c].masked_input(xs[c], inbox[c]) for c in p.clients}
    assert server.collect_masked(masked) == list(p.clients)
    return clients, server, masked


def _signed(v):
    return v.view(np.int64).astype(np.float64)


def test_hostile_server_cannot_recover_a_single_input():
    """Everything the server receives (keys, ciphertexts, masked inputs, the unmasking
    shares) leaves any single input hidden: its best reading of one client is off by a
    uniformly random vector, while the sum comes out exact.  The only residual it can
    reach is the sum of the others."""
    p = SecAggParams(CLIENTS, threshold=4, length=4096, session=b"r4")
    rng = np.random.default_rng(3)
    xs = {c: rng.integers(0, 1000, size=4096).astype(np.uint64) for c in CLIENTS}
    clients, server, masked = _run_stages(p, xs)
    answers = {c: clients[c].unmask(list(CLIENTS)) for c in CLIENTS}
    total = server.unmask(answers)
    np.testing.assert_array_equal(total, _modsum([xs[c] for c in CLIENTS]))
    # with all self masks rebuilt (every client survived), strip c0's self mask: the
    # pairwise masks still hide x_c0 completely
    from fedspectral.fed.secagg import _hkdf

    b0 = shamir_reconstruct({a["x"][""]: a["b"]["c0"] for a in answers.values()}).to_bytes(32, "big")
    guess = masked["c0"] - prg_mask(_hkdf(b0, b"fedspectral/secagg/self/r4"), 4096, 64)
    resid = guess - xs["c0"]
    # uniform on [0, 2^64): mean of the top bit 1/2, and every byte value appears
    top = (resid >> np.uint64(63)).astype(float)
    assert abs(top.mean() - 0.5) < 0.05
    assert len(np.unique(resid & np.uint64(255))) == 256
    # residual of the server's reading against the level of the others' sum
    others = sum(xs[c] for c in CLIENTS if c != "c0").astype(float)
    assert np.abs(_signed(resid)).mean() > 1e6 * np.abs(others).mean()
    # the best estimate from the sum alone: sum minus the average share of the others
    est = total.astype(float) / len(CLIENTS)
    err = np.linalg.norm(est - xs["c0"].astype(float))
    spread = np.linalg.norm(np.std([xs[c].astype(float) for c in CLIENTS if c != "c0"], 0))
    assert err > 0.5 * spread


def test_server_lying_about_survivors_gets_neither_secret():
    """A server that tells half the clients 'c0 survived' (to get b_c0) and the other half
    'c0 dropped' (to get s_c0) holds fewer than threshold shares of either, since the
    threshold exceeds half the roster; and no client answers twice."""
    p = SecAggParams(CLIENTS, threshold=4, length=L, session=b"r5")
    xs = _inputs(seed=4)
    clients, _, _ = _run_stages(p, xs)
    with_c0 = list(CLIENTS)
    without_c0 = [c for c in CLIENTS if c != "c0"]
    group_a, group_b = ["c1", "c2", "c3"], ["c4", "c5", "c6"]
    b_shares = {}
    for c in group_a:
        a = clients[c].unmask(with_c0)
        b_shares[a["x"][""]] = a["b"]["c0"]
    s_shares = {}
    for c in group_b:
        a = clients[c].unmask(without_c0)
        s_shares[a["x"][""]] = a["s"]["c0"]
    with pytest.raises(PermissionError, match="already answered"):
        clients["c1"].unmask(without_c0)
    true_s = clients["c0"]._s
    from fedspectral.fed.secagg import _raw_private

    assert shamir_reconstruct(b_shares) != int.from_bytes(clients["c0"]._b, "big")
    assert shamir_reconstruct(s_shares) != int.from_bytes(_raw_private(true_s), "big")
    # a list that is not a subset of U2, or leaves the client out, is refused
    with pytest.raises(PermissionError, match="not a subset"):
        clients["c0"].unmask(["c0", "c1", "c2", "zz"])


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
        np.testing.assert_allclose(dequantise(tot, s, 32), len(CLIENTS) * extreme,
                                   atol=len(CLIENTS) / s)
    total, _ = secure_sum({c: quantise(x, s, bound, 32) for c, x in xs.items()}, p)
    np.testing.assert_allclose(dequantise(total, s, 32), sum(xs.values()),
                               atol=len(CLIENTS) / (2 * s))
    with pytest.raises(QuantisationOverflow, match="exceeds the bound"):
        quantise(np.r_[np.zeros(L - 1), 3.01], s, bound, 32)
    with pytest.raises(ValueError, match="could overflow"):
        SecAggParams(CLIENTS, threshold=4, length=L, bits=8).scale_for(40.0)


@pytest.mark.parametrize("kw, match", [
    ({"threshold": 3}, "exceed half"), ({"threshold": 8}, "threshold"),
    ({"clients": ("a",)}, "at least 2"), ({"bits": 65}, "bits"), ({"length": 0}, "length"),
    ({"threshold": True}, "threshold"),
])
def test_bad_params_refused(kw, match):
    base = {"clients": CLIENTS, "threshold": 4, "length": L}
    with pytest.raises((ValueError, TypeError), match=match):
        SecAggParams(**{**base, **kw})


def test_client_state_round_trip_between_stages():
    """A client saved with to_state after every stage and restored with from_state (what
    a Flower node does between messages) takes part exactly as one kept in memory: the
    state is plain JSON, the sum exact; a restored client still refuses a second unmask."""
    import json

    p = SecAggParams(CLIENTS, threshold=4, length=L, session=b"rt")
    xs = _inputs(seed=3)

    def hop(c: SecAggClient) -> SecAggClient:
        return SecAggClient.from_state(json.loads(json.dumps(c.to_state())))

    clients = {c: hop(SecAggClient(c, p)) for c in CLIENTS}
    server = SecAggServer(p)
    roster = server.collect_keys({c: k.advertise_keys() for c, k in clients.items()})
    clients = {c: hop(k) for c, k in clients.items()}
    inbox = server.route_shares({c: k.share_keys(roster) for c, k in clients.items()
                                 if c != "c6"})  # c6 drops after advertising its keys
    clients = {c: hop(k) for c, k in clients.items() if c != "c6"}
    u3 = server.collect_masked({c: k.masked_input(xs[c], inbox[c])
                                for c, k in clients.items() if c != "c1"})  # c1: after sharing
    clients = {c: hop(k) for c, k in clients.items()}
    answers = {c: clients[c].unmask(u3) for c in u3}
    np.testing.assert_array_equal(server.unmask(answers), _modsum([xs[c] for c in u3]))
    assert u3 == [c for c in CLIENTS if c not in ("c1", "c6")]
    with pytest.raises(PermissionError, match="already answered"):
        hop(clients["c0"]).unmask(u3)
