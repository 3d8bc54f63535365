"""Reading what a user hands in (bottom layer, no project imports): input files, YAML text,
and output paths.

One mechanism per rule, used by every command:

* :func:`check_input_file` -- a file given to read is a *regular* file; a directory, a
  device (``/dev/zero``), a FIFO or a socket is named as such (never "not found", never
  read forever), and a missing one is "does not exist".
* :func:`load_yaml` -- YAML with unique keys (``rounds:`` twice is an error naming both
  lines, not "the last one wins") and bounded aliases (at most :data:`MAX_YAML_ALIASES`
  aliases and :data:`MAX_YAML_NODES` nodes once they are expanded: a few hundred bytes
  of nested aliases cannot expand to gigabytes), every error one short line naming the
  source and the line.
* :func:`check_output_path` -- an output path whose folders resolve: a dangling symlink
  or a symlink loop anywhere on it is refused before any work.
* :func:`check_output_file` -- the one rule for a file a command writes: a non-empty path
  whose folders resolve, not a dangling symlink, not a folder or a device, writable, and
  never one of the command's own inputs (``export RUN --out RUN/checkpoint.pt``); every
  writer calls it before any work, and writes through :mod:`fedspectral.atomic`.
* :func:`check_run_name` -- a run name is a name (printable, no ``/``, ``\\``, ``.``,
  ``..``), so ``results/<name>`` stays inside ``results/``.
* :func:`short` -- a value shown in an error message, cut to a readable length.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_YAML_ALIASES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "check_input_file",
    "check_output_file",
    "check_output_folder",
    "check_output_path",
    "check_run_name",
    "file_kind",
    "key_lines",
    "load_yaml",
    "read_yaml_file",
    "short",
]

#: most aliases (``*name``) a YAML document may hold (a config uses a handful at most)
MAX_YAML_ALIASES = 100
#: most nodes a YAML document may have once its aliases are expanded (a full config has
#: about 100; this bounds what any later step -- a deep copy, a JSON dump, an error
#: message -- can be made to expand)
MAX_YAML_NODES = 10_000
#: largest YAML file read (a full config is about 2 KB)
MAX_YAML_BYTES = 1 << 20


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error message stays one line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (``"a directory"``, ``"a FIFO"``, ...)."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def check_input_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it is a readable regular file (symlinks
    followed); else ``ValueError`` ``"<what> '<path>' is a directory, not a file"`` (or a
    device, a FIFO, a socket, a dangling symlink, a symlink loop, does not exist, cannot
    be read)."""
    text = os.fspath(path)
    if isinstance(text, str) and "\0" in text:
        raise ValueError(f"{what} {short(text)} contains a NUL character")
    p = Path(text)
    try:
        st = p.stat()
    except FileNotFoundError:
        if p.is_symlink():
            raise ValueError(
                f"{what} {str(p)!r} is a dangling symlink (to {os.readlink(p)!r})"
            ) from None
        raise ValueError(f"{what} {str(p)!r} does not exist") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{what} {str(p)!r} is a symlink loop") from None
        raise ValueError(f"{what} {str(p)!r} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {str(p)!r} is {file_kind(st.st_mode)}, not a regular file")
    if not os.access(p, os.R_OK):
        raise ValueError(f"{what} {str(p)!r} is not readable by this user")
    return p


def check_nonempty_path(path: str | os.PathLike, what: str) -> None:
    """``path`` is not empty or blank (``ValueError`` naming ``what``): an empty output path
    would silently mean the current folder."""
    if os.fspath(path).strip() == "":
        raise ValueError(f"{what} must be a non-empty path, got ''")


def check_output_path(path: str | os.PathLike, what: str) -> Path:
    """``path`` if each of its existing components resolves: a dangling symlink or a
    symlink loop on the way is a ``ValueError`` naming the component (before any work:
    otherwise the first write, after the work, would fail)."""
    text = os.fspath(path)
    if isinstance(text, str) and "\0" in text:
        raise ValueError(f"{what} {short(text)} contains a NUL character")
    p = Path(text)
    probe = Path(p.anchor) if p.is_absolute() else Path()
    for part in p.parts[len(p.anchor and [p.anchor]) :]:
        probe = probe / part
        try:
            os.stat(probe)
        except FileNotFoundError:
            if os.path.islink(probe):
                raise ValueError(
                    f"{what} {text!r}: {str(probe)!r} is a dangling symlink (to "
                    f"{os.readlink(probe)!r})"
                ) from None
            return p  # the rest does not exist yet: it will be created
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ValueError(f"{what} {text!r}: {str(probe)!r} is a symlink loop") from None
            if exc.errno == errno.ENOTDIR:
                raise ValueError(
                    f"{what} {text!r}: a component above {str(probe)!r} is a file, not a folder"
                ) from None
            raise ValueError(f"{what} {text!r}: {str(probe)!r}: {exc.strerror}") from None
    return p


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_output_file(
    path: str | os.PathLike,
    what: str,
    protected: Any = (),
    protected_what: str = "an input of this command",
) -> Path:
    """``path`` as a :class:`~pathlib.Path` if a command may write a file there; else
    ``ValueError`` naming ``what`` and the path, before any work:

    * empty or blank, a NUL character, a dangling symlink or a symlink loop on the way,
      a file where a folder is needed (:func:`check_output_path`);
    * the path itself a dangling symlink (the write would replace the link, not create
      its target), a folder, a device, a FIFO or a socket;
    * an existing file that is not writable, or a nearest existing folder that is not;
    * the same file as one of ``protected`` (paths the command reads or owns: a run's
      ``checkpoint.pt``, ``config.yaml``, ``results.json``), or, when ``protected``
      holds a folder, an existing file inside it -- said as ``protected_what``.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or text.strip() == "":
        raise ValueError(f"{what} must name a file, got {short(text)}")
    p = check_output_path(text, what)
    if os.path.islink(p) and not os.path.exists(p):
        raise ValueError(
            f"{what} {text!r} is a dangling symlink (to {os.readlink(p)!r}); give the "
            f"path of a file"
        )
    if p.exists():
        kind = file_kind(p.stat().st_mode)
        if kind != "a regular file":
            raise ValueError(f"{what} {text!r} is {kind}; give the path of a file")
        for q in protected:
            q = Path(q)
            inside = q.is_dir() and _same_file(p.resolve().parent, q)
            if inside or _same_file(p, q):
                raise ValueError(
                    f"{what} {text!r} is {protected_what} ({str(q)!r}); writing there "
                    f"would destroy it: give another path"
                )
        if not os.access(p, os.W_OK):
            raise ValueError(f"{what} {text!r} is read-only for this user")
    _check_writable_ancestor(p.parent, what, text)
    return p


def _check_writable_ancestor(path: Path, what: str, text: str) -> None:
    """The nearest existing folder on the way to ``path`` (itself included) is a folder
    this user may write into, else ``ValueError`` naming ``what`` and the path."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{what} {text!r}: {str(probe)!r} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {text!r}: the folder {str(probe)!r} is not writable")


def check_output_folder(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a :class:`~pathlib.Path` if a command may write files into it: a
    folder, or one it can create; the nearest existing folder on the way writable (a
    read-only folder or file system is refused before any work, not after it).  Else
    ``ValueError`` naming ``what`` and the path."""
    text = os.fspath(path)
    if not isinstance(text, str) or text.strip() == "":
        raise ValueError(f"{what} must name a folder, got {short(text)}")
    p = check_output_path(text, what)
    if p.exists() and not p.is_dir():
        raise ValueError(f"{what} {text!r} exists and is not a folder")
    _check_writable_ancestor(p, what, text)
    return p


# ----------------------------------------------------------------------------- YAML
class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with unique mapping keys and bounded aliases."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise _LimitError(f"more than {MAX_YAML_ALIASES} aliases (line {mark.line + 1})")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # a merge (<<) may be overridden: that is its purpose
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                    seen.setdefault(key, line)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first is not None:
                    raise _LimitError(
                        f"duplicate key {short(key)} at line {line} (first at line {first})"
                    )
        return super().construct_mapping(node, deep=deep)


class _LimitError(yaml.YAMLError):
    """A YAML document this loader refuses (duplicate key, too many aliases or nodes)."""


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Nodes of ``node`` with every alias expanded (memoised on shared nodes)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = MAX_YAML_NODES + 1  # a recursive alias counts as too large
    if isinstance(node, yaml.MappingNode):
        n = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_expanded_size(v, memo) for v in node.value)
    else:
        n = 1
    memo[key] = min(n, MAX_YAML_NODES + 1)
    return memo[key]


def _problem(exc: yaml.YAMLError) -> str:
    """One line: the problem and its line and column (1-based)."""
    if isinstance(exc, _LimitError):
        return str(exc)
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    hint = (
        " (tabs are not allowed for indentation in YAML)"
        if "\t" in str(problem) or "tab" in str(problem)
        else ""
    )
    text = f"{problem}{where}{hint}"
    return text if len(text) <= 300 else text[:297] + "..."


def load_yaml(text: str, source: str) -> Any:
    """The value of the YAML document ``text`` (PyYAML's safe types); ``ValueError``
    ``"<source> is not valid YAML: <problem> at line L, column C"`` on a syntax error, a
    duplicate key, more than :data:`MAX_YAML_ALIASES` aliases or more than
    :data:`MAX_YAML_NODES` expanded nodes."""
    if "\0" in text:
        raise ValueError(
            f"{source} contains a NUL character (\\x00 at position {text.index(chr(0))})"
        )
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source} is not valid YAML: {_problem(exc)}") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}) > MAX_YAML_NODES:
            raise _LimitError(f"its aliases expand to more than {MAX_YAML_NODES} nodes")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source} is not valid YAML: {_problem(exc)}") from None
    except RecursionError:
        raise ValueError(f"{source} is not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def key_lines(text: str) -> dict[str, int]:
    """The 1-based line of each key of a YAML mapping document (``{"method": 4,
    "method.rounds": 5}``: top level and one level down), for messages that name the line
    of a bad value; ``{}`` when ``text`` is not such a document.  Call it on text
    :func:`load_yaml` accepted."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return out
    for k, v in node.value:
        if isinstance(k, yaml.ScalarNode):
            out.setdefault(k.value, k.start_mark.line + 1)
            if isinstance(v, yaml.MappingNode):
                for k2, _ in v.value:
                    if isinstance(k2, yaml.ScalarNode):
                        out.setdefault(f"{k.value}.{k2.value}", k2.start_mark.line + 1)
    return out


def read_yaml_file(path: str | os.PathLike, what: str, empty_hint: str = "") -> dict[str, Any]:
    """The mapping in the YAML file ``path``: ``ValueError`` ``"<what> '<path>' ..."`` when
    it is not a regular file (:func:`check_input_file`), larger than
    :data:`MAX_YAML_BYTES`, not UTF-8, not YAML (:func:`load_yaml`) or empty
    (``empty_hint`` says what to put there); ``TypeError`` when it is not a mapping."""
    p = check_input_file(path, what)
    with open(p, "rb") as fh:
        data = fh.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise ValueError(f"{what} {str(p)!r} is larger than {MAX_YAML_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{what} {str(p)!r} is not UTF-8 text (byte {exc.start}: "
            f"{exc.object[exc.start : exc.start + 1]!r})"
        ) from exc
    d = load_yaml(text, f"{what} {str(p)!r}")
    if d is None:
        raise ValueError(f"{what} {str(p)!r} is empty" + (f" ({empty_hint})" if empty_hint else ""))
    if not isinstance(d, dict):
        raise TypeError(
            f"{what} {str(p)!r} must hold a mapping of sections, got {type(d).__name__}"
        )
    return d


def check_run_name(name: Any) -> str:
    """``name`` if it is a run *name*: a non-empty string of printable characters that is
    not a path (no ``/`` or ``\\``, not ``.`` or ``..``), so that ``results/<name>`` stays
    inside ``results/``; else ``ValueError`` naming it."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"config key name must be a non-empty string, got {short(name)}")
    bad = next((c for c in name if not c.isprintable()), None)
    if bad is not None:
        raise ValueError(
            f"config key name={short(name)}: contains the control character "
            f"{bad!r} (a NUL or another unprintable character); a name is "
            f"printable text"
        )
    if "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(
            f"config key name={short(name)}: a run name is a name, not a path "
            f"(no '/', '\\', '.' or '..'); choose the folder with run.out or --out"
        )
    return name
