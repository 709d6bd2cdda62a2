"""Remove answers from a copy of a module's source: one implementation for the class edition and the grader.

A graded part is named by its key: ``module.function``, ``module.Class`` or ``module.Class.method``.
:func:`replace_parts` rewrites a module's source (with ``ast``) so that each named part is replaced by the
source given for it (a stand-in); everything else in the module is kept as it was. The class edition
(:mod:`course_lib.edition.build`) puts PyTorch-backed or stored-data stand-ins there; the grader's sandbox
copy (:mod:`course_lib.grading.sandbox.libcopy`) puts stand-ins that forward to the learner's implementation.

Example:
    >>> src = "def f(x):\\n    return x + 1\\n\\ndef g(x):\\n    return f(x)\\n"
    >>> print(replace_parts(src, {"f": "def f(x):\\n    raise RuntimeError('withheld')\\n"}))
    def f(x):
        raise RuntimeError('withheld')
    <BLANKLINE>
    def g(x):
        return f(x)
    <BLANKLINE>
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

__all__ = ["replace_parts", "decorate_parts"]

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _definition(source: str, name: str) -> ast.stmt:
    """The single function or class that ``source`` defines, renamed ``name``."""
    body = ast.parse(source).body
    defs = [node for node in body if isinstance(node, _DEFS)]
    if len(defs) != 1:
        raise ValueError(f"a stand-in must define exactly one function or class, got {len(defs)}")
    node = defs[0]
    node.name = name
    return node


def _replace_in(body: list[ast.stmt], wanted: Mapping[str, str], keep_decorators: bool,
                done: set[str], prefix: str = "") -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in body:
        if not isinstance(node, _DEFS):
            out.append(node)
            continue
        qualname = prefix + node.name
        if qualname in wanted:
            new = _definition(wanted[qualname], node.name)
            if keep_decorators and isinstance(new, (ast.FunctionDef, ast.AsyncFunctionDef)):
                new.decorator_list = node.decorator_list
            out.append(new)
            done.add(qualname)
        elif isinstance(node, ast.ClassDef) and any(w.startswith(qualname + ".") for w in wanted):
            node.body = _replace_in(node.body, wanted, keep_decorators, done, qualname + ".") or [ast.Pass()]
            out.append(node)
        else:
            out.append(node)
    return out


def replace_parts(source: str, replacements: Mapping[str, str], keep_decorators: bool = False) -> str:
    """``source`` with each part named in ``replacements`` (``"f"``, ``"Class"`` or ``"Class.method"``)
    replaced by the definition its value holds (renamed to the part's name).

    With ``keep_decorators`` a replaced function keeps the original's decorators (input checks attached
    with ``validated_by``, ``staticmethod``). Raises ``KeyError`` naming a part the source does not define,
    so that a renamed reference cannot silently stay in a copy.
    """
    tree = ast.parse(source)
    done: set[str] = set()
    tree.body = _replace_in(tree.body, replacements, keep_decorators, done)
    missing = sorted(set(replacements) - done)
    if missing:
        raise KeyError(f"replace_parts: the source defines no {', '.join(missing)}")
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _find(body: list[ast.stmt], qualname: str) -> ast.stmt | None:
    head, _, rest = qualname.partition(".")
    for node in body:
        if isinstance(node, _DEFS) and node.name == head:
            return node if not rest else _find(node.body, rest) if isinstance(node, ast.ClassDef) else None
    return None


def decorate_parts(source: str, decorators: Mapping[str, str], imports: Sequence[str] = ()) -> str:
    """``source`` with each part named in ``decorators`` (``"f"``, ``"Class"``, ``"Class.method"``) given the
    decorator its value spells (an expression, outermost), e.g. ``provided.standing_in('module.f')``, and the
    import statements ``imports`` that the decorators need (after the docstring and ``from __future__``
    imports). Raises ``KeyError`` naming a part the source does not define.

    Example:
        >>> print(decorate_parts("def f(x):\\n    return x\\n", {"f": "functools.cache"}, ["import functools"]))
        import functools
        <BLANKLINE>
        @functools.cache
        def f(x):
            return x
        <BLANKLINE>
    """
    tree = ast.parse(source)
    for qualname, expression in decorators.items():
        node = _find(tree.body, qualname)
        if node is None:
            raise KeyError(f"decorate_parts: the source defines no {qualname}")
        node.decorator_list.insert(0, ast.parse(expression, mode="eval").body)
    head = 0
    while head < len(tree.body) and (_is_docstring(tree.body[head]) or (
            isinstance(tree.body[head], ast.ImportFrom) and tree.body[head].module == "__future__")):
        head += 1
    tree.body[head:head] = [statement for text in imports for statement in ast.parse(text).body]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
