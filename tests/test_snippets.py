"""Every code block the README and docs/*.md show runs, and every command line they show
names commands and flags that exist.

* Each fenced ``python`` block of README.md and docs/*.md is run on its own (blocks are
  self-contained: a reader copies one), in this process, in a fresh temporary folder that
  holds a link to the repository's ``configs/`` (the examples' paths are relative to the
  repository root), so nothing is written into the checkout.  A block passes when it
  raises nothing and triggers no warning (a DeprecationWarning of another package
  excepted): an example that prints its own warning is a wrong example.
* A block is skipped only where the line before its fence is ``<!-- skip: REASON -->``
  (needs a deployment, or a run of minutes); the reasons are listed by
  ``test_skips_are_few_and_give_a_reason``.
* Command lines, in ``bash``/``console``/``text`` blocks and in inline code: each
  ``fedspectral COMMAND`` names a command of the CLI and each ``--flag`` after it is one of
  that command's flags (from its argparse parser); ``make TARGET`` a target of the
  Makefile; in a block, ``python scripts/X.py`` / ``python -m fedspectral.X`` an existing
  file whose source defines each flag; ``flwr``/``flower-superlink``/``flower-supernode``
  flags occur in the installed Flower's source; a ``console`` block's ``$ fedspectral ...``
  prints the lines it shows below it.

Run it alone with ``pytest tests/test_snippets.py`` (about half a minute)."""

from __future__ import annotations

import argparse
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
SKIP = re.compile(r"<!--\s*skip:\s*(?P<reason>[^>]*?)\s*-->\s*\Z")
SHELL_LANGS = {"bash", "sh", "shell", "console", "text"}
#: the most blocks that may be skipped, all files together
MAX_SKIPS = 4


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    lang: str
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def _blocks() -> list[Block]:
    out = []
    for path in FILES:
        text = path.read_text()
        for m in FENCE.finditer(text):
            before = text[: m.start()].rstrip()
            skip = SKIP.search(before)
            if skip is not None and not skip["reason"]:
                raise ValueError(f"{path.name}: a skip marker without a reason")
            indent = len(m["indent"])
            code = "\n".join(ln[indent:] for ln in m["body"].splitlines())
            out.append(
                Block(
                    file=str(path.relative_to(ROOT)),
                    line=text.count("\n", 0, m.start()) + 1,
                    lang=(m["info"].strip().split() or [""])[0].lower(),
                    code=code,
                    skip=skip["reason"] if skip else None,
                )
            )
    return out


BLOCKS = _blocks()
PYTHON = [b for b in BLOCKS if b.lang in ("python", "py")]


def test_blocks_are_found():
    assert len(PYTHON) >= 6  # README (2), docs/pca.md (2), docs/flower.md (2) at least
    assert {b.file for b in PYTHON} >= {"README.md", "docs/pca.md"}


def test_skips_are_few_and_give_a_reason():
    skipped = [(b.id, b.skip) for b in BLOCKS if b.skip]
    assert len(skipped) <= MAX_SKIPS, skipped
    assert all(len(reason) > 15 for _, reason in skipped), skipped


@pytest.mark.parametrize("block", PYTHON, ids=[b.id for b in PYTHON])
def test_python_block_runs_without_warnings(block, tmp_path, monkeypatch):
    if block.skip:
        pytest.skip(block.skip)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    code = compile(block.code, block.id, "exec")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(code, {"__name__": "__snippet__"})  # noqa: S102 - the docs' own code
    ours = [
        f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})"
        for w in caught
        if not (
            issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning))
            and "fedspectral" not in w.filename
            and w.filename != block.id
        )
    ]
    assert not ours, ours


# -- command lines ---------------------------------------------------------------------


def _command_lines() -> list[tuple[str, str]]:
    """(where, one logical command line) from the shell-like blocks and inline code (its
    ``where`` is the file name alone, a block's is ``file:line``)."""
    out = []
    for b in BLOCKS:
        if b.lang not in SHELL_LANGS:
            continue
        lines: list[str] = []
        for raw in b.code.splitlines():
            if b.lang == "console":
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
            if lines and (lines[-1].endswith("\\") or (b.lang == "text" and raw[:1] == " ")):
                lines[-1] = lines[-1].rstrip("\\") + " " + raw.strip()
            else:
                lines.append(raw)
        out += [(b.id, ln) for ln in lines]
    fence_free = {p: FENCE.sub("", p.read_text()) for p in FILES}
    for path, text in fence_free.items():
        for span in re.findall(r"`([^`]+)`", text):
            out.append((str(path.relative_to(ROOT)), " ".join(span.split())))
    return out


def _strip_comment(line: str) -> str:
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0]


def _simple_commands(line: str) -> list[list[str]]:
    parts = re.split(r"\|\||&&|[|;&()]|\$\(", _strip_comment(line))
    return [p.split() for p in parts if p.split()]


def _flags(words: list[str]) -> list[str]:
    found = []
    for w in words:
        for m in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*)", w.strip("[]{}\"'")):
            found.append(m.group(1))
    return found


def _all_options(parser: argparse.ArgumentParser) -> set[str]:
    opts = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                opts |= _all_options(sub)
    return opts


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+):", text, re.MULTILINE))


def _flower_source() -> str:
    import flwr

    base = Path(flwr.__file__).parent
    return "\n".join(p.read_text(errors="replace") for p in base.rglob("*.py"))


COMMANDS = _command_lines()


def _uses(prog: str, *, inline: bool = True) -> list[tuple[str, list[str]]]:
    out = []
    for where, line in COMMANDS:
        if not inline and ":" not in where:
            continue
        for words in _simple_commands(line):
            words = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # env prefix
            if words and words[0] in ("nice", "exec", "time"):
                words = words[1:]
            if words and Path(words[0]).name == prog:
                out.append((where, words))
    return out


def test_fedspectral_commands_and_flags_exist():
    from fedspectral.cli import COMMANDS as CLI
    from fedspectral.cli import command_parser

    names = {c[0] for c in CLI}
    uses = _uses("fedspectral")
    python_cli = [
        (w, ["fedspectral", *ws[3:]])
        for w, ws in _uses("python")
        if ws[1:3] == ["-m", "fedspectral.cli"]
    ]
    uses += python_cli
    assert len(uses) > 30  # the README's synopsis and examples at least
    bad = []
    seen = set()
    for where, words in uses:
        if len(words) < 2 or words[1].startswith("-"):
            bad += [(where, f) for f in _flags(words[1:]) if f not in ("--help", "--version")]
            continue
        cmd = words[1]
        if not re.fullmatch(r"[a-z][a-z0-9-]*", cmd):  # prose: `fedspectral <command>: error`
            continue
        if cmd not in names:
            bad.append((where, f"fedspectral {cmd}"))
            continue
        opts = _all_options(command_parser(cmd)[0])
        for flag in _flags(words[2:]):
            if flag not in opts:
                bad.append((where, f"fedspectral {cmd} {flag}"))
        seen.add(cmd)
    assert not bad, bad
    assert {"train", "pca-plan", "export", "reproduce", "audit", "demo"} <= seen


def test_make_targets_exist():
    targets = _make_targets()
    uses = _uses("make")
    assert uses
    bad = [
        (w, ws[1])
        for w, ws in uses
        if len(ws) > 1 and ws[1] not in targets and not ws[1].isupper()  # `make TARGET`
    ]
    assert not bad, bad


def test_scripts_and_modules_exist_with_their_flags():
    bad = []
    checked = 0
    for where, words in _uses("python", inline=False):  # prose may name a removed module
        if len(words) < 2:
            continue
        if words[1] == "-m":
            mod = words[2] if len(words) > 2 else ""
            if not mod.startswith("fedspectral") or mod == "fedspectral.cli":
                continue
            rel = Path("src", *mod.split("."))
            path = ROOT / rel.with_suffix(".py")
            if not path.is_file():
                path = ROOT / rel / "__main__.py"
            args = words[3:]
        elif words[1].endswith(".py"):
            path, args = ROOT / words[1], words[2:]
        else:
            continue
        if not path.is_file():
            bad.append((where, str(path.relative_to(ROOT))))
            continue
        source = path.read_text()
        bad += [(where, f"{path.name} {f}") for f in _flags(args) if f'"{f}"' not in source]
        checked += 1
    assert checked >= 5
    assert not bad, bad


def test_flower_command_flags_exist():
    pytest.importorskip("flwr")
    source = _flower_source()
    bad = []
    uses = [u for prog in ("flwr", "flower-superlink", "flower-supernode") for u in _uses(prog)]
    assert len(uses) >= 5
    for where, words in uses:
        for flag in _flags(words[1:]):  # typer declares "--stream/--show" in one string
            if not re.search(rf'["/]{re.escape(flag)}["/]', source):
                bad.append((where, f"{words[0]} {flag}"))
    assert not bad, bad


def _console_sessions() -> list[tuple[str, list[str], list[str]]]:
    """(where, argv, the output lines shown) for each ``$ fedspectral ...`` of a console
    block."""
    out = []
    for b in BLOCKS:
        if b.lang != "console" or b.skip:
            continue
        for chunk in re.split(r"^\$ ", b.code, flags=re.MULTILINE)[1:]:
            cmd, *shown = chunk.splitlines()
            words = _strip_comment(cmd).split()
            if words and words[0] == "fedspectral":
                out.append((b.id, words[1:], [ln for ln in shown if ln.strip()]))
    return out


CONSOLE = _console_sessions()


@pytest.mark.parametrize("where,argv,shown", CONSOLE, ids=[c[0] for c in CONSOLE])
def test_console_block_prints_what_it_shows(where, argv, shown, tmp_path, monkeypatch, capsys):
    from fedspectral.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    missing = [ln for ln in shown if ln.rstrip() not in (p.rstrip() for p in printed)]
    assert not missing, (missing, printed)
