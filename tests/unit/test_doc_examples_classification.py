"""How the docs' shell examples are found and classified (tests/support/doc_examples.py); running them is
tests/e2e/test_doc_examples.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import RUN, SKIP, STATUS_MARK, MarkerError, all_examples, examples_in, statuses_in

PAGE = """# A page

<!-- example: skip deploys to AWS -->
```sh
make deploy
```

```sh
curl -s http://127.0.0.1:3000/api/v1/capabilities
curl -s -H 'Authorization: Bearer x' http://localhost:3000/api/v1/messages   # answers 401 INVALID_TENANT_AUTH
```

<!-- example: local -->

```bash
amsg status
```

```sh
echo "no address here"
```

```python
print("not shell")
```
"""


def write(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "guide" / "page.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    return page


def test_markers_and_the_local_address_decide(tmp_path: Path) -> None:
    found = examples_in(write(tmp_path, PAGE), tmp_path)
    assert [(e.id, e.action) for e in found] == [
        ("guide/page.md:4", SKIP),
        ("guide/page.md:8", RUN),
        ("guide/page.md:15", RUN),
        ("guide/page.md:19", SKIP),
    ]
    assert found[0].reason == "deploys to AWS"
    assert "not aimed at the local stack" in found[3].reason
    assert found[1].expected_answers() == [(None, None), (401, "INVALID_TENANT_AUTH")]
    script = found[1].script_for("http://127.0.0.1:41234")
    assert "3000" not in script and script.count("http://127.0.0.1:41234/api/v1/") == 2


@pytest.mark.parametrize(
    ("block", "command"),
    [
        ("make demo   # opens http://127.0.0.1:3000\ncurl -s http://127.0.0.1:3000/x\n", "make"),
        ("AMSG_TENANCY=multi amsg local --port 3000\n", "amsg local"),
        (".venv-tools/bin/sam deploy\n", ".venv-tools/bin/sam"),
        ("amsg import amsg.sql --dry-run\n", "amsg import"),
    ],
)
def test_a_block_that_starts_processes_of_its_own_is_skipped_naming_the_command(tmp_path, block, command):
    (found,) = examples_in(write(tmp_path, f"```sh\n{block}```\n"), tmp_path)
    assert found.action == SKIP and f"`{command}`" in found.reason
    (marked,) = examples_in(write(tmp_path, f"<!-- example: local -->\n```sh\n{block}```\n"), tmp_path)
    assert marked.action == RUN  # the author's marker wins


@pytest.mark.parametrize(
    "marker", ["<!-- example: skp deploys -->", "<!-- example: skip -->", "<!-- example: locl -->"]
)
def test_a_marker_it_does_not_know_is_an_error_not_a_silent_skip(tmp_path: Path, marker: str) -> None:
    with pytest.raises(MarkerError):
        examples_in(write(tmp_path, f"{marker}\n```sh\ncurl -s http://127.0.0.1:3000/x\n```\n"), tmp_path)


def test_every_example_of_the_repository_is_classified() -> None:
    """README.md and docs/ parse (no bad marker), and the README's quick look runs against the local stack, every
    call of it expected to succeed (its user id is a UUID v4; documented errors are covered by the page above)."""
    found = all_examples()
    quick_look = [e for e in found if e.path == "README.md" and "get-user-key" in e.text]
    assert quick_look and all(e.action == RUN for e in quick_look)
    assert quick_look[0].expected_answers() == [(None, None), (None, None)]
    assert all(e.reason for e in found if e.action == SKIP)


def test_the_shim_marks_are_read_back() -> None:
    statuses, rest = statuses_in(f"warning\n{STATUS_MARK}200\n{STATUS_MARK}404\n")
    assert (statuses, rest) == ([200, 404], "warning")
