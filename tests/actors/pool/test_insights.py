"""Insight provenance (the HMAC signer) and the delivery message."""

from __future__ import annotations

import msgspec
import pytest

from actormem.actors.pool.insights import (
    InsightDelivery,
    InsightSignatureError,
    InsightSigner,
    make_insight,
)

KEY = "k" * 32


def test_signer_accepts_signed_and_rejects_forged_or_unsigned() -> None:
    signer = InsightSigner(KEY)
    good = signer.sign(make_insight("x is 5", topic="t", importance=0.5, source="alice"))
    assert signer.check(good) is good
    forged = msgspec.structs.replace(good, source="admin")
    with pytest.raises(InsightSignatureError, match="forged or altered"):
        signer.check(forged)
    altered = msgspec.structs.replace(good, text="x is 6")
    assert not signer.verify(altered)
    with pytest.raises(InsightSignatureError, match="unsigned"):
        signer.check(msgspec.structs.replace(good, signature=None))
    other_key = InsightSigner("z" * 32)
    assert not other_key.verify(good)
    assert "k" * 16 not in repr(signer)
    with pytest.raises(ValueError, match="16 bytes"):
        InsightSigner("short")


def test_delivery_round_trips_through_msgpack() -> None:
    d = InsightDelivery(make_insight("x", topic="t", importance=0.1, source="a"))
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(d), type=InsightDelivery) == d
    assert InsightDelivery.reply_type is type(None)
