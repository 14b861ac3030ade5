"""The house's rules, read from the code: no module imports in a circle (a lazy import inside a
function counts too), no file of the product over 400 lines, the core imports no layer above it,
and a target's package is reached only through the registry."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def _modules(base: Path, package: str) -> dict[str, Path]:
    """module name -> file, for every .py under base (package `package`)."""
    out = {}
    for path in base.rglob("*.py"):
        if "node_modules" in path.parts:
            continue
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts]) if package else ".".join(parts)] = path
    return out


def _imports(path: Path, known: dict[str, Path], package: str) -> set[str]:
    """The known modules a file imports, anywhere in it (a `from a.b import c` of a submodule c is
    c and a.b)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c`: the submodule a.b.c when c is one, and a.b itself (its face
            # runs first: an engine importing `from tideline.engines import x` imports the registry)
            names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names.append(node.module)
        for name in names:
            if not name.startswith(package):
                continue
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def _graph(base: Path, package: str) -> dict[str, set[str]]:
    known = _modules(base, package)
    graph = {}
    for name, path in known.items():
        graph[name] = _imports(path, known, package) - {name}
    return graph


def test_no_module_imports_in_a_circle():
    tideline = _graph(ROOT / "plugins" / "tideline", "tideline")
    services = _graph(ROOT / "stack" / "services", "services")
    assert _circles(tideline) == [] and _circles(services) == []


def test_no_file_of_the_product_is_over_400_lines():
    long = {}
    for top in ("plugins", "stack", "spark_jobs", "dags"):
        for path in (ROOT / top).rglob("*"):
            if path.suffix in (".py", ".js", ".sh") and "node_modules" not in path.parts and path.is_file():
                n = len(path.read_text().splitlines())
                if n > MAX_LINES:
                    long[str(path.relative_to(ROOT))] = n
    assert long == {}


def test_the_core_imports_nothing_above_it_and_only_the_registry_names_a_targets_package():
    graph = _graph(ROOT / "plugins" / "tideline", "tideline")
    for name, deps in graph.items():
        if name.startswith("tideline.core."):
            assert all(d.startswith("tideline.core") for d in deps), (name, deps)
        inside = [d for d in deps if d.startswith(("tideline.targets.postgres", "tideline.targets.iceberg"))]
        if not name.startswith("tideline.targets."):
            assert inside == [], f"{name} imports a target's package ({inside}): ask the registry (tideline.targets)"


# The library's layers, top to bottom (docs/architecture.md draws them): a module imports only
# its own layer or the ones below. Within a layer, packages import each other freely (no circle:
# the test above). A new package must be placed here, or this test names it.
LAYERS = (
    ("orchestration", {"airflow", "view"}),
    ("operations", {"ops"}),                       # status, doctor, lifecycle: they read everything below
    ("the work", {"stream", "verify"}),
    ("the load", {"load"}),                        # the stream starts from a load's position
    ("capture", {"capture"}),
    ("seams", {"engines", "targets", "entrypoints", "commands"}),
    ("services", {"state", "alerts", "kinds", "pipes", "postgres_sql", "kafka_offsets", "packaging", "launcher",
                  "spark_session", "spark_packages", "sqlfiles"}),
    ("pure core", {"core"}),
)
OUTSIDE = {"tideline", "__main__", "cli"}   # the package's face and the command line over it (`tideline`, `python -m tideline`)


def _layer_of(module: str) -> int | None:
    top = module.split(".")[1] if "." in module else module
    if top in OUTSIDE:
        return None
    for i, (_name, tops) in enumerate(LAYERS):
        if top in tops:
            return i
    raise AssertionError(f"{module}: its package {top!r} is in no layer of test_architecture.LAYERS")


def test_each_layer_imports_only_itself_and_the_layers_below():
    graph = _graph(ROOT / "plugins" / "tideline", "tideline")
    upward = []
    for name, deps in sorted(graph.items()):
        mine = _layer_of(name)
        for dep in sorted(deps):
            theirs = _layer_of(dep)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{name} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]})")
    assert upward == [], upward


def test_only_the_registries_name_a_source_or_target_package():
    graph = _graph(ROOT / "plugins" / "tideline", "tideline")
    kinds = ("tideline.engines.postgres", "tideline.engines.mariadb", "tideline.targets.postgres",
             "tideline.targets.iceberg")
    for name, deps in graph.items():
        inside = [d for d in deps if d.startswith(kinds) and not name.startswith(".".join(d.split(".")[:3]))]
        assert inside == [], f"{name} imports a source's or target's package ({inside}): ask the registry"


def test_no_sql_on_the_state_schema_outside_the_state_room():
    """One way into the state: tideline.state (records, chunks, staging, ledger). A query on
    `tideline.*` written anywhere else is a second door, which the state's own database (the lake
    work: state in a database of its own) would have to find and move."""
    import re
    query = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE|to_regclass\(')\s+'?tideline\.", re.IGNORECASE)
    found = []
    for path in sorted((ROOT / "plugins" / "tideline").rglob("*.py")):
        if "state" in path.relative_to(ROOT / "plugins" / "tideline").parts[:1]:
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)   # docstrings may name the state's tables
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and query.search(node.value):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found


def test_the_state_is_reached_by_one_door():
    """A connection to the state is made in the state room only: callers with a pipeline ask
    `state.of_pipeline(cfg, resolve)` (where a pipeline's state lives is said there once), a target
    its StateDatabase. Before: state.connect(...) at 17 sites straight to the target's database."""
    found = []
    for path in sorted((ROOT / "plugins" / "tideline").rglob("*.py")):
        if "state" in path.relative_to(ROOT / "plugins" / "tideline").parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "connect" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "state":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], found


def test_the_state_schemas_sql_files_are_run_by_the_state_room_only():
    """A .sql file that reads or writes `tideline.*` lives in sql/state/ and is loaded by
    tideline.state alone (the other half of test_no_sql_on_the_state_schema_outside_the_state_room)."""
    import re
    query = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+tideline\.", re.IGNORECASE)
    on_state = {str(p.relative_to(ROOT / "sql").with_suffix("")) for p in (ROOT / "sql").rglob("*.sql")
                if query.search("\n".join(l for l in p.read_text().splitlines() if not l.lstrip().startswith("--")))}
    assert on_state and all(name.startswith("state/") for name in on_state), sorted(on_state)
    found = []
    for path in sorted((ROOT / "plugins" / "tideline").rglob("*.py")):
        rel = path.relative_to(ROOT / "plugins" / "tideline")
        if rel.parts[0] in ("state",) or rel.name == "sqlfiles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "load" and node.args \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in on_state:
                found.append(f"{rel}:{node.lineno} loads {node.args[0].value}")
    assert found == [], found


def test_the_stream_and_the_operations_do_not_depend_on_each_other():
    graph = _graph(ROOT / "plugins" / "tideline", "tideline")
    crossing = [f"{name} imports {dep}" for name, deps in sorted(graph.items()) for dep in sorted(deps)
                if {(name.split(".") + [""])[1], (dep.split(".") + [""])[1]} == {"stream", "ops"}]
    assert crossing == [], crossing
