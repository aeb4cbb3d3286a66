"""What several test packages share, defined once: the private Redis and its stream
helpers, the test actors, the OpenAI-compatible stub server, the history checker."""

import os
from pathlib import Path

#: The repository's root (configs/, README.md, docs/).
ROOT = Path(__file__).resolve().parents[2]


def examples(full: int) -> int:
    """How many examples a property test tries: ``full`` in ``make test``, a fifth
    (at least 5) in the fast loop (``make test-fast`` sets ``ACTORMEM_TESTS=fast``)."""
    if os.environ.get("ACTORMEM_TESTS") == "fast":
        return max(5, full // 5)
    return full
