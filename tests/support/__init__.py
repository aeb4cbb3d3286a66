"""What several test packages share, defined once: the private Redis and its stream
helpers, the test actors, the OpenAI-compatible stub server, the history checker."""

from pathlib import Path

#: The repository's root (configs/, README.md, docs/).
ROOT = Path(__file__).resolve().parents[2]
