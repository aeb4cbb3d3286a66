"""Embeddings for the loopback OpenAI stub (``OpenAIStub(embed=embed)``).

Vectors are bags of words over a tiny vocabulary of concepts, where synonyms share
a dimension ("car" and "automobile" are one concept), so the tests can tell
embedding relevance (which sees synonyms) from BM25 (which does not).
"""

from __future__ import annotations

from actormem.actors.text.bm25 import tokenize

CONCEPTS = [
    {"car", "automobile", "vehicle", "sedan"},
    {"doctor", "physician", "medic"},
    {"cat", "kitten", "feline"},
    {"money", "cash", "coins", "funds"},
    {"boat", "ship", "vessel"},
]


def embed(text: str) -> list[float]:
    """Return the concept-count vector of ``text`` (plus one dimension for the rest)."""
    vec = [0.0] * (len(CONCEPTS) + 1)
    for word in tokenize(text):
        for n, concept in enumerate(CONCEPTS):
            if word in concept:
                vec[n] += 1.0
                break
        else:
            vec[-1] += 0.1
    return vec
