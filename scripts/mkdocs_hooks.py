"""mkdocs hooks (mkdocs.yml `hooks:`): the site is docs/ plus the files that live elsewhere in
the repository so that GitHub shows them where a reader looks for them:

- README.md is the site's index (index.md), CHANGELOG.md its changelog.md;
- each role's roles/<role>/README.md is the page roles/<role>.md;
- benchmarks/results/scale.png (written by benchmarks/scale.py) is scale.png.

Every page links as it does in the repository (README.md to `docs/lab.md`, docs/deploy.md to
`../roles/engine/README.md`), so the links work on GitHub; this hook rewrites each link whose
target is one of the files above to that file's place in the site. A link to anything else
outside docs/ is left alone, and `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "benchmarks/results/scale.png": "scale.png"}
LINK = re.compile(r"(\]\()([^)\s]+)(\s+\"[^\"]*\")?\)")


def placed() -> dict[str, str]:
    """Repository path -> site path of every file this hook adds."""
    out = dict(FIXED)
    for readme in sorted(ROOT.glob("roles/*/README.md")):
        out[readme.relative_to(ROOT).as_posix()] = f"roles/{readme.parent.name}.md"
    return out


def on_files(files, config):
    for repo, site in placed().items():
        if files.get_file_from_path(site) is None:
            files.append(File.generated(config, site, abs_src_path=str(ROOT / repo)))
    return files


def repo_path(site_path: str) -> str:
    """Where a site page's source lives in the repository."""
    back = {site: repo for repo, site in placed().items()}
    return back.get(site_path, "docs/" + site_path)


def rewrite(markdown: str, site_path: str) -> str:
    """Links written against the repository's layout, pointed at the site's."""
    to_site = placed()
    here = posixpath.dirname(repo_path(site_path))

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        if resolved in to_site:
            site = to_site[resolved]
        elif resolved.startswith("docs/"):
            site = resolved.removeprefix("docs/")
        else:
            return m.group(0)  # outside the site: mkdocs reports it
        new = posixpath.relpath(site, posixpath.dirname(site_path) or ".")
        return f"{m.group(1)}{new}{'#' + anchor if anchor else ''}{m.group(3) or ''})"

    parts = re.split(r"(^```.*?^```[^\n]*$)", markdown, flags=re.M | re.S)
    return "".join(p if i % 2 else LINK.sub(fix, p) for i, p in enumerate(parts))


def on_page_markdown(markdown, page, config, files):
    return rewrite(markdown, page.file.src_uri)
