"""The shell examples of README.md and docs/: found, classified and prepared to run (docs/testing.md, "Examples
in the docs").

Every fenced ``sh``/``bash``/``shell`` block of README.md, ``docs/**/*.md`` and ``tools/*/README.md`` is an
example, so one added later is picked up without touching a test. An HTML comment on the line before the fence
decides what happens to it:

* ``<!-- example: local -->``: run against a started local stack;
* ``<!-- example: skip <reason> -->``: not run, and the reason is the test's skip reason (deploying, AWS, a
  command that starts a stack itself, ...).

Without a comment, a block with a command that starts processes of its own or acts on AWS (``make …``,
``amsg local``, ``amsg import``, ``amsg bootstrap-secrets``, ``sam``, ``aws``, ``wrangler``, ``docker``, ``npm``)
is skipped naming that command; otherwise a block that names the local stack's address (``http://127.0.0.1:3000``
or ``http://localhost:3000``) runs against the local stack, and any other block is skipped as "not aimed at the
local stack". In a block that runs, every ``curl`` answer must be a success (2xx) unless its line says which
error the text shows it giving: ``# answers 401`` (with the error code, ``# answers 401 INVALID_TENANT_AUTH``,
that code must be in the output too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
LOCAL_ADDRESSES = ("http://127.0.0.1:3000", "http://localhost:3000")
RUN, SKIP = "run", "skip"
STATUS_MARK = "@@amsg-doc-example-status "  # what the curl shim writes to stderr after each transfer

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<mode>[a-z-]+)\s*(?P<reason>.*?)\s*-->\s*$")
# Commands that start processes of their own (a stack, a build, the suite) or act on AWS or a reference
# deployment: a block with one is not run unless marked ``local``, whatever address it names.
_NOT_RUN_HERE = re.compile(
    r"^\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?P<command>make\b|amsg\s+(?:local|import|bootstrap-secrets)\b"
    r"|(?:\S*/)?(?:sam|aws|wrangler|docker|npm|npx)\b|python\S*\s+-m\s+amsg_local\s+local\b)",
    re.MULTILINE,
)
_ANSWERS = re.compile(r"#\s*answers\s+(?P<status>[1-5]\d\d)\b(?:\s+(?P<code>[A-Z][A-Z0-9_]+)\b)?")


class MarkerError(ValueError):
    """A marker comment this convention does not know (a typo would otherwise silently skip an example)."""


@dataclass(frozen=True)
class Example:
    path: str  # relative to the repository
    line: int  # of the opening fence
    text: str
    action: str  # RUN or SKIP
    reason: str = ""

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    def expected_answers(self) -> list[tuple[int | None, str | None]]:
        """One entry per ``curl`` call in the text, in order: the status and error code its line's
        ``# answers NNN [CODE]`` names, else ``(None, None)`` (any 2xx)."""
        expected: list[tuple[int | None, str | None]] = []
        for line in self.text.splitlines():
            calls = len(re.findall(r"(?:^|[\s;|&(])curl\s", line))
            found = _ANSWERS.search(line)
            expected += [(int(found["status"]), found["code"]) if found else (None, None)] * calls
        return expected

    def script_for(self, base_url: str) -> str:
        """The text with the local stack's documented address replaced by ``base_url`` (the test's stack listens
        on a free port, so a developer's ``make run`` on 3000 does not collide with it)."""
        text = self.text
        for address in LOCAL_ADDRESSES:
            text = text.replace(address, base_url)
        return text


def documents(root: Path = ROOT) -> list[Path]:
    """README.md, every page under docs/ and every tool's README: where a reader meets shell examples."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "tools").glob("*/README.md"))]
    return [path for path in found if path.is_file()]


def examples_in(path: Path, root: Path = ROOT) -> list[Example]:
    """The shell blocks of one Markdown file, each classified (raises :class:`MarkerError` on a bad marker)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    name = path.relative_to(root).as_posix()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if opened is None:
            index += 1
            continue
        close = _closing(lines, index + 1, opened["fence"])
        if opened["info"].lower() in SHELL_LANGUAGES:
            text = "\n".join(line[len(opened["indent"]) :] for line in lines[index + 1 : close]) + "\n"
            found.append(_classify(name, index + 1, text, _marker_before(lines, index)))
        index = close + 1
    return found


def all_examples(root: Path = ROOT) -> list[Example]:
    return [example for path in documents(root) for example in examples_in(path, root)]


def _closing(lines: list[str], start: int, fence: str) -> int:
    for index in range(start, len(lines)):
        if lines[index].strip().startswith(fence) and not lines[index].strip().strip(fence[0]):
            return index
    return len(lines)


def _marker_before(lines: list[str], fence_index: int) -> str | None:
    index = fence_index - 1
    while index >= 0 and not lines[index].strip():
        index -= 1
    if index >= 0 and "<!--" in lines[index] and "example" in lines[index]:
        return lines[index]
    return None


def _classify(path: str, line: int, text: str, marker: str | None) -> Example:
    if marker is not None:
        parsed = _MARKER.match(marker)
        if parsed is None or parsed["mode"] not in ("local", "skip"):
            raise MarkerError(
                f"{path}:{line}: unknown example marker {marker.strip()!r}: write <!-- example: local --> or "
                "<!-- example: skip <reason> --> (docs/testing.md)"
            )
        if parsed["mode"] == "skip":
            if not parsed["reason"]:
                raise MarkerError(f"{path}:{line}: <!-- example: skip --> needs a reason after 'skip'")
            return Example(path, line, text, SKIP, parsed["reason"])
        return Example(path, line, text, RUN)
    starts = _NOT_RUN_HERE.search(text)
    if starts is not None:
        command = " ".join(starts["command"].split())
        return Example(path, line, text, SKIP, f"runs `{command}` (its own processes, AWS or a reference deployment)")
    if any(address in text for address in LOCAL_ADDRESSES):
        return Example(path, line, text, RUN)
    return Example(path, line, text, SKIP, "not aimed at the local stack (names no http://127.0.0.1:3000)")


def statuses_in(stderr: str) -> tuple[list[int], str]:
    """The HTTP statuses the curl shim recorded, and the rest of stderr."""
    statuses: list[int] = []
    rest: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(STATUS_MARK):
            statuses.append(int(line[len(STATUS_MARK) :].strip() or 0))
        else:
            rest.append(line)
    return statuses, "\n".join(rest)


def curl_shim(directory: Path, real_curl: str) -> Path:
    """A ``curl`` that runs the real one and then writes each transfer's HTTP status to stderr, marked; put
    ``directory`` first on PATH. Its ``--write-out`` comes last, so it wins over an example's own."""
    shim = directory / "curl"
    shim.write_text(
        f"#!/bin/sh\nexec '{real_curl}' \"$@\" --write-out '%{{stderr}}\\n{STATUS_MARK}%{{http_code}}\\n'\n",
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return directory
