"""Every ```python block of every docs/*.md page runs, in order per page.

A block whose first line is ``# not run: <reason>`` is skipped (examples
that need a download or a GPU); the reason must be given. Blocks of one
page share one namespace, as in a notebook session, and run from the
repository root (paths in them are relative to it).
"""

import doctest
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r"#\s*not run:\s*(\S.*)")


def _pages():
  return sorted(glob.glob(os.path.join(DOCS, "*.md")))


def python_blocks(text: str) -> list[tuple[str, bool]]:
  """``(code, runs)`` for each ```python block of ``text``, in order."""
  blocks = []
  for code in _BLOCK.findall(text):
    first = code.split("\n", 1)[0].strip()
    if first.startswith("# not run"):
      if not _NOT_RUN.fullmatch(first):
        raise ValueError(f"a skipped block must say why: {first!r}")
      blocks.append((code, False))
    else:
      blocks.append((code, True))
  return blocks


def test_block_extraction():
  text = ("intro\n```python\nx = 1\n```\n```bash\nls\n```\n"
          "```python\n# not run: needs a GPU\ny = 2\n```\n"
          "```python\nz = x + 1\n```\n")
  assert python_blocks(text) == [("x = 1\n", True),
                                 ("# not run: needs a GPU\ny = 2\n", False),
                                 ("z = x + 1\n", True)]
  with pytest.raises(ValueError, match="must say why"):
    python_blocks("```python\n# not run\nx = 1\n```\n")


def test_docs_have_runnable_examples():
  runnable = [code for page in _pages()
              for code, runs in python_blocks(open(page, encoding="utf-8")
                                              .read()) if runs]
  assert runnable, "no runnable ```python block found under docs/"


@pytest.mark.parametrize("page", _pages(), ids=os.path.basename)
def test_page_examples_run_in_order(page, monkeypatch):
  monkeypatch.chdir(ROOT)
  blocks = python_blocks(open(page, encoding="utf-8").read())
  namespace = {"__name__": "docs"}
  for code, runs in blocks:
    if not runs:
      continue
    if code.lstrip().startswith(">>>"):  # an interactive session: doctest
      test = doctest.DocTestParser().get_doctest(
          code, namespace, os.path.basename(page), page, 0)
      runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
      runner.run(test, clear_globs=False)
      assert runner.failures == 0, f"{page}: a >>> example failed"
    else:
      exec(compile(code, page, "exec"), namespace)  # noqa: S102


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
  """GitHub's anchor of a Markdown heading."""
  text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
  return text.replace(" ", "-")


def _anchors(path: str) -> set[str]:
  text = open(path, encoding="utf-8").read()
  text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
  return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text,
                                          flags=re.MULTILINE)}


def test_anchor():
  assert _anchor("DP-GLVQ / DP-GMLVQ") == "dp-glvq--dp-gmlvq"
  assert _anchor("What is private") == "what-is-private"


@pytest.mark.parametrize(
    "page", ["README.md", "CONTRIBUTING.md"]
    + [os.path.relpath(p, ROOT) for p in _pages()])
def test_relative_links_resolve(page):
  path = os.path.join(ROOT, page)
  for target in _LINK.findall(open(path, encoding="utf-8").read()):
    if re.match(r"[a-z]+:", target):
      continue  # an external address
    file, _, anchor = target.partition("#")
    linked = os.path.normpath(os.path.join(os.path.dirname(path), file)
                              if file else path)
    assert os.path.exists(linked), f"{page}: {target} does not exist"
    if anchor:
      assert anchor in _anchors(linked), f"{page}: no heading for {target}"


_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]{3,}$")


def _prose_lines(text: str):
  """The lines outside fenced code blocks."""
  fenced = False
  for line in text.splitlines():
    if line.startswith("```"):
      fenced = not fenced
    elif not fenced:
      yield line.strip()


def test_placeholder_detection():
  text = "Intro.\n\nTABLE_FED\n\n```bash\nDATA_DIR\n```\n"
  assert [line for line in _prose_lines(text)
          if _PLACEHOLDER.match(line)] == ["TABLE_FED"]


@pytest.mark.parametrize(
    "page", ["README.md", "CONTRIBUTING.md"]
    + [os.path.relpath(p, ROOT) for p in _pages()])
def test_no_placeholder_stands_for_a_table(page):
  # A line that is one upper-case word (e.g. TABLE_FED) was meant to be
  # replaced by measured figures before the page landed.
  text = open(os.path.join(ROOT, page), encoding="utf-8").read()
  left = [line for line in _prose_lines(text) if _PLACEHOLDER.match(line)]
  assert not left, f"{page}: placeholders left: {left}"
