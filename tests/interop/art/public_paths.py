"""Print, as JSON, every public module of the installed ART wheel and its public names.

Run by ART's own interpreter (it parses, never imports, so no GPU library is needed). A module
is public when no part of its dotted path starts with `_` (`art.test`, ART's own tests, is
left out). Its public names are its `__all__` when that is a literal; otherwise the names it
defines at top level (and, for a package, the names it imports from ART's own modules), less
those starting with `_`, type variables and module loggers.
"""

import ast
import importlib.metadata
import json
import sys
from pathlib import Path

TYPE_VARIABLES = {"TypeVar", "ParamSpec", "TypeVarTuple"}


def _called(value):
    if isinstance(value, ast.Call):
        func = value.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return ""


def public_names(path, is_package):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defined, imported, declared = set(), set(), None

    def visit(body):
        nonlocal declared
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if not isinstance(target, ast.Name):
                        continue
                    if target.id == "__all__":
                        try:
                            declared = list(ast.literal_eval(node.value))
                        except ValueError:
                            pass  # computed: fall back on what the module defines
                    elif _called(node.value) not in TYPE_VARIABLES | {"getLogger"}:
                        defined.add(target.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined.add(node.target.id)
            elif isinstance(node, getattr(ast, "TypeAlias", ())):
                defined.add(node.name.id)
            elif isinstance(node, ast.ImportFrom):
                if node.level or (node.module or "").split(".")[0] == "art":
                    imported.update(alias.asname or alias.name for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(node.orelse)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    if declared is not None:
        return sorted(set(declared))
    found = defined | (imported if is_package else set())
    return sorted(name for name in found if not name.startswith("_"))


def main():
    modules = {}
    for file in importlib.metadata.files("openpipe-art") or []:
        posix = file.as_posix()
        if not (posix.startswith("art/") and posix.endswith(".py")):
            continue
        parts = posix[: -len(".py")].split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        if any(part.startswith("_") for part in parts) or parts[:2] == ["art", "test"]:
            continue
        modules[".".join(parts)] = public_names(Path(file.locate()), is_package)
    version = importlib.metadata.version("openpipe-art")
    json.dump({"version": version, "modules": dict(sorted(modules.items()))}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
