"""The `llm-gateway` command line as a user meets it: version, help, and what each command is for."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from gateway.cli import build_parser


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"llm-gateway {version('llm-gateway')}\n"


def test_top_level_help_says_what_each_command_does() -> None:
    text = build_parser().format_help()
    for command in ("serve", "demo", "sim", "check-config"):
        assert f"    {command}" in text
    assert "import" not in text


def test_queue_flags_show_their_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-queue N admission queue bound per model (default 1024" in text
    assert "longest a request may wait in the queue (default 30" in text
