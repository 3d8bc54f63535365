"""The ClientApp validates the server's configuration text once per process and gives
every message the same frozen config (it took about 1.3 ms a message to parse and
validate it): no message can change what the next one reads."""

from __future__ import annotations

import dataclasses
import json

import pytest
from flwr.app import ConfigRecord, Context, RecordDict

import fedspectral.fed.validation as validation
from fedspectral.config import to_dict
from fedspectral.fed.flower.apps import client_app as ca


def _context(text: str, **node_config) -> Context:
    ctx = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, **node_config},
        state=RecordDict(),
        run_config={},
    )
    ctx.state[ca.CONFIG_KEY] = ConfigRecord({"json": text})
    return ctx


def test_a_config_text_is_validated_once_and_no_message_can_change_it(tiny, monkeypatch):
    base, other = tiny("fedsc", 2), to_dict(tiny("fedsc", 3))
    calls: list[int] = []
    real = validation.validate
    monkeypatch.setattr(validation, "validate", lambda cfg: calls.append(1) or real(cfg))
    ca._CONFIG_CACHE.clear()
    ctx = _context(json.dumps(to_dict(base)))
    a, b = ca._config(ctx, None), ca._config(ctx, None)
    assert len(calls) == 1
    assert a is b and to_dict(a) == to_dict(base)
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"optim\.lr"):
        a.optim.lr = 123.0  # a message cannot change what the next one reads
    assert ca._config(ctx, None).optim.lr == base.optim.lr
    assert len(calls) == 1

    # another text (the server's to choose) is validated again
    ctx.state[ca.CONFIG_KEY] = ConfigRecord({"json": json.dumps(other)})
    assert ca._config(ctx, None).method.rounds == 3 and len(calls) == 2
    # a bad one is refused at every message, never cached
    other["optim"]["lr"] = -1.0
    ctx.state[ca.CONFIG_KEY] = ConfigRecord({"json": json.dumps(other)})
    for _ in range(2):
        with pytest.raises(ValueError, match="lr"):
            ca._config(ctx, None)
    assert len(calls) == 4
    # the node's data root is part of the key: the same text on another node's root
    text = json.dumps(to_dict(base))
    assert ca._config(_context(text, **{"data-root": "/srv/a"}), None).data.root == "/srv/a"
    assert ca._config(_context(text, **{"data-root": "/srv/b"}), None).data.root == "/srv/b"
    assert ca._config(_context(text), None).data.root == base.data.root
