"""Exact token accounting with tiktoken, offline.

tiktoken downloads its encodings on first use; this machine (and most of the
clusters that run simulations) has no network at run time, so the encodings
come from ranks installed with the package (see
:mod:`actormem.runtime._encodings`): ``cl100k_base`` for GPT-4 and GPT-3.5 Turbo,
``o200k_base`` for GPT-4o, GPT-4.1, GPT-4.5, o1, o3, o4 and GPT-5. A configured
model name picks its encoding (:func:`encoding_for_model`).

A chat message costs more than its text: the chat format wraps each message in
``<|start|>{role/name}\\n{content}<|end|>\\n``. We count as OpenAI's cookbook
does for gpt-3.5-turbo, gpt-4 and gpt-4o (it gives no other formula for the later
families, so all are counted alike): 3 tokens per message, every string field's
tokens (role, content, name, tool_call_id), 1 more when a name is present, and 3
to prime the reply. Tool calls add their function name and JSON arguments
plus 3 tokens of framing each (OpenAI does not publish the exact framing; this
matches its reported usage within a few tokens per call).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from actormem.runtime._encodings import ENCODINGS, encoding_for_model, load_encoding

__all__ = (
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "REPLY_PRIMING_TOKENS",
    "TokenCounter",
    "encoding_for_model",
    "forget_counted_texts",
    "get_counter",
)

DEFAULT_ENCODING: Final = "cl100k_base"
TOKENS_PER_MESSAGE: Final = 3
TOKENS_PER_NAME: Final = 1
TOKENS_PER_TOOL_CALL: Final = 3
#: An image part of a multimodal message, at "low" detail (OpenAI's fixed cost).
TOKENS_PER_IMAGE_PART: Final = 85
#: Every reply is primed with ``<|start|>assistant<|message|>``.
REPLY_PRIMING_TOKENS: Final = 3
#: How many names' costs a counter keeps: the speakers of a system are few, and
#: past this many (names a caller makes up) it starts again from none.
NAMES_KEPT: Final = 131_072
#: How many texts' counts a counter keeps. A context counts its recall blocks
#: more than once, and the same insight or narrator line reaches many agents; past
#: this many texts it starts again from none.
TEXTS_KEPT: Final = 4096


class TokenCounter:
    """Counts tokens of text and of OpenAI chat messages with one tiktoken encoding.

    Args:
        encoding: the encoding's name, one of :data:`ENCODINGS`.

    Raises:
        ConfigError: the encoding is not one of :data:`ENCODINGS`, or its ranks
            are not installed.
    """

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        self._enc = load_encoding(encoding)
        self.encoding = encoding
        self._encode = self._enc.encode_ordinary
        # tiktoken's own encoder, called without the Python method around it (that
        # method only mends text with lone surrogates, which count_plain leaves to it).
        core = getattr(self._enc, "_core_bpe", None)
        self._encode_core = getattr(core, "encode_ordinary", self._encode)
        self._role_tokens: dict[str, int] = {}
        # What a plain message of each role costs besides its text and name.
        self._plain_base: dict[str, int] = {}
        # What each name adds to a message (see NAMES_KEPT).
        self._name_costs: dict[str, int] = {}
        # The counts of texts counted lately (see TEXTS_KEPT).
        self._text_costs: dict[str, int] = {}
        _counters.add(self)

    def learn(self, text: str, tokens: int) -> None:
        """Keep ``tokens`` as the count of ``text``, found exactly another way (the
        sum of its pieces, say), so that counting it again costs nothing."""
        if len(self._text_costs) >= TEXTS_KEPT:
            self._text_costs.clear()
        self._text_costs[text] = tokens

    def forget_texts(self) -> None:
        """Drop the texts this counter keeps with their counts."""
        self._text_costs.clear()

    def count_text(self, text: str) -> int:
        """Return the number of tokens ``text`` encodes to (special tokens as text)."""
        cost = self._text_costs.get(text)
        if cost is None:
            if not text:
                return 0
            if len(self._text_costs) >= TEXTS_KEPT:
                self._text_costs.clear()
            cost = self._text_costs[text] = len(self._encode(text))
        return cost

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Count many texts at once (tiktoken batches them across threads)."""
        return [len(t) for t in self._enc.encode_ordinary_batch(list(texts))]

    def encode(self, text: str) -> list[int]:
        """Return the token ids of ``text``."""
        return self._encode(text)

    def decode(self, tokens: list[int]) -> str:
        """Return the text of token ids (used to cut text at a token boundary)."""
        return str(self._enc.decode(tokens))

    def truncate(self, text: str, max_tokens: int) -> str:
        """Return the longest prefix of ``text`` that fits in ``max_tokens`` tokens."""
        ids = self._encode(text)
        if len(ids) <= max_tokens:
            return text
        return self.decode(ids[: max(0, max_tokens)])

    def count_content(self, content: Any) -> int:
        """Tokens of a chat message's ``content``: text, or a list of content parts."""
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        if isinstance(content, list):
            total = 0
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "text":
                    total += self.count_text(str(part.get("text", "")))
                elif isinstance(part, Mapping) and part.get("type") == "image_url":
                    total += TOKENS_PER_IMAGE_PART
                else:
                    total += self.count_text(str(part))
            return total
        return self.count_text(str(content))

    def count_plain(self, role: str, text: str, name: str | None = None) -> int:
        """:meth:`count_message` of ``{"role", "content": text, "name"}``, without the dict.

        The hot path of every ``add``: most messages are plain text.
        """
        total = self._plain_base.get(role)
        if total is None:
            total = self._plain_base[role] = TOKENS_PER_MESSAGE + self.count_text(role)
        if text:
            try:
                total += len(self._encode_core(text))
            except UnicodeEncodeError:  # lone surrogates: tiktoken's method mends them
                total += len(self._encode(text))
        if name:
            total += self._name_cost(name)
        return total

    def _name_cost(self, name: str) -> int:
        """What ``name`` adds to a chat message: its tokens and the name's own one."""
        cost = self._name_costs.get(name)
        if cost is None:
            if len(self._name_costs) >= NAMES_KEPT:
                self._name_costs.clear()
            cost = self._name_costs[name] = TOKENS_PER_NAME + self.count_text(name)
        return cost

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens one OpenAI-format chat message costs in a request (without priming).

        Args:
            message: a dict as sent to Chat Completions (``role``, ``content``,
                optional ``name``, ``tool_calls``, ``tool_call_id``).
        """
        role = str(message.get("role", ""))
        role_tokens = self._role_tokens.get(role)
        if role_tokens is None:
            role_tokens = self._role_tokens[role] = self.count_text(role)
        total = TOKENS_PER_MESSAGE + role_tokens + self.count_content(message.get("content"))
        name = message.get("name")
        if name:
            total += self._name_cost(str(name))
        call_id = message.get("tool_call_id")
        if call_id:
            total += self.count_text(str(call_id))
        for call in message.get("tool_calls") or ():
            fn = call.get("function", {})
            total += (
                TOKENS_PER_TOOL_CALL
                + self.count_text(str(fn.get("name", "")))
                + self.count_text(str(fn.get("arguments", "")))
            )
        return total

    def count_messages(self, messages: Iterable[Mapping[str, Any]]) -> int:
        """Tokens a whole request of ``messages`` costs, including the reply priming."""
        return REPLY_PRIMING_TOKENS + sum(self.count_message(m) for m in messages)


_counters: weakref.WeakSet[TokenCounter] = weakref.WeakSet()


def forget_counted_texts() -> None:
    """Drop the texts every counter keeps with their counts (an erasure calls it:
    no cache holds an erased text)."""
    for counter in list(_counters):
        counter.forget_texts()


def get_counter(encoding: str | None = None, *, model: str | None = None) -> TokenCounter:
    """Return the process-wide counter for ``encoding`` (loading ranks takes ~0.2 s).

    Args:
        encoding: one of :data:`ENCODINGS`; None: the one ``model`` counts with.
        model: an OpenAI model name, used when ``encoding`` is None; neither
            given: ``cl100k_base``.

    Raises:
        ConfigError: the encoding is unknown or not installed, or the model is in
            no known family (the message names the families and encodings).
    """
    if encoding is None:
        encoding = DEFAULT_ENCODING if model is None else encoding_for_model(model)
    return _counter(encoding)


@functools.cache
def _counter(encoding: str) -> TokenCounter:
    return TokenCounter(encoding)
