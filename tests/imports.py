"""The project's import graph, read from the source (AST): every import statement counts, at module level or
inside a function, so a lazy import is a dependency like any other."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_file(name: str) -> Path | None:
    """core.paper.runs -> ROOT/core/paper/runs.py (a package -> its __init__.py); None outside the project."""
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_names(path: Path) -> set:
    """Dotted names `path` imports: `import a.b` -> a.b; `from a import b` -> a and a.b."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def project_imports(name: str) -> set:
    """The project modules (files) that module `name` imports."""
    own = module_file(name)
    return {n for n in imported_names(own) if module_file(n) not in (None, own)}


def modules_under(package: str) -> list:
    """The modules of one package folder: core -> core.paths, core.paper.runs, ... (subpackages not included)."""
    folder = ROOT.joinpath(*package.split("."))
    return sorted(f"{package}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__")


def graph(modules) -> dict:
    """{module: project modules it imports}, following imports out of `modules` to every module reached."""
    out, todo = {}, list(modules)
    while todo:
        m = todo.pop()
        if m not in out:
            out[m] = project_imports(m)
            todo += sorted(out[m])
    return out


def reachable(name: str) -> set:
    """`name` and every project module it imports, directly or through others."""
    return set(graph([name]))


def external_imports(name: str) -> set:
    """Top-level names of the non-project packages that `name` imports, directly or through project modules."""
    tops = {n.split(".")[0] for m in reachable(name) for n in imported_names(module_file(m))}
    return {t for t in tops if not module_file(t)}


def cycles(g: dict) -> list:
    """Each import cycle of graph `g` as a list of modules (empty when the graph is a DAG)."""
    found, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(g.get(m, ())):
            if state.get(n) == "open":
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    return found
