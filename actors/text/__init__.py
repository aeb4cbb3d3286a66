"""Text utilities of the domain: ranking (BM25, the ranker of search and retrieve, its
terms), importance estimates, duplicates and quoted-data context blocks."""

__all__ = ()
