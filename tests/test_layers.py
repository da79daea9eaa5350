"""The import graph, built from the code itself: imports go one way, core <- strategies <- composition <- page <-
app.py <- the workshop beside them (bench/, evals/, training/), with no package or module cycle, in-function imports
counted; the page reaches the model only through the backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("longqa_core", "strategies", "longqa", "page", "bench", "evals", "training")
# package -> rank; the workshop (measurements, evaluations, training) may import the product, never the reverse
LAYERS = {"longqa_core": 0, "strategies": 1, "longqa": 2, "page": 3, "app": 4, "bench": 5, "evals": 5, "training": 5}
NAMES = {0: "core", 1: "strategies", 2: "composition", 3: "page", 4: "entry point", 5: "workshop"}
# The composition layer's rooms, bottom to top: the demo model (its weights and question form), the request path,
# the jobs built on it (serving, the bench: side by side, neither imports the other), the command line that starts
# any of them, and `python -m longqa` that starts the command line.
ROOMS = {"longqa.demo_model": 0, "longqa": 1, "longqa.serving": 2, "longqa.bench": 2, "longqa.cli": 3,
         "longqa.__main__": 4}


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the layers."""
    modules = {"app": ROOT / "app.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(path: Path, modules: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """(project module imported, line, whether at the top level) for every import in the file, wherever it sits
    (functions, classes, `if TYPE_CHECKING:` blocks included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(node) for node in tree.body}
    for node in tree.body:  # `try: import spaces` at the top of a module is still a top-level import
        if isinstance(node, (ast.If, ast.Try)):
            top_level |= {id(inner) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from package import module` imports the module; `from module import name` the module itself
            targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                found.append((target, node.lineno, id(node) in top_level))
    return found


def package_of(module: str) -> str:
    return module.split(".")[0]


def room_of(module: str) -> str:
    """The composition room a `longqa` module belongs to: the longest prefix named in ROOMS."""
    parts = module.split(".")
    return next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in ROOMS)


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: {target for target, _, _ in imports_of(path, modules) if target != name}
            for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


@pytest.mark.slow
def test_the_graph_sees_every_layer_and_in_function_imports(tmp_path):
    edges = graph()
    assert {package_of(m) for m in edges} == set(LAYERS)
    assert "longqa_core.answering" in edges["longqa.session"]
    assert "longqa.loader" in edges["longqa.session"] and "strategies.profiles" in edges["longqa.loader"]
    # The walker counts imports inside functions and under TYPE_CHECKING: a planted one is found.
    planted = "def f():\n    from strategies.profiles import PROFILES\nif TYPE_CHECKING:\n    import app\n"
    path = tmp_path / "planted.py"
    path.write_text(planted)
    assert {(t, top) for t, _, top in imports_of(path, project_modules())} == {("strategies.profiles", False),
                                                                                ("app", True)}


@pytest.mark.slow
def test_imports_go_one_way_core_strategies_composition_page_app():
    wrong = []
    modules = project_modules()
    for name, path in modules.items():
        rank = LAYERS[package_of(name)]
        for target, line, _ in imports_of(path, modules):
            if LAYERS[package_of(target)] > rank:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({NAMES[rank]}) imports {target} "
                             f"({NAMES[LAYERS[package_of(target)]]})")
    assert not wrong, "\n".join(wrong)


def test_composition_rooms_import_only_downward():
    """demo_model <- request path <- serving, bench (not each other) <- cli: each room imports only rooms below it
    or itself."""
    wrong = []
    modules = project_modules()
    for name, path in modules.items():
        if package_of(name) != "longqa":
            continue
        for target, line, _ in imports_of(path, modules):
            if package_of(target) != "longqa" or room_of(target) == room_of(name):
                continue
            if ROOMS[room_of(target)] >= ROOMS[room_of(name)]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({room_of(name)}) imports {target} "
                             f"({room_of(target)})")
    assert not wrong, "\n".join(wrong)


def test_every_composition_module_has_a_room_and_every_room_a_module():
    rooms = {room_of(name) for name in project_modules() if package_of(name) == "longqa"}
    assert rooms == set(ROOMS)
    assert room_of("longqa.serving.lane") == "longqa.serving" and room_of("longqa.session") == "longqa"


@pytest.mark.slow
def test_no_package_cycle_and_no_module_cycle():
    edges = graph()
    packages: dict[str, set[str]] = {}
    for source, targets in edges.items():
        packages.setdefault(package_of(source), set()).update(package_of(t) for t in targets
                                                              if package_of(t) != package_of(source))
    assert cycles(packages) == []
    assert cycles(edges) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# What the page may take from the core: the names it shows or checks (limits, reading modes, file types, the live
# gauge), the HTML readers' bounds its command line sets, the errors it turns into messages, and the OpenMP spin
# count it sets before anything loads torch (no module above the core can be imported that early). Requests go
# through the backend, never to the engine itself.
PAGE_CORE = {"longqa_core.documents", "longqa_core.errors", "longqa_core.files", "longqa_core.gpu_devices",
             "longqa_core.html_files", "longqa_core.limits", "longqa_core.openmp_wait", "longqa_core.reading"}


@pytest.mark.slow
def test_the_page_reaches_the_model_only_through_the_backend():
    edges = graph()
    page = set().union(*(targets for name, targets in edges.items() if package_of(name) in ("page", "app")))
    core = {target for target in page if package_of(target) == "longqa_core"}
    assert core <= PAGE_CORE, sorted(core - PAGE_CORE)
    assert {"longqa.session", "longqa.backend"} <= page
    assert edges["page.format"] == set()  # formatting knows nothing of ours


@pytest.mark.slow
def test_the_page_is_the_top_layer_and_app_py_only_its_entry_point():
    """Only the page's own modules and app.py import the page; app.py imports the page and errors, nothing else of
    ours; no other page file lies at the root."""
    edges = graph()
    importers = {name for name, targets in edges.items() if any(package_of(t) == "page" for t in targets)}
    assert {package_of(name) for name in importers} == {"page", "app"}
    assert {package_of(t) for t in edges["app"]} <= {"page", "longqa_core"}
    assert sorted(path.name for path in ROOT.glob("*.py")) == ["app.py"]
    assert len((ROOT / "app.py").read_text().splitlines()) <= 150


SOURCE_FILES = sorted({*project_modules().values(), *(ROOT / "scripts").glob("*.py")})


@pytest.mark.parametrize("path", SOURCE_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_source_file_outside_the_tests_is_over_600_lines(path):
    assert len(path.read_text().splitlines()) <= 600


def test_the_shipped_composition_package_stays_within_5000_lines():
    """`longqa/` holds what a user runs (serving, the CLI, the strategy benchmark); our own measurements live in the
    workshop (`bench/`, `evals/`). Past the bound, move or simplify before adding."""
    assert sum(len(path.read_text().splitlines()) for path in (ROOT / "longqa").rglob("*.py")) <= 5000


def test_no_module_re_exports_names_for_another_to_import():
    """An unused import of the project's own names (`# noqa: F401`) is kept only for someone else's sake: none."""
    ours = tuple(f"from {package}" for package in LAYERS)
    found = [f"{path.relative_to(ROOT)}:{number}" for path in project_modules().values()
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if "noqa: F401" in line and line.strip().startswith(ours)]
    assert not found, found


@pytest.mark.parametrize("package", [*PACKAGES, "app"])
def test_deferred_imports_are_only_heavy_optional_ones_and_say_so(package):
    """Imports sit at the top of files; one inside a function is a heavy optional dependency, and its comment says
    it is deferred."""
    paths = [ROOT / "app.py"] if package == "app" else sorted((ROOT / package).rglob("*.py"))
    unexplained = []
    for path in paths:
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        top_level = {id(node) for node in tree.body}
        for node in tree.body:
            if isinstance(node, (ast.If, ast.Try)):
                top_level |= {id(inner) for inner in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top_level:
                nearby = " ".join(lines[max(0, node.lineno - 3):node.lineno]).lower()
                names = [a.name for a in node.names]
                module = getattr(node, "module", None) or names[0]
                if package_of(module) in LAYERS or "deferred" not in nearby:
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not unexplained, "\n".join(unexplained)
