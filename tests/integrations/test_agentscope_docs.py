"""docs/integrations/agentscope.md: its example runs as printed and prints what the
page says."""

from __future__ import annotations

import pytest

from tests.integrations._examples import check_example
from tests.support import ROOT


@pytest.mark.slow
def test_the_agentscope_example_prints_what_the_page_says() -> None:
    check_example(ROOT / "docs" / "integrations" / "agentscope.md")
