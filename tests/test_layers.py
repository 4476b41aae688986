"""The package's layers: no import cycle, and each layer imports only the layers below it.

  flushless.progress, flushless.tools      what every layer uses (errors, logging, host tools)
  flushless.testbed                        builds the parts and boots them
  flushless.experiments, evaluation        runs workloads and stages; the hardware-time model
  flushless.report                         draws results/ into report/
  flushless.cli, flushless.plan           the command line, and the run it asks for

Every import counts, those inside functions too: a deferred import hides a cycle, it does not
remove it.
"""

import ast
import os

import pytest

from flushless.testbed.build import REPO

LAYERS = [("flushless.progress", "flushless.tools"), ("flushless.testbed",), ("flushless.experiments", "evaluation"),
          ("flushless.report",), ("flushless.cli", "flushless.plan", "flushless.__main__")]
# Modules above about 500 lines, each with the reason it stays whole.
LONG_MODULES = {
    "flushless.testbed.build": "one recipe per part, keyed by the hash of its inputs: the recipes share the "
                               "cache, the pins and the patch helpers, and each is read top to bottom",
    "flushless.testbed.debian": "the signed-index resolver: InRelease, Sources/Packages and their checks",
    "flushless.experiments.census": "one experiment: the census's boots, its rows and the table drawn from them",
    "flushless.experiments.study": "the reproduce run: its profiles, its stages in order and the ledger around them",
}


def modules(root, packages):
    """{module name: path} of every .py file under ROOT's PACKAGES."""
    out = {}
    for pkg in packages:
        for d, _, files in os.walk(os.path.join(root, pkg)):
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), root)[:-3].replace(os.sep, ".")
                    out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = os.path.join(d, f)
    return out


def imports(name, path, known):
    """The modules of KNOWN that module NAME (at PATH) imports, anywhere in it."""
    is_pkg = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[:len(base) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            found.add(mod)
            found.update("%s.%s" % (mod, a.name) for a in node.names)
    return {m for m in found if m in known and m != name}


def graph(root, packages):
    mods = modules(root, packages)
    return {name: imports(name, path, mods) for name, path in mods.items()}


def cycles(g):
    """The strongly connected components of G with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def layer(name):
    for i, names in enumerate(LAYERS):
        if any(name == n or name.startswith(n + ".") for n in names):
            return i
    return None


PACKAGES = ("flushless", "evaluation")


def test_no_import_cycle():
    assert cycles(graph(REPO, PACKAGES)) == []


def test_each_layer_imports_only_the_layers_below():
    g = graph(REPO, PACKAGES)
    upward = sorted((a, b) for a, bs in g.items() for b in bs
                    if layer(a) is not None and layer(b) is not None and layer(b) > layer(a))
    assert upward == []
    assert all(layer(m) is not None for m in g if m not in ("flushless",)), [m for m in g if layer(m) is None]


def test_long_modules_have_a_reason():
    long = {m for m, p in modules(REPO, PACKAGES).items() if sum(1 for _ in open(p)) > 550}
    # Every long module has its reason, and every reason a long module.
    assert long == set(LONG_MODULES), sorted(long ^ set(LONG_MODULES))


# The broken shapes, against the same code: a cycle through a deferred import, and a layer
# that imports upward.
@pytest.fixture
def cyclic(tmp_path):
    pkg = tmp_path / "flushless"
    for sub in ("", "experiments", "report"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "experiments" / "study.py").write_text("from . import designs\n")
    (pkg / "experiments" / "designs.py").write_text("def f():\n    from .study import write_experiment\n")
    (pkg / "experiments" / "ledger.py").write_text("from ..report import document\n")
    (pkg / "report" / "document.py").write_text("from ..experiments import ledger\n")
    return str(tmp_path)


def test_the_cycle_finder_finds_a_deferred_cycle(cyclic):
    assert cycles(graph(cyclic, ("flushless",))) == [
        ["flushless.experiments.designs", "flushless.experiments.study"],
        ["flushless.experiments.ledger", "flushless.report.document"]]


def test_an_upward_import_is_seen(cyclic):
    g = graph(cyclic, ("flushless",))
    assert "flushless.report.document" in g["flushless.experiments.ledger"]
    assert layer("flushless.report.document") > layer("flushless.experiments.ledger")
