"""chaos.faults never imports chaos.experiment: the experiment schema is composed from the fault classes, so they
must load without it. What both need of JSON Schema is chaos.schemabits, which imports nothing of the toolkit
but chaos.common. Read from the source with tests/test_imports.py's graph, lazy imports included."""

from tests.test_imports import import_graph


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for importer, imported in sorted(graph.items()):
        for m in sorted(imported):
            if _under(importer, "chaos.faults") and _under(m, "chaos.experiment"):
                out.append(f"{importer} -> {m} (faults must not import experiment)")
            if importer == "chaos.schemabits" and m != "chaos.common":
                out.append(f"{importer} -> {m} (schemabits imports nothing of the toolkit but common)")
    return out


def test_faults_and_schemabits_keep_below_experiment():
    g = import_graph()
    assert "chaos.faults.base" in g and "chaos.schemabits" in g["chaos.experiment.schema"]  # it sees them
    assert layer_violations(g) == []


def test_the_check_finds_each_knot():
    graph = {"chaos.faults.x": {"chaos.experiment.schema", "chaos.schemabits"},
             "chaos.schemabits": {"chaos.common", "chaos.faults"}, "chaos.experiment.schema": {"chaos.faults"}}
    assert layer_violations(graph) == ["chaos.faults.x -> chaos.experiment.schema (faults must not import experiment)",
                                       "chaos.schemabits -> chaos.faults (schemabits imports nothing of the toolkit "
                                       "but common)"]
