"""Fact expressions in profile values: "{perf_cores}", "{max(4, memory_gb // 2)}".

Arithmetic on named facts only, walked over Python's AST; nothing is ever passed to eval."""

from __future__ import annotations

import ast
import math
import operator
import re
from typing import Any

from envkit.profiles.schema import did_you_mean

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_UNOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {"min": min, "max": max, "round": round, "int": int, "ceil": math.ceil, "floor": math.floor}
_EXPR_RE = re.compile(r"\{([^{}]*)\}")


class ExprError(Exception):
    pass


def evaluate(expr: str, values: dict[str, Any]) -> int | float:
    """Arithmetic over named facts: + - * / // %, parentheses, numbers, min/max/round/int/ceil/floor.
    No attribute access, no power, no strings: nothing else parses."""
    if len(expr) > 200:
        raise ExprError("expression too long")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError:
        raise ExprError(f"cannot parse {{{expr}}}")

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ExprError(f"unknown fact {node.id!r}{did_you_mean(node.id, values)}; facts are {', '.join(sorted(values))}")
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = walk(node.left), walk(node.right)
            try:
                return _BINOPS[type(node.op)](left, right)
            except ZeroDivisionError:
                raise ExprError("division by zero")
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            return _UNOPS[type(node.op)](walk(node.operand))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords and node.args):
            return _FUNCS[node.func.id](*[walk(a) for a in node.args])
        raise ExprError(f"{{{expr}}}: only arithmetic on facts is allowed")

    result = walk(tree)
    if isinstance(result, float) and result.is_integer() and "/" not in expr.replace("//", ""):
        result = int(result)
    return result


def has_template(value: Any) -> bool:
    return isinstance(value, str) and bool(_EXPR_RE.search(value.replace("{{", "").replace("}}", "")))


def render_value(value: Any, values: dict[str, Any]) -> Any:
    """A value with {expr}: the number when the whole value is one expression, else the text."""
    if not isinstance(value, str):
        return value
    text = value.replace("{{", "\x00L").replace("}}", "\x00R")
    whole = _EXPR_RE.fullmatch(text.strip())
    if whole:
        return evaluate(whole.group(1), values)
    out = _EXPR_RE.sub(lambda m: fmt_number(evaluate(m.group(1), values)), text)
    return out.replace("\x00L", "{").replace("\x00R", "}")


def fmt_number(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def names_in(value: Any) -> set[str]:
    if not isinstance(value, str):
        return set()
    names: set[str] = set()
    for m in _EXPR_RE.finditer(value.replace("{{", "").replace("}}", "")):
        try:
            names |= {n.id for n in ast.walk(ast.parse(m.group(1).strip(), mode="eval")) if isinstance(n, ast.Name)}
        except SyntaxError:
            pass
    return names - set(_FUNCS)
