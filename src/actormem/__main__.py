"""``python -m actormem``: the same command line as ``actormem``."""

import sys

from actormem.runtime.cli import main

sys.exit(main())
