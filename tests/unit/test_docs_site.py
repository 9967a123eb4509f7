"""The documentation site builds in CI (#39 item 7): `mkdocs build --strict` of docs/ (with the
README as its index and each role's README as a page, scripts/mkdocs_hooks.py) succeeds with no
warning, holds every page of the nav, and fails, with mkdocs's own message, on a broken link or
anchor. The docs derived from code are current: docs/cli.md (the parser's --help) and the
variables and tags of every roles/<role>/README.md (the argument specs), as scripts/gen_docs.py
writes them."""

import importlib.util
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tests.required import engine_missing

spec = importlib.util.spec_from_file_location("kvprov_gen_docs", ROOT / "scripts/gen_docs.py")
gen_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_docs)
hooks_spec = importlib.util.spec_from_file_location("kvprov_mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta/main.yml").is_file())


def mkdocs_config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def build(root, out):
    if importlib.util.find_spec("mkdocs") is None:
        engine_missing("mkdocs is not installed (pip install -e '.[docs]'; scripts/install-deps installs it)")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=root,
                          capture_output=True, text=True, timeout=300)


def site_copy(tmp_path):
    """What the site is built from, in a directory of its own (the hook finds the repository
    root from its own path)."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    for name in ("mkdocs.yml", "README.md", "CHANGELOG.md", "scripts/mkdocs_hooks.py", "benchmarks/results/scale.png",
                 *(f"roles/{r}/README.md" for r in ROLES)):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    return root


def test_the_site_builds_strict_with_every_page_of_the_nav(tmp_path):
    r = build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr + r.stdout, r.stderr
    pages = nav_pages(mkdocs_config()["nav"])
    assert "index.md" in pages
    for page in pages:
        html = tmp_path / "site" / page.replace(".md", ".html")
        assert html.is_file(), f"the nav's {page} was not built"
    index = (tmp_path / "site/index.html").read_text()
    assert "Quick start" in index and 'href="lab.html#how-long-the-first-command-takes"' in index
    # the README's links into docs/ and roles/ are the site's own
    assert 'href="docs/' not in index and 'href="roles/engine.html"' in index
    assert (tmp_path / "site/scale.png").is_file() and 'src="scale.png"' in (tmp_path / "site/scale.html").read_text()


def test_every_page_and_role_is_in_the_nav():
    pages = set(nav_pages(mkdocs_config()["nav"]))
    docs = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert docs - pages == set(), "pages of docs/ missing from mkdocs.yml's nav"
    assert {f"roles/{r}.md" for r in ROLES} <= pages, "a role's README missing from mkdocs.yml's nav"


@pytest.mark.parametrize("bad, message", [
    ("[the lab](nowhere.md)", "contains a link 'nowhere.md', but the target is not found among documentation files"),
    ("[the lab](lab.md#no-such-section)", "contains a link 'lab.md#no-such-section', but the doc 'lab.md' does not "
                                          "contain an anchor '#no-such-section'"),
    ("[code](../kvprov/cli.py)", "contains a link '../kvprov/cli.py', but the target is not found"),
])
def test_a_broken_link_fails_the_build_with_mkdocss_message(tmp_path, bad, message):
    root = site_copy(tmp_path)
    r = build(root, tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr  # the copy builds as the checkout does
    page = root / "docs/deploy.md"
    page.write_text(page.read_text() + f"\n{bad}\n")
    r = build(root, tmp_path / "site")
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert "Aborted with 1 warnings in strict mode!" in r.stdout + r.stderr


def test_the_hook_points_repository_links_at_the_site():
    hooks = importlib.util.module_from_spec(hooks_spec)
    hooks_spec.loader.exec_module(hooks)
    readme = "[lab](docs/lab.md#x) [rdma](roles/rdma/README.md) [log](CHANGELOG.md) [web](https://example.org/a.md)"
    assert hooks.rewrite(readme, "index.md") == ("[lab](lab.md#x) [rdma](roles/rdma.md) [log](changelog.md) "
                                                  "[web](https://example.org/a.md)")
    role = "[s](../../docs/storage.md#a) [n](../nixl/README.md) [r](../../README.md#exit-codes)"
    assert hooks.rewrite(role, "roles/gds.md") == "[s](../storage.md#a) [n](nixl.md) [r](../index.md#exit-codes)"
    page = "![chart](../benchmarks/results/scale.png) [e](../roles/engine/README.md)\n```\n[x](docs/lab.md)\n```\n"
    assert hooks.rewrite(page, "scale.md") == "![chart](scale.png) [e](roles/engine.md)\n```\n[x](docs/lab.md)\n```\n"


def test_the_readme_starts_with_its_two_commands_and_stays_short():
    """CI runs the README's test command (.ci/run); a newcomer reads the README in five minutes."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[2:6] == [
        "```bash",
        "scripts/install-deps && kvprov lab up && kvprov deploy inventory/lab.yml   # set up, boot the lab, deploy to it",
        "python3 -m pytest                                                          # run the tests (unit + lab; CI runs all)",
        "```"]
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"


def test_generated_docs_are_current():
    """docs/cli.md and the generated part of each role's README are what scripts/gen_docs.py
    writes from the parser and the argument specs today."""
    stale = [str(path.relative_to(ROOT)) for path, text in gen_docs.expected().items()
             if not path.is_file() or path.read_text() != text]
    assert not stale, f"stale: {', '.join(stale)}; run python3 scripts/gen_docs.py and commit the result"


def test_every_role_readme_names_every_option_of_its_argument_spec():
    for role in ROLES:
        readme = ROOT / "roles" / role / "README.md"
        assert readme.is_file(), f"roles/{role} has no README.md"
        text = readme.read_text()
        specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
        for entry in specs.values():
            for option in entry.get("options") or {}:
                assert f"`{option}`" in text, f"roles/{role}/README.md does not name {option}"
        for heading in ("## What it does", "## Example", "## Handlers", "## Variables", "## Tags"):
            assert heading in text, f"roles/{role}/README.md has no {heading!r}"


def test_cli_reference_covers_every_command_and_subcommand():
    from kvprov.cli import build_parser

    text = (ROOT / "docs/cli.md").read_text()

    def walk(parser, words):
        for name, sub in gen_docs._subparsers(parser).items():
            path = [*words, name]
            assert f"# kvprov {' '.join(path)}\n" in text, f"docs/cli.md has no section for kvprov {' '.join(path)}"
            for action in sub._actions:
                for flag in action.option_strings:
                    assert flag in text, f"docs/cli.md does not show {' '.join(path)} {flag}"
            walk(sub, path)

    walk(build_parser(), [])
