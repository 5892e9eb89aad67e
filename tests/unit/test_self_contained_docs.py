"""Every comment, docstring and doc in the repository stands on its own: none cites a document a reader of a
clone cannot open (numbered design decisions, conflict resolutions, section numbers of an outside spec). The
why is written out where it matters, or points at ``docs/``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # lists the files with git

ROOT = Path(__file__).resolve().parents[2]

# Numbered decisions, conflict resolutions ("R" + number), the outside spec's files and section signs.
# Written so that this file does not match itself.
CITATION = re.compile(
    r"\bdecisions? [0-9]+"
    r"|\bR[0-9]{1,2}\b"
    r"|\b(?:api|engine|storage|aws|conflicts)\.md\b"
    r"|\.\.[/]shared|\bspec[/](?:README|api|engine|storage|aws|conflicts)"
    r"|\u00a7 ?[0-9]"
)
SKIPPED_SUFFIXES = {".lock", ".json"}  # generated: the lock file and recorded Lambda events


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    files = []
    for name in listed:
        path = ROOT / name
        if path.suffix in SKIPPED_SUFFIXES or not path.is_file():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def test_the_scan_sees_the_code_and_docs():
    names = {p.relative_to(ROOT).as_posix() for p in tracked_text_files()}
    assert {"README.md", "template.yaml", "Makefile", "layers/shared/amsg/engine/delivery.py"} <= names


def test_no_text_cites_documents_outside_the_repository():
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for path in tracked_text_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if CITATION.search(line)
    ]
    assert offenders == [], "explain in your own words or point at docs/:\n" + "\n".join(offenders)


def test_the_pattern_catches_the_citation_styles():
    section = "\u00a7"
    # Each sample is glued from two halves so that this file does not cite anything itself.
    halves = [("(deci", "sion 13)"), ("deci", "sions 12-13"), ("R", "22: limits"), ("api", f".md {section}3.4")]
    halves += [("see aws", ".md"), (section, " 2"), ("..", "/shared/x"), ("sp", "ec/engine" + ".md")]
    assert all(CITATION.search(head + tail) for head, tail in halves)
    fine = ["RFC 8291", "the reference's order", "R2D2", "${sp" + "ec// /}", "decisions.md", "HTTP 413"]
    assert not any(CITATION.search(text) for text in fine)


def test_every_docs_page_that_is_pointed_at_exists():
    pointer = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)")
    missing = sorted(
        {
            f"{path.relative_to(ROOT)} -> docs/{name}"
            for path in tracked_text_files()
            for name in pointer.findall(path.read_text(encoding="utf-8"))
            if not (ROOT / "docs" / name).is_file()
        }
    )
    assert missing == []
