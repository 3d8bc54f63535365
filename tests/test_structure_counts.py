"""``scripts/structure_counts.py`` on a tiny generated package whose counts are known:
private names imported across packages and across modules of one package, a private
module used inside its package, function-local imports (re-imports, with a reason, under
``TYPE_CHECKING``, of other packages) and ``dict[str, Any]`` returns."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "structure_counts", ROOT / "scripts" / "structure_counts.py"
)
assert _spec is not None and _spec.loader is not None
sc = importlib.util.module_from_spec(_spec)
sys.modules["structure_counts"] = sc  # dataclasses look the module up
_spec.loader.exec_module(sc)

FILES = {
    "__init__.py": "__version__ = '0'\n",
    "a/__init__.py": "",
    "a/helpers.py": (
        "from typing import Any, Dict\nimport typing\n\n\n"
        "def _private() -> dict[str, Any]:\n    return {}\n\n\n"
        "def public() -> 'Dict[str, typing.Any]':\n    return {}\n\n\n"
        "def maybe() -> dict[str, Any] | None:\n    return None\n\n\n"
        "def other() -> dict[str, int]:\n    return {}\n"
    ),
    "a/_priv.py": "X = 1\n",
    # inside package a: one private name across modules, one private module inside
    "a/user.py": (
        "from pkg.a.helpers import _private\nfrom ._priv import X\nfrom pkg import __version__\n"
    ),
    "b/__init__.py": "",
    # package b: two private names across packages (a name, a module), local imports
    "b/user.py": (
        "from typing import TYPE_CHECKING\n"
        "from pkg.a.helpers import _private, public\n"
        "import pkg.a._priv\n"
        "import json\n\n"
        "if TYPE_CHECKING:\n    from pkg.a import user\n\n\n"
        "def g():\n    from pkg.a.helpers import other\n\n    return other\n\n\n"
        "def h():\n    # pkg.a.user imports this module\n    from pkg.a import user\n\n"
        "    return user\n\n\n"
        "def k():\n    import os\n    import json\n\n    return os, json\n\n\n"
        "class C:\n    def m(self):\n        from ..a.helpers import public  # again\n\n"
        "        return public\n\n"
        "    def n(self):\n        from pkg import a\n\n        return a\n"
    ),
}


def _package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_counts_of_a_planted_package(tmp_path):
    found = sc.count(_package(tmp_path))
    assert found.modules == 7
    assert found.lines == sum(len(t.splitlines()) for t in FILES.values())
    assert found.dict_any_returns == 2  # _private, public (not maybe, not other)
    assert sorted(found.items["private_across_packages"]) == [
        "pkg/b/user.py:2: pkg.a.helpers._private",
        "pkg/b/user.py:3: pkg.a._priv",
    ]
    assert found.private_across_packages == 2
    assert found.items["private_across_modules"] == ["pkg/a/user.py:1: pkg.a.helpers._private"]
    assert found.private_modules_inside == 1
    # g, h, m, n (not os/json in k); g and m re-import pkg.a.helpers; h and m have reasons
    assert found.local_imports == 4
    assert found.local_reimports == 2
    assert found.local_with_reason == 2
    tags = [row.split(": ", 1)[1].split("|")[0].strip() for row in found.items["local_imports"]]
    assert tags == ["re-import", "reason", "re-import reason", ""]


def test_json_output(tmp_path, capsys):
    assert sc.main([str(_package(tmp_path)), "--json"]) == 0
    numbers = json.loads(capsys.readouterr().out)
    assert numbers["private_across_packages"] == 2
    assert numbers["local_imports"] == 4
    assert "items" not in numbers


def test_the_default_package_is_this_repositorys():
    assert sc.DEFAULT == ROOT / "src" / "fedspectral"
    assert sc.count(sc.DEFAULT).modules > 100
