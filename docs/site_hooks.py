"""MkDocs hooks (mkdocs.yml `hooks:`): the API reference and linked files.

Two things the Markdown in docs/ cannot say by itself:

- The **Reference** section: one page per library module (`dpcore`,
  `mechanisms`, `federated`) that declares `__all__`, each a
  `::: package.module` directive listing exactly the names in `__all__`.
  The modules and their names are read with `ast`, nothing is imported, and
  the pages are in sorted order, so two builds give the same site.
- **Files outside docs/** that a page links to (the README, CONTRIBUTING,
  results/): they are added to the site under `repo/`, found by following
  relative links from docs/, and every relative link is rewritten from the
  repository's layout to the site's. A link to a file that does not exist
  is left as written, so `mkdocs build --strict` reports it.

And one griffe extension (mkdocs.yml, mkdocstrings' `extensions:`),
`DoctestFences`: a docstring's bare `>>>` session (the module docstrings'
doctests) is shown as a code block rather than read as Markdown.
"""

import ast
import os
import posixpath
import re

import griffe
from mkdocs.structure.files import File, InclusionLevel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("dpcore", "mechanisms", "federated")
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)


def public_names(path: str) -> list[str] | None:
  """The literal `__all__` of a module's source, or None without one."""
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  for node in tree.body:
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AnnAssign) else [])
    if any(getattr(target, "id", None) == "__all__" for target in targets):
      return list(ast.literal_eval(node.value))
  return None


def api_modules() -> list[tuple[str, list[str]]]:
  """`(dotted name, __all__)` for each library module, sorted by name."""
  modules = []
  for package in PACKAGES:
    for folder, dirs, names in os.walk(os.path.join(ROOT, package)):
      dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
      for name in sorted(names):
        if not name.endswith(".py"):
          continue
        path = os.path.join(folder, name)
        parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
        if parts[-1] == "__init__":
          parts.pop()
        exported = public_names(path)
        if exported:
          modules.append((".".join(parts), exported))
  return sorted(modules)


def api_page(module: str, exported: list[str]) -> str:
  members = "".join(f"\n        - {name}" for name in exported)
  return (f"# `{module}`\n\n::: {module}\n    options:\n"
          f"      members:{members}\n")


def _api_nav() -> list[dict]:
  groups: dict[str, list] = {}
  for module, _ in api_modules():
    groups.setdefault(module.split(".")[0], []).append(
        {module: f"reference/{module}.md"})
  return [{package: groups[package]} for package in PACKAGES
          if package in groups]


def on_config(config):
  """Fills the nav's `Reference` section with the generated pages."""
  nav = config["nav"]
  for entry in nav:
    if isinstance(entry, dict) and "Reference" in entry:
      entry["Reference"] = list(entry["Reference"] or []) + _api_nav()
      break
  else:
    nav.append({"Reference": _api_nav()})
  return config


def _repo_path(src_uri: str) -> str:
  """The repository path of a site file (docs/x.md or repo/README.md)."""
  if src_uri.startswith("repo/"):
    return src_uri[len("repo/"):]
  return "docs/" + src_uri


def _site_uri(repo_path: str) -> str:
  if repo_path.startswith("docs/"):
    return repo_path[len("docs/"):]
  return "repo/" + repo_path


def _targets(src_uri: str, markdown: str):
  """Repository paths of the relative links in a page, and each link."""
  base = posixpath.dirname(_repo_path(src_uri))
  for match in _LINK.finditer(_FENCE.sub("", markdown)):
    target = match.group(2)
    file = target.partition("#")[0]
    if not file or re.match(r"[a-z]+:", target) or target.startswith("/"):
      continue
    yield posixpath.normpath(posixpath.join(base, file))


def on_files(files, config):
  """Adds the API pages and the outside files that pages link to."""
  for module, exported in api_modules():
    files.append(File.generated(config, f"reference/{module}.md",
                                content=api_page(module, exported)))
  queue = [f for f in files.documentation_pages() if f.abs_src_path]
  seen = {f.src_uri for f in files}
  while queue:
    page = queue.pop()
    text = open(page.abs_src_path, encoding="utf-8").read()
    for path in sorted(set(_targets(page.src_uri, text))):
      uri = _site_uri(path)
      absolute = os.path.join(ROOT, *path.split("/"))
      if (uri in seen or path.startswith("..")
          or not os.path.isfile(absolute)):
        continue
      seen.add(uri)
      # A linked page need not be in the nav (the results' notes are not).
      added = File.generated(config, uri, abs_src_path=absolute,
                             inclusion=InclusionLevel.NOT_IN_NAV)
      files.append(added)
      if uri.endswith(".md"):
        queue.append(added)
  return files


def on_page_markdown(markdown, page, config, files):
  """Rewrites relative links from the repository's layout to the site's."""
  src_uri = page.file.src_uri
  base = posixpath.dirname(_repo_path(src_uri))
  here = posixpath.dirname(src_uri) or "."

  def rewrite(match):
    target = match.group(2)
    file, hash_, anchor = target.partition("#")
    if not file or re.match(r"[a-z]+:", target) or target.startswith("/"):
      return match.group(0)
    path = posixpath.normpath(posixpath.join(base, file))
    uri = _site_uri(path)
    if path.startswith("..") or files.get_file_from_path(uri) is None:
      return match.group(0)  # not in the site: mkdocs reports it
    link = posixpath.relpath(uri, here) + hash_ + anchor
    return match.group(1) + link + match.group(3)

  parts = re.split(r"(^```.*?^```)", markdown,
                   flags=re.DOTALL | re.MULTILINE)
  return "".join(part if part.startswith("```") else _LINK.sub(rewrite, part)
                 for part in parts)


_SESSION = re.compile(r"^>>> .*?(?=\n\s*\n|\Z)", flags=re.DOTALL | re.MULTILINE)


def fence_doctests(text: str) -> str:
  """Puts each unindented `>>>` session of a docstring in a code fence."""
  return _SESSION.sub(lambda m: f"```pycon\n{m.group(0)}\n```", text)


class DoctestFences(griffe.Extension):
  """Shows the bare doctests of docstrings as code."""

  def on_object(self, *, obj, **kwargs):
    del kwargs
    if obj.docstring is not None:
      obj.docstring.value = fence_doctests(obj.docstring.value)
