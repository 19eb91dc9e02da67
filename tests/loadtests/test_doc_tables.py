"""A benchmark rewrites its own block of a document and nothing else, and names what made it."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.doc_tables import write_block

DOC = """# Title

Prose before.

<!-- generated: bench-x -->
old table
<!-- /generated: bench-x -->

Prose after.
"""


def test_only_the_block_is_replaced_and_it_names_its_command(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(DOC)
    write_block(doc, "bench-x", "| a |\n|---|\n| 1 |\n", command="make bench-x")
    text = doc.read_text()
    assert text.startswith(
        "# Title\n\nProse before.\n\n<!-- generated: bench-x -->\nMade by `make bench-x`:\n"
    )
    assert "old table" not in text and "| a |\n|---|\n| 1 |\n<!-- /generated: bench-x -->" in text
    assert text.endswith("\n\nProse after.\n")
    write_block(doc, "bench-x", "| b |", command="make bench-x")
    assert doc.read_text().count("<!-- generated: bench-x -->") == 1


def test_a_document_without_the_block_is_an_error_not_an_append(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# nothing here\n")
    with pytest.raises(ValueError, match="no block"):
        write_block(doc, "bench-x", "| a |", command="make bench-x")
    assert doc.read_text() == "# nothing here\n"
