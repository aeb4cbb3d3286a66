"""Text utilities of the domain: BM25 ranking and quoted-data context blocks."""
