"""The docs site builds with `mkdocs build --strict` and no warning.

The whole site, API reference included, builds in a few seconds, so it is
in the default suite: this is how CI builds the docs. A broken link, a
missing anchor, a page left out of the nav or a docstring the API pages
cannot parse is a warning, and a warning fails the build.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs"))

import site_hooks  # noqa: E402  (docs/site_hooks.py, the mkdocs hooks)


def _build(config: str, site: str) -> subprocess.CompletedProcess:
  return subprocess.run(
      # Not --quiet: it hides the warnings from --strict's count too.
      [sys.executable, "-m", "mkdocs", "build", "--strict",
       "--config-file", config, "--site-dir", site],
      cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_site_builds_strict_without_warnings(tmp_path):
  run = _build(os.path.join(ROOT, "mkdocs.yml"), str(tmp_path / "site"))
  log = run.stdout + run.stderr
  assert run.returncode == 0, log
  assert "WARNING" not in log, log
  for page in ("index.html", "repo/index.html", "feddpdr/index.html",
               "reference/dpcore.accounting/index.html"):
    assert (tmp_path / "site" / page).exists(), page


def test_a_broken_link_fails_the_build(tmp_path):
  # The same hooks and validation on a one-page site with a broken link.
  docs = tmp_path / "docs"
  docs.mkdir()
  (docs / "index.md").write_text(
      "# Home\n\n[a page](missing.md), [the build](../pyproject.toml)\n")
  (docs / "site_hooks.py").write_text(
      open(site_hooks.__file__, encoding="utf-8").read().replace(
          "ROOT = ", f"ROOT = {ROOT!r}  # ", 1))
  (tmp_path / "mkdocs.yml").write_text(
      "site_name: t\nhooks: [docs/site_hooks.py]\n"
      "exclude_docs: /site_hooks.py\nnav: [index.md]\n"
      "validation: {anchors: warn, unrecognized_links: warn}\n")
  run = _build(str(tmp_path / "mkdocs.yml"), str(tmp_path / "site"))
  log = run.stdout + run.stderr
  assert run.returncode != 0
  assert "missing.md" in log, log
  assert "pyproject" not in log, log  # a file outside docs/ resolves


def test_api_pages_list_each_module_all():
  modules = dict(site_hooks.api_modules())
  assert [m.split(".")[0] for m in modules] == sorted(
      m.split(".")[0] for m in modules)
  assert "dpcore.accounting" in modules
  assert "PrivacyLedger" in modules["dpcore.accounting"]
  page = site_hooks.api_page("dpcore.clipping", ["clip_rows", "row_norms"])
  assert page.splitlines()[2] == "::: dpcore.clipping"
  assert page.endswith("- clip_rows\n        - row_norms\n")


def test_bare_doctests_are_fenced():
  text = "Rows.\n\n>>> x = 1\n>>> x\n1\n\nMore.\n\n  >>> indented\n"
  assert site_hooks.fence_doctests(text) == (
      "Rows.\n\n```pycon\n>>> x = 1\n>>> x\n1\n```\n\nMore.\n\n"
      "  >>> indented\n")
