"""The Redis modules declare their public surface, and all of it is importable."""

from __future__ import annotations

import types

import pytest

import actormem.runtime.redis
import actormem.runtime.redis.transport
import actormem.runtime.redis.worker


@pytest.mark.parametrize(
    "module",
    [
        actormem.runtime.redis,
        actormem.runtime.redis.transport,
        actormem.runtime.redis.worker,
    ],
)
def test_all_names_what_is_importable(module: types.ModuleType) -> None:
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert not name.startswith("_"), name
        assert hasattr(module, name), name


def test_the_package_exports_every_public_name_it_imports() -> None:
    public = {
        name
        for name, value in vars(actormem.runtime.redis).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(actormem.runtime.redis.__all__)
