"""The docs site reads quickly: short pages, short sentences, an API reference that
covers every public name, and examples that are the files shipped.

``make docs`` builds the site itself (``mkdocs build --strict``), so a broken link,
a missing page or a name the reference cannot resolve fails ``make test`` there.
"""

from __future__ import annotations

import importlib
import re
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = [README, *DOCS]
API = sorted((ROOT / "docs" / "api").glob("*.md"))

PAGE_MAX_LINES = 400
SENTENCE_MAX_WORDS = 60
MEDIAN_MAX_WORDS = 20

#: Abbreviations whose full stop ends no sentence.
ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.")
#: A sentence ends at . ! or ? (and any closing quote, bracket or emphasis) before a
#: space and what can start a sentence.
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*]*\s+(?=[A-Z`\"(\[*_0-9])")


def prose(page: Path) -> Iterator[tuple[str, bool]]:
    """The page's prose as (text, in a table) units: paragraphs, list items and table
    cells; code blocks, headings and HTML comments left out."""
    body = page.read_text(encoding="utf-8")
    body = re.sub(r"^```[^\n]*\n.*?^```[ \t]*$", "\n\n", body, flags=re.S | re.M)
    body = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    paragraph: list[str] = []
    for line in [*body.splitlines(), ""]:
        text = line.strip()
        item = re.match(r"([-*+]|\d+\.)\s+", text)
        ends = not text or text.startswith(("#", "|", ":::", "--8<--", "![")) or item
        if ends and paragraph:
            yield " ".join(paragraph), False
            paragraph = []
        if text.startswith("|"):
            if not re.fullmatch(r"\|[\s:|-]+\|?", text):
                yield from ((cell.strip(), True) for cell in text.strip("|").split("|"))
        elif item:
            paragraph.append(text[item.end() :])
        elif text and not text.startswith(("#", ":::", "--8<--", "![")):
            paragraph.append(text)


def sentences(text: str) -> Iterator[str]:
    """The sentences of a unit of prose, an inline code span counted as one word."""
    text = re.sub(r"`[^`]*`", "Code", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = ABBREVIATIONS.sub(r"\1", text)
    for sentence in SENTENCE_END.split(text):
        if sentence.split():
            yield sentence


def words(sentence: str) -> int:
    return len(sentence.split())


def test_the_sentence_splitter_splits_sentences() -> None:
    text = "One idea. **Two ideas.** Three, e.g. this `a b c` span! Four (a note)."
    assert [words(s) for s in sentences(text)] == [2, 2, 5, 3]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_sentence_is_over_60_words(page: Path) -> None:
    long = [
        f"{words(s)} words: {s[:80]}..."
        for unit, _ in prose(page)
        for s in sentences(unit)
        if words(s) > SENTENCE_MAX_WORDS
    ]
    assert not long, f"{page.name}: split these sentences:\n" + "\n".join(long)


def test_the_median_sentence_is_under_20_words() -> None:
    """Over the README and every docs page; table cells are often fragments, so
    they count toward the limit above but not toward the median."""
    lengths = [
        words(s)
        for page in PAGES
        for unit, in_table in prose(page)
        if not in_table
        for s in sentences(unit)
    ]
    assert statistics.median(lengths) < MEDIAN_MAX_WORDS


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_docs_page_is_over_400_lines(page: Path) -> None:
    lines = len(page.read_text(encoding="utf-8").splitlines())
    assert lines <= PAGE_MAX_LINES, f"{page.name} has {lines} lines (at most {PAGE_MAX_LINES})"


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [
        str(page.relative_to(ROOT / "docs"))
        for page in DOCS
        if f": {page.relative_to(ROOT / 'docs').as_posix()}\n" not in nav
    ]
    assert not missing, f"not in mkdocs.yml's nav: {missing}"


# -- the API reference ----------------------------------------------------------------------


def documented() -> set[str]:
    """The dotted names the API pages render (``::: name``)."""
    return {
        name
        for page in API
        for name in re.findall(r"^::: ([\w.]+)$", page.read_text(encoding="utf-8"), re.M)
    }


@pytest.mark.parametrize("module", ["actormem.runtime", "actormem.runtime.redis"])
def test_the_api_reference_covers_a_module(module: str) -> None:
    names = importlib.import_module(module).__all__
    missing = sorted(n for n in names if f"{module}.{n}" not in documented())
    assert not missing, f"not in docs/api/: {missing}"


def test_the_api_reference_covers_every_root_name() -> None:
    """Each name of ``actormem.__all__`` is rendered as ``actormem.NAME``, or, when it
    is the runtime's, on the runtime's page; only ``__version__`` is plain text."""
    import actormem
    import actormem.runtime

    done = documented()
    missing = sorted(
        name
        for name in actormem.__all__
        if name != "__version__"
        and f"actormem.{name}" not in done
        and not (
            name in actormem.runtime.__all__
            and getattr(actormem.runtime, name) is getattr(actormem, name)
            and f"actormem.runtime.{name}" in done
        )
    )
    assert not missing, f"not in docs/api/: {missing}"
    assert all(importlib.import_module(n.rsplit(".", 1)[0]) for n in done)


# -- examples the docs show are the files shipped ---------------------------------------------


def test_the_brain_shown_is_the_one_shipped() -> None:
    page = (ROOT / "docs" / "simulation.md").read_text(encoding="utf-8")
    section = page.split("### A brain of your own", 1)[1]
    shown = re.search(r"```python\n(.*?)```", section, re.S)
    assert shown, "no Python example under 'A brain of your own'"
    assert shown.group(1) == (ROOT / "docs" / "examples" / "gossip.py").read_text()


def test_the_getting_started_example_runs() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", page.split("## Embedding the runtime", 1)[1], re.S)
    assert code, "no Python example under 'Embedding the runtime'"
    proc = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2 system"  # what the page says it prints
    assert "It prints `2 system`." in page


# -- the docstrings the API reference shows ---------------------------------------------------

#: A Google-style section header, and the start of an entry of one (``name: text``).
SECTION = re.compile(r"(Args|Arguments|Returns|Raises|Attributes|Yields|Examples?):")
ENTRY = re.compile(r"[\w.]+(?: \([^)]*\))?:\s+")


def docstring_prose(doc: str) -> Iterator[str]:
    """A docstring's paragraphs and the texts of its section entries."""
    doc = re.sub(r":\w+:`~?([^`]*)`", r"`\1`", doc.replace("``", "`"))
    unit: list[str] = []
    for line in [*doc.splitlines(), ""]:
        text = line.strip()
        entry = ENTRY.match(text) if line.startswith("    ") else None
        if not text or SECTION.fullmatch(text) or entry:
            if unit:
                yield " ".join(unit)
            unit = [text[entry.end() :]] if entry else []
        else:
            unit.append(text)


def public_docstrings() -> Iterator[tuple[str, str]]:
    """(name, docstring) of every public name the API reference renders, and of the
    public methods and properties of its classes (inherited ones included)."""
    import inspect

    seen: set[int] = set()
    for module in ("actormem", "actormem.runtime", "actormem.runtime.redis"):
        found = importlib.import_module(module)
        for name in found.__all__:
            obj = getattr(found, name)
            if name == "__version__" or id(obj) in seen:
                continue
            seen.add(id(obj))
            members = [(f"{module}.{name}", obj)]
            if inspect.isclass(obj):
                for attr, value in inspect.getmembers(obj):
                    function = value.fget if isinstance(value, property) else value
                    owner = getattr(function, "__module__", "") or ""
                    if not attr.startswith("_") and owner.startswith("actormem"):
                        members.append((f"{module}.{name}.{attr}", function))
            for dotted, member in members:
                if (callable(member) or inspect.isclass(member)) and id(member) not in seen:
                    seen.add(id(member))
                    if doc := inspect.getdoc(member):
                        yield dotted, doc


def test_public_docstrings_are_plain() -> None:
    """No sentence of a public docstring is over 60 words, and the median is under 20."""
    lengths, long = [], []
    for name, doc in public_docstrings():
        for unit in docstring_prose(doc):
            for sentence in sentences(unit):
                lengths.append(words(sentence))
                if words(sentence) > SENTENCE_MAX_WORDS:
                    long.append(f"{name}: {words(sentence)} words: {sentence[:60]}...")
    assert len(lengths) > 300, "the docstrings were not found"
    assert not long, "split these sentences:\n" + "\n".join(long)
    assert statistics.median(lengths) < MEDIAN_MAX_WORDS


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, made as the site makes them."""
    body = re.sub(r"^```[^\n]*\n.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.+)$", body, re.M)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}


def test_the_readme_links_to_anchors_that_exist() -> None:
    """The site checks its own pages' anchors; the README is not one of them."""
    links = re.findall(r"\]\((docs/[\w/.-]+\.md)#([\w-]+)\)", README.read_text(encoding="utf-8"))
    assert links
    missing = [f"{p}#{a}" for p, a in links if a not in anchors(ROOT / p)]
    assert not missing, f"README.md links to anchors that do not exist: {missing}"
