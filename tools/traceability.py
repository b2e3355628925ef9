"""Which vectors, tests and conformance checks cite which requirement IDs. The rule: every
requirement, whatever its level (MUST, SHOULD, MAY, ...), is cited at least once.

Sources of citations:
- vectors/**/*.json: the `requirements` list of every test of a suite file;
- tests/**/*.py: `@pytest.mark.covers("DHP-...")` markers (also `pytestmark = ...` and
  `pytest.param(..., marks=pytest.mark.covers(...))`);
- conformance/**/*.py: ID string literals passed to any call (`requires("DHP-...")`,
  `ctx.expect("DHP-...", ...)`, `Check(..., ["DHP-..."], ...)`, `fail(requirement="DHP-...")`),
  in a `"requirement(s)"` dict entry, or assigned to a name `requirement(s)` / `REQUIREMENTS`.
  Docstrings, comments and messages that merely mention an ID do not count.
Sources are read as text (JSON, Python AST): nothing is imported or run.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

ID_RE = re.compile(r"^DHP-[A-Z]+-[0-9]{3}$")
RESERVED_AREAS: tuple[str, ...] = ()  # areas of pages reserved for later revisions
KEYWORDS = {"requirement", "requirements", "requires"}
NAMES = {"requirement", "requirements", "REQUIREMENTS", "REQUIRES"}


@dataclass(frozen=True, order=True)
class Citation:
    rid: str
    kind: str  # "vector", "test" or "check"
    name: str  # vector id, pytest node id, or conformance path:function
    where: str  # file:line


def citations(root: Path) -> list[Citation]:
    """Every citation found under `root` (the repository), sorted."""
    found: list[Citation] = []
    for path in sorted((root / "vectors").rglob("*.json")):
        found += vector_citations(path, root)
    for path in sorted((root / "tests").rglob("*.py")):
        found += python_citations(path, root, kind="test")
    for path in sorted((root / "conformance").rglob("*.py")):
        found += python_citations(path, root, kind="check")
    return sorted(set(found))  # a literal inside nested calls is seen once per call


def vector_citations(path: Path, root: Path) -> list[Citation]:
    rel = path.relative_to(root).as_posix()
    try:
        suite = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{rel}: cannot read vector file: {exc}") from None
    tests = suite.get("tests") if isinstance(suite, dict) else None
    if not isinstance(tests, list):
        return []
    out = []
    for test in tests:
        if not isinstance(test, dict):
            continue
        for rid in test.get("requirements") or []:
            if isinstance(rid, str):
                out.append(Citation(rid, "vector", str(test.get("id", "?")), rel))
    return out


def python_citations(path: Path, root: Path, *, kind: str) -> list[Citation]:
    rel = path.relative_to(root).as_posix()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise ValueError(f"{rel}: cannot parse: {exc}") from None
    collector = _Collector(rel, kind)
    collector.visit(tree)
    return collector.found


class _Collector(ast.NodeVisitor):
    """Walks one module, remembering the enclosing class / function for naming citations."""

    def __init__(self, rel: str, kind: str):
        self.rel, self.kind = rel, kind
        self.scope: list[str] = []
        self.found: list[Citation] = []

    def _name(self) -> str:
        sep = "::" if self.kind == "test" else ":"
        return sep.join([self.rel, *self.scope]) if self.scope else self.rel

    def _add(self, node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                    and ID_RE.match(sub.value):
                self.found.append(Citation(sub.value, self.kind, self._name(),
                                           f"{self.rel}:{sub.lineno}"))

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)  # decorators included, so markers count for this test
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "covers" or self.kind == "check":
            for arg in node.args:
                self._add(arg)
        if self.kind == "check":
            for keyword in node.keywords:
                self._add(keyword.value)
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if self.kind == "check":
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in KEYWORDS:
                    self._add(value)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.kind == "check" and any(isinstance(t, ast.Name) and t.id in NAMES
                                        for t in node.targets):
            self._add(node.value)
        self.generic_visit(node)


def by_requirement(found: list[Citation]) -> dict[str, list[Citation]]:
    out: dict[str, list[Citation]] = {}
    for citation in found:
        out.setdefault(citation.rid, []).append(citation)
    return out


def checked(requirement: dict) -> bool:
    """Whether the traceability rule applies: to every level, outside reserved areas."""
    return requirement["id"].split("-")[1] not in RESERVED_AREAS


def uncovered(requirements: list[dict], found: list[Citation]) -> list[dict]:
    cited = {c.rid for c in found}
    return [r for r in requirements if checked(r) and r["id"] not in cited]


def unknown(requirements: list[dict], found: list[Citation]) -> list[Citation]:
    """Citations of IDs that the spec does not define. IDs of the reserved areas are let
    through: their pages come in a later revision, and the kit may cite them already."""
    known = {r["id"] for r in requirements}
    return [c for c in found if c.rid not in known and c.rid.split("-")[1] not in RESERVED_AREAS]
