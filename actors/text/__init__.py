"""Text utilities of the domain: ranking (BM25, the ranker of search and retrieve, its
terms), importance estimates, duplicates and quoted-data context blocks."""

from actormem.actors.text import blocks, bm25, terms
from actormem.runtime.tokens import forget_counted_texts

__all__ = ("forget_cached_texts",)


def forget_cached_texts() -> None:
    """Empty every cache keyed by text (token counts, words, terms, block lines).

    An erasure calls it, so no cache in the process keeps an erased text.
    """
    forget_counted_texts()
    bm25.forget_texts()
    terms.forget_texts()
    blocks.forget_texts()
