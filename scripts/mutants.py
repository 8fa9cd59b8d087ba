"""The mutants of one Python module: small changes to its AST, each named stably. Pure, no I/O.

A mutant is one of these changes, applied alone:

- ``compare``: ``==``/``!=``, ``<``/``<=``, ``>``/``>=``, ``is``/``is not``, ``in``/``not in``
  swapped (one operator of a comparison at a time);
- ``boolop``: ``and`` <-> ``or``;
- ``not``: a ``not`` removed; ``negate``: an ``if``/``while``/conditional expression's test
  negated (where it has no ``not`` to remove);
- ``binop``/``augassign``: ``+`` <-> ``-``, ``*`` -> ``/``, ``/`` and ``//`` -> ``*``,
  ``%`` -> ``//``;
- ``constant``: ``True`` <-> ``False``, a number plus one, a string wrapped in ``XX``;
- ``return``: ``return <value>`` -> ``return None``;
- ``remove``: an expression statement, assignment, ``raise``, ``break`` or ``continue`` replaced
  by ``pass``.

Never mutated (nothing there runs, or a change there cannot be observed by design): docstrings,
annotations, ``if TYPE_CHECKING:`` blocks, ``__all__``, f-strings, and string constants inside a
``raise`` (error texts; their tests match the parts that matter).

A mutant's id names where and what, without line numbers, so it stays the same while the code
around it moves: ``<enclosing def/class>: <kind>: <before> -> <after>``, plus ``#2``, ``#3``...
when the same change occurs more than once in one scope.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType

__all__ = ["Mutant", "mutants_of"]

_SWAP_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_SWAP_BINOP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_REMOVABLE = (
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Raise,
    ast.Break,
    ast.Continue,
)


@dataclass(frozen=True, slots=True)
class Mutant:
    """One change to a module, compiled and ready to run.

    Attributes:
        id: stable name (see the module docstring).
        line: the line of the changed node, for people (not part of the id).
        kind: the kind of change (``compare``, ``remove``, ...).
        code: the whole mutated module, compiled with the module's file name.
    """

    id: str
    line: int
    kind: str
    code: CodeType | None


# A mutation point: the index of a node in _walk's order, its kind, and a function that changes
# that node (in a fresh tree) and returns (before, after) texts.
_Apply = Callable[[ast.AST], tuple[str, str]]


def _walk(tree: ast.Module) -> Iterator[tuple[ast.AST, str, bool]]:
    """Every node that may be mutated, in a fixed order: (node, enclosing scope, in a raise)."""

    def visit(node: ast.AST, scope: str, in_raise: bool) -> Iterator[tuple[ast.AST, str, bool]]:
        yield node, scope, in_raise
        body_docstring = None
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                body_docstring = body[0]
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            scope = node.name if scope == "<module>" else f"{scope}.{node.name}"
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "type_comment"):
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if not isinstance(child, ast.AST) or child is body_docstring:
                    continue
                if _skipped(child):
                    continue
                yield from visit(child, scope, in_raise or isinstance(child, ast.Raise))

    yield from visit(tree, "<module>", False)


def _skipped(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr | ast.Import | ast.ImportFrom):
        return True
    if isinstance(node, ast.If) and ast.unparse(node.test) in (
        "TYPE_CHECKING",
        "typing.TYPE_CHECKING",
    ):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
    # A constant that is a statement of its own (a docstring after an attribute) does nothing.
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


_COMPLEMENTS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


def _points(tree: ast.Module) -> Iterator[tuple[int, str, _Apply]]:
    in_class_body = {
        id(stmt) for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for stmt in node.body
    }
    named: set[int] = set()  # constants mutated as keyword arguments, with their names
    for index, (node, _scope, in_raise) in enumerate(_walk(tree)):
        if id(node) in named:
            continue
        if (
            isinstance(node, ast.keyword)
            and isinstance(node.value, ast.Constant)
            and _mutable_constant(node.value.value, in_raise)
        ):
            named.add(id(node.value))
            yield index, "constant", _keyword_constant
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _SWAP_COMPARE:
                    yield index, "compare", _compare(i)
        elif isinstance(node, ast.BoolOp):
            yield index, "boolop", _boolop
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield index, "not", _drop_not
        elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
            yield index, "binop", _binop
        elif isinstance(node, ast.AugAssign) and type(node.op) in _SWAP_BINOP:
            yield index, "augassign", _binop
        elif isinstance(node, ast.Constant) and _mutable_constant(node.value, in_raise):
            yield index, "constant", _constant
        if isinstance(node, ast.If | ast.While | ast.IfExp) and not _negated_elsewhere(node.test):
            yield index, "negate", _negate
        if (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            yield index, "return", _return_none
        if (
            isinstance(node, _REMOVABLE)
            and id(node) not in in_class_body  # fields and class constants: not statements
            and not (isinstance(node, ast.AnnAssign) and node.value is None)
        ):
            yield index, "remove", _remove


def _negated_elsewhere(test: ast.expr) -> bool:
    """A test whose negation another mutant already is: ``not x`` (drop the ``not``) and a
    single ``==``, ``is``, ``in`` or their opposites (swap the operator)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], _COMPLEMENTS)
    )


def _mutable_constant(value: object, in_raise: bool) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and not in_raise


def _compare(i: int) -> _Apply:
    def apply(node: ast.AST) -> tuple[str, str]:
        assert isinstance(node, ast.Compare)
        before = ast.unparse(node)
        ops = list(node.ops)  # a new list: the original is restored with the node
        ops[i] = _SWAP_COMPARE[type(ops[i])]()
        node.ops = ops
        return before, ast.unparse(node)

    return apply


def _boolop(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.BoolOp)
    before = ast.unparse(node)
    node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    return before, ast.unparse(node)


def _drop_not(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.UnaryOp)
    before = ast.unparse(node)
    operand = node.operand
    node.__class__ = operand.__class__  # type: ignore[assignment]
    node.__dict__.clear()
    node.__dict__.update(operand.__dict__)
    return before, ast.unparse(node)


def _binop(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.BinOp | ast.AugAssign)
    before = ast.unparse(node)
    node.op = _SWAP_BINOP[type(node.op)]()
    return before, ast.unparse(node)


def _constant(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.Constant)
    before = repr(node.value)
    if isinstance(node.value, bool):
        node.value = not node.value
    elif isinstance(node.value, int | float):
        node.value = node.value + 1
    else:
        node.value = "XX" + str(node.value) + "XX"
    return before, repr(node.value)


def _keyword_constant(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.keyword) and isinstance(node.value, ast.Constant)
    before = ast.unparse(node)
    node.value = ast.copy_location(ast.Constant(value=node.value.value), node.value)
    _constant(node.value)
    return before, ast.unparse(node)


def _negate(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.If | ast.While | ast.IfExp)
    before = ast.unparse(node.test)
    node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    return before, ast.unparse(node.test)


def _return_none(node: ast.AST) -> tuple[str, str]:
    assert isinstance(node, ast.Return)
    before = ast.unparse(node)
    node.value = ast.Constant(value=None)
    return before, "return None"


def _remove(node: ast.AST) -> tuple[str, str]:
    before = ast.unparse(node).splitlines()[0]
    node.__class__ = ast.Pass
    node.__dict__.clear()
    node.__dict__.update(lineno=0, col_offset=0, end_lineno=0, end_col_offset=0)
    return before, "pass"


def _shorten(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def mutants_of(source: str, filename: str, *, compiled: bool = True) -> list[Mutant]:
    """Every mutant of the module ``source`` (compiled as ``filename``), in source order.

    Each change is made on one tree and undone after compiling it. With ``compiled=False`` the
    mutants carry no code (``--list``, and quicker).
    """
    tree = ast.parse(source, filename)
    walked = list(_walk(tree))
    points = list(_points(tree))
    seen: dict[str, int] = {}
    result = []
    for index, kind, apply in points:
        node, scope, _ = walked[index]
        line = getattr(node, "lineno", 0)
        saved = node.__class__, dict(node.__dict__)
        before, after = apply(node)
        ast.fix_missing_locations(node)
        if kind == "remove":  # a removed statement keeps its place for tracebacks
            node.lineno = node.end_lineno = line  # type: ignore[attr-defined]
        name = f"{scope}: {kind}: {_shorten(before)} -> {_shorten(after)}"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        valid = True
        code = None
        try:
            code = compile(tree, filename, "exec") if compiled else None
        except SyntaxError:  # e.g. `pass` where an expression was needed: not a mutant
            valid = False
        finally:
            node.__class__ = saved[0]
            node.__dict__.clear()
            node.__dict__.update(saved[1])
        if valid:
            result.append(Mutant(id=name, line=line, kind=kind, code=code))
    return result
