"""Habits that keep the code easy to change, read from the source with `ast` and `tokenize`
(nothing is imported): no module in envkit/ over 500 lines, no function over 80, no import of
another module's underscored name (a shared helper gets a public name), and every `# noqa` names
its rule and says why (the lint itself is `ruff check envkit tests`, configured in pyproject.toml)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "envkit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Being restructured on another branch when these checks came in: the lead removes this set when
# that work is merged (each check below then holds for every file).
NOT_YET: set[str] = set()  # files allowed to break the rules while being restructured: none


def sources(*folders: Path) -> dict[str, str]:
    """repository-relative path -> text, for every .py file under the folders, NOT_YET left out."""
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in NOT_YET:
                out[rel] = path.read_text()
    return out


def long_modules(files: dict[str, str]) -> dict[str, int]:
    return {rel: n for rel, text in files.items() if (n := len(text.splitlines())) > MAX_MODULE_LINES}


def long_functions(files: dict[str, str]) -> dict[str, int]:
    """"path:line name" -> its length, from the `def` line to its last line (decorators, such as a
    command's click options, are not counted; a nested function counts in its own right too)."""
    out = {}
    for rel, text in files.items():
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out[f"{rel}:{node.lineno} {node.name}"] = n
    return out


def underscored_imports(files: dict[str, str]) -> list[str]:
    """`from envkit.x import _name` (and from the self-test's probe kit, which the probe files
    import as `envkit_probe_kit`, and relative imports): a name one module keeps to itself, used
    by another."""
    out = []
    for rel, text in files.items():
        for node in ast.walk(ast.parse(text, rel)):
            if not isinstance(node, ast.ImportFrom):
                continue
            top = (node.module or "").split(".")[0]
            if not node.level and top not in ("envkit", "envkit_probe_kit"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{rel}:{node.lineno} from {'.' * node.level}{node.module or ''} import {alias.name}")
    return out


NOQA = re.compile(r"#\s*noqa\b(?P<rest>.*)", re.I)
GOOD_NOQA = re.compile(r": [A-Z]+[0-9]+(, [A-Z]+[0-9]+)* - \S")


def vague_noqas(files: dict[str, str]) -> list[str]:
    """Comments that silence the linter without naming the rule and the reason
    ("noqa: F401 - re-exported as config's public face" is the shape)."""
    out = []
    for rel, text in files.items():
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            m = NOQA.search(tok.string) if tok.type == tokenize.COMMENT else None
            if m and not GOOD_NOQA.match(m.group("rest")):
                out.append(f"{rel}:{tok.start[0]} {tok.string}")
    return out


def test_no_module_in_envkit_is_over_500_lines():
    assert long_modules(sources(PACKAGE)) == {}


def test_no_function_in_envkit_is_over_80_lines():
    assert long_functions(sources(PACKAGE)) == {}


def test_no_module_in_envkit_imports_another_modules_underscored_name():
    assert underscored_imports(sources(PACKAGE)) == []


def test_every_noqa_names_its_rule_and_gives_a_reason():
    assert vague_noqas(sources(PACKAGE, ROOT / "tests")) == []


def test_the_checks_see_what_they_are_for():
    """Each check finds the thing it forbids in a made-up module (so an empty answer above means
    the code is clean, not that the check is blind)."""
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))
    made_up = {
        "envkit/made_up.py": (f"from envkit.profiles.expr import _render, evaluate\nfrom .files import _File\n"
                              f"import os  # noqa\nimport re  # noqa: F401\nimport sys  # noqa: F401 - kept for the doctest\n"
                              f"def short():\n    pass\n\ndef long():\n{body}\n" + "\n" * MAX_MODULE_LINES),
    }
    assert long_modules(made_up) == {"envkit/made_up.py": MAX_MODULE_LINES + MAX_FUNCTION_LINES + 9}
    assert long_functions(made_up) == {"envkit/made_up.py:9 long": MAX_FUNCTION_LINES + 1}
    assert underscored_imports(made_up) == ["envkit/made_up.py:1 from envkit.profiles.expr import _render",
                                            "envkit/made_up.py:2 from .files import _File"]
    assert vague_noqas(made_up) == ["envkit/made_up.py:3 # noqa", "envkit/made_up.py:4 # noqa: F401"]
