"""The package's declared public surface is what it exports."""

from __future__ import annotations

import actormem.actors.compression as compression


def test_all_names_are_importable_and_unique() -> None:
    assert len(set(compression.__all__)) == len(compression.__all__)
    for name in compression.__all__:
        assert hasattr(compression, name), name


def test_every_public_name_is_declared() -> None:
    public = {
        name
        for name, value in vars(compression).items()
        if not name.startswith("_") and getattr(value, "__module__", "").startswith("actors.")
    }
    assert public <= set(compression.__all__)
