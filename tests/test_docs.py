"""The README and the documentation site stay true: the messages Troubleshooting quotes are the library's own text,
every command line they show uses options that exist (and the CLI reference lists every option), the charts are
the benchmark results' PNGs, and the site builds with warnings as errors. (Their code blocks run in
test_readme.py.)"""

import ast
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


@lru_cache(maxsize=None)
def message_templates() -> tuple[str, ...]:
    """Every string literal of pairload/, an f-string's formatted values shown as NUL (so that only a quoted
    "…" stands for them); implicitly concatenated literals are one string, as Python joins them."""
    out = []
    for path in (ROOT / "pairload").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                out.append("".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
    return tuple(out)


def quoted_messages() -> list[str]:
    """The backticked fragments of the first cell of every table row in troubleshooting.md (the message column)."""
    out = []
    for line in (DOCS / "troubleshooting.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ") or line.startswith("| message |"):
            continue
        out += re.findall(r"`([^`]+)`", line[2:].split(" | ", 1)[0])
    return out


def test_troubleshooting_quotes_many_messages_by_stage():
    text = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert {"Packing", "Loading", "Training", "Remote"} <= set(headings)
    assert len(quoted_messages()) >= 60


def is_quoted(fragment: str) -> bool:
    """Some string of pairload/ holds `fragment`, where a "…" in the fragment stands for any text."""
    pattern = re.compile(".*?".join(map(re.escape, fragment.split("…"))), re.S)
    return any(pattern.search(t) for t in message_templates())


@pytest.mark.parametrize("fragment", quoted_messages())
def test_each_quoted_message_is_the_librarys_text(fragment):
    assert is_quoted(fragment), f"troubleshooting.md quotes {fragment!r}, which no string in pairload/ holds"


def test_a_changed_or_invented_message_is_caught():
    assert is_quoted("crop … is larger than sample") and is_quoted("a pair must have one size")
    assert not is_quoted("crop 999 is larger than sample")  # a formatted value is only matched by "…"
    assert not is_quoted("a pair must be one size")


# ------------------------------------------------------------------ command lines

def cli_options() -> dict[str, list[set[str]]]:
    """Each `pairload` command's options, and the reference loop's (`train`): per option the set of its names
    (`--keep-staging`, `--no-keep-staging`). Hidden commands (deprecated aliases) are left out."""
    import typer

    from pairload.cli import app
    from pairload.recipes.config import build_parser

    group = typer.main.get_command(app)
    out = {name: [{o for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} for p in cmd.params]
           for name, cmd in group.commands.items() if not cmd.hidden}
    out["train"] = [set(a.option_strings) for a in build_parser()._actions]
    return {name: [names for names in opts if names and "--help" not in names] for name, opts in out.items()}


def command_lines() -> list[tuple[str, str, str]]:
    """(page, command, the rest of its line or code span) for every `pairload CMD …`, `-m pairload.train …` and
    `-m pairload.cli CMD …` in a shell block or a code span of the README and the docs."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        pieces = []
        for block in re.findall(r"^```(?:bash|sh|text)?\n(.*?)^```", text, re.S | re.M):
            pieces += re.sub(r"\n[ \t]+", " ", block.replace("\\\n", " ")).splitlines()  # continued lines
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        pieces += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
        for piece in pieces:
            for part in re.split(r"&&|;|\s#\s", piece):
                m = (re.search(r"-m pairload\.train\b(.*)", part) or re.search(r"\bpairload (train)\b(.*)", part)
                     or re.search(r"-m pairload\.cli ([a-z-]+)(.*)", part)
                     or re.search(r"\bpairload (make-pairs|pack|verify|info|bench-loaders|demo)\b(.*)", part))
                if m:
                    cmd, rest = (("train", m.group(1)) if m.re.pattern.startswith("-m pairload\\.train")
                                 else (m.group(1), m.group(2)))
                    found.append((page.name, cmd, rest))
    return found


def test_every_option_shown_on_a_command_line_exists():
    options = cli_options()
    lines = command_lines()
    assert len(lines) >= 40 and {cmd for _, cmd, _ in lines} >= {"pack", "verify", "info", "train", "make-pairs"}
    wrong = [(page, cmd, flag) for page, cmd, rest in lines
             for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", rest)
             if flag != "--help" and not any(flag in names for names in options[cmd])]
    assert not wrong, f"options that the command does not have: {wrong}"


def test_the_cli_reference_lists_every_option():
    options = cli_options()
    sections = re.split(r"^## ", (DOCS / "cli.md").read_text(encoding="utf-8"), flags=re.M)
    rows = {s.split()[1]: s for s in sections if s.startswith("pairload ")}  # "pairload pack\n\n```text…"
    synopsis, = [b for b in re.findall(r"^```text\n(.*?)^```", (DOCS / "training.md").read_text(encoding="utf-8"),
                                       re.S | re.M) if "-m pairload.train" in b]  # the reference loop's options
    listed = {cmd: synopsis if cmd == "train" else rows[cmd] for cmd in options}
    missing = [(cmd, sorted(names)) for cmd, opts in options.items() for names in opts
               if not any(re.search(rf"{n}(?![\w-])", listed[cmd]) for n in names)]
    assert not missing, f"options missing from the CLI reference (cli.md, training.md's synopsis): {missing}"


# ------------------------------------------------------------------ the site

def test_the_charts_are_the_benchmark_results():
    shown = set()
    for page in PAGES:
        shown |= set(re.findall(r"!\[[^\]]*\]\((?:docs/)?img/([^)]+)\)", page.read_text(encoding="utf-8")))
    assert shown and shown == {p.name for p in (DOCS / "img").iterdir()}  # every copy shown, every one shown there
    for name in shown - PICTURES:
        assert (DOCS / "img" / name).read_bytes() == (ROOT / "benchmarks" / "results" / name).read_bytes(), name


PICTURES = {"preview-pairs.png", "preview-batch.png"}  # `pairload preview`'s sheets (docs/preview.md says how)


def test_every_page_is_in_the_nav_and_the_readme_links_them():
    nav = re.findall(r"^ +- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)  # nested too
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 170  # a two-minute read
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme))
    assert linked <= set(nav) and {"install.md", "datasets.md", "loaders.md", "troubleshooting.md"} <= linked


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "site" / "troubleshooting" / "index.html").is_file()
