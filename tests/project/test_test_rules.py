"""The rule of tests/README.md, read from the tests' source with `ast` (nothing is imported): no
`or` that lets a failing case through, no `if` around an assertion.

What counts, in every `tests/**/*.py`:
- an `assert` whose condition is an `or` (`assert a or b`, `assert a and b or c`), or an `and`
  with an `or` among its parts (`assert a and (b or c)`): one alternative passing hides the other
  failing. An `or` deeper inside (a default value `x or ""`, a generator in `all(...)`, the
  expected value of a comparison) is not a way out of the assertion and is not reported;
- an `assert` anywhere inside an `if` or its `else` (also `elif`), at any depth, in a test, a
  fixture or a helper: the assertion then checks nothing on the other branch. Platform or
  installation conditions belong in `pytest.mark.skipif(..., reason=...)`, different expectations
  in the expected value (or a parametrization);
- an `assert` whose condition is a conditional expression (`assert x if c else True`): the same
  `if`, written inline.
There is no list of exceptions."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/, with every folder below it


def _has_or(node: ast.expr) -> bool:
    """An `or` at the top of an assertion's condition, or as one of the parts of a top-level `and`."""
    if isinstance(node, ast.BoolOp):
        return isinstance(node.op, ast.Or) or any(_has_or(v) for v in node.values)
    return False


def violations(source: str, name: str = "<source>") -> list[str]:
    """`name:line: what` for each assertion that breaks the rule, in line order."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, under_if: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Assert):
                if _has_or(child.test):
                    found.append((child.lineno, "`or` in the assertion: one alternative passing hides the other failing"))
                if isinstance(child.test, ast.IfExp):
                    found.append((child.lineno, "conditional expression as the assertion: an `if` written inline"))
                if under_if:
                    found.append((child.lineno, "assertion inside an `if`: the other branch checks nothing"))
            visit(child, under_if or isinstance(child, ast.If))

    visit(ast.parse(source, name), False)
    return [f"{name}:{line}: {what}" for line, what in sorted(found)]


def test_the_tests_keep_their_own_rule():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) >= 40  # every test module, conftest and helper, the snapshot builders too
    found = [v for path in files for v in violations(path.read_text(), str(path.relative_to(TESTS.parent)))]
    assert found == [], "\n" + "\n".join(found)


def test_the_scanner_reports_each_planted_break():
    planted = {
        "assert a or b\n": 1,
        "assert a and b or c\n": 1,
        "assert a and (b or c)\n": 1,
        "if x:\n    assert y\n": 1,
        "if x:\n    pass\nelse:\n    assert y\n": 1,
        "if x:\n    pass\nelif z:\n    assert y\n": 1,
        "def test_t():\n    for p in ps:\n        if p.ok:\n            with open(p) as f:\n                assert f.read()\n": 1,
        "assert x if c else True\n": 1,
        "if x:\n    assert a or b\n": 2,  # both faults, one line
    }
    got = {src: violations(src, "planted.py") for src in planted}
    assert {src: len(v) for src, v in got.items()} == planted, got
    assert got["if x:\n    assert y\n"] == ["planted.py:2: assertion inside an `if`: the other branch checks nothing"]
    assert got["assert a or b\n"] == ["planted.py:1: `or` in the assertion: one alternative passing hides the other failing"]


def test_the_scanner_leaves_sound_assertions_alone():
    sound = (
        "assert a and b\n"
        "assert not (a or b)\n"  # both must be false: nothing lets a failure through
        "assert (e.fix or '') == 'x'\n"  # a default value, then an exact comparison
        "assert profile(tier or 'base') == 'm3'\n"
        "assert code == (1 if status == 'fail' or name == 'x' else 0)\n"  # the expected value, computed exactly
        "if x:\n    y = 1\n"
        "def helper(v):\n    if v:\n        raise AssertionError(v)\n"
    )
    assert violations(sound) == []
