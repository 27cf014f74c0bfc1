"""The package's structure, read from the source (AST, nothing imported): public surfaces
between modules, the order of the stages, and no code in the package that only tests call."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = "benchmark_illusion"


@dataclass(frozen=True)
class Use:
    """One name of a package module that another module imports or reads as an attribute."""

    module: str  # the module that uses it
    target: str  # the module it comes from
    name: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    """Every module of the package by its dotted name."""
    return {
        module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
        for p in sorted((SRC / PACKAGE).rglob("*.py"))
    }


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module of `from ... import` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def uses(mods: dict[str, ast.Module], known: set[str]) -> list[Use]:
    """Every package name imported (`from m import name`, `import m`) or read as an attribute of
    an imported package module (`m.name`), by module. known: the package's modules."""
    out = []
    for mod, tree in mods.items():
        is_package = (SRC / Path(*mod.split("."))).is_dir()
        aliases: dict[str, str] = {}  # local name -> package module or object path
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = resolve(mod, is_package, node)
                if not target.startswith(PACKAGE):
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    aliases[alias.asname or alias.name] = full
                    if full in known:
                        out.append(Use(mod, full, "", node.lineno))
                    else:
                        out.append(Use(mod, target, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE):
                        out.append(Use(mod, alias.name, "", node.lineno))
                        local = alias.asname or alias.name.split(".")[0]
                        aliases[local] = alias.name if alias.asname else PACKAGE
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                path = [aliases[value.id], *reversed(chain[1:])]
                target = ".".join(path)
                if target in known:
                    out.append(Use(mod, target, node.attr, node.lineno))
    return out


def private_uses(found: list[Use]) -> list[str]:
    return [
        f"{u.module}:{u.line} uses {u.target}.{u.name}"
        for u in found
        if u.name.startswith("_") and not u.name.startswith("__") and u.target != u.module
    ]


def stage_violations(found: list[Use]) -> list[str]:
    """Imports against the order of the stages."""
    rules = {
        # the data stage builds items before any model runs: it may use the shared text and
        # language modules, never a later stage
        f"{PACKAGE}.data": ("evaluation", "compression", "metrics", "concepts"),
        # quantization shares compression/blockwise.py with pruning, not pruning itself
        f"{PACKAGE}.compression.quantization": ("compression.pruning",),
    }
    out = []
    for u in found:
        for scope, forbidden in rules.items():
            if u.module == scope or u.module.startswith(scope + "."):
                for f in forbidden:
                    banned = f"{PACKAGE}.{f}"
                    if u.target == banned or u.target.startswith(banned + "."):
                        out.append(f"{u.module}:{u.line} imports {u.target}")
    return out


# functions that only the tests call live in tests/, not in the package
TEST_ONLY = ("left_pad", "score_continuations")
# public functions of the package that nothing outside tests/ names, kept on purpose: the judge's
# token F1 beside exact_match and contains (the judge's documented metrics), and the schema's
# defaults that the config tests compare the dataclass defaults with
ONLY_TESTS_CALL = {"token_f1", "schema_defaults"}


def only_tests_call() -> list[str]:
    """Public top-level functions of the package that no code outside tests/ names (the
    package, the workflow and its scripts, the benchmarks)."""
    texts = [p.read_text(encoding="utf-8") for p in (SRC / PACKAGE).rglob("*.py")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").rglob("*.py")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "workflow").rglob("*.py")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "workflow").rglob("*.smk")]
    texts.append((ROOT / "Snakefile").read_text(encoding="utf-8"))
    out = []
    for mod, tree in modules().items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                word = re.compile(rf"\b{node.name}\b")
                if sum(len(word.findall(t)) for t in texts) <= 1:  # its own definition
                    out.append(f"{mod}.{node.name}")
    return out


def defined_in_src(names) -> list[str]:
    out = []
    for mod, tree in modules().items():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
                out.append(f"{mod}.{node.name}")
    return out


def test_no_module_uses_another_modules_private_names():
    """An underscore name is used only in the module that defines it (a helper another module
    needs gets a public name)."""
    mods = modules()
    assert private_uses(uses(mods, set(mods))) == []


def test_the_data_stage_imports_no_later_stage_and_quantization_no_pruning():
    mods = modules()
    assert stage_violations(uses(mods, set(mods))) == []


def test_no_function_in_the_package_is_only_for_tests():
    assert defined_in_src(TEST_ONLY) == []
    assert sorted(f for f in only_tests_call() if f.rsplit(".", 1)[1] not in ONLY_TESTS_CALL) == []
    for name in TEST_ONLY:
        assert re.search(
            rf"^def {name}\(", (ROOT / "tests" / "engine_helpers.py").read_text(), re.M
        )


def test_the_checks_see_a_violation():
    """Each check above fails on a module that breaks its rule."""
    known = set(modules())

    def one(mod: str, source: str) -> list[Use]:
        return uses({mod: ast.parse(source)}, known)

    bad = "from benchmark_illusion.evaluation.judge import _question_echo, judge\n"
    assert private_uses(one(f"{PACKAGE}.evaluation.candidates", bad)) == [
        f"{PACKAGE}.evaluation.candidates:1 uses {PACKAGE}.evaluation.judge._question_echo"
    ]
    attribute = "from benchmark_illusion.evaluation import judge\njudge._passage_copy([], [], 1)\n"
    assert private_uses(one(f"{PACKAGE}.evaluation.candidates", attribute)) == [
        f"{PACKAGE}.evaluation.candidates:2 uses {PACKAGE}.evaluation.judge._passage_copy"
    ]
    relative = "from .pruning.sparsegpt import sparsegpt_prune\n"
    assert stage_violations(one(f"{PACKAGE}.compression.quantization", relative)) == [
        f"{PACKAGE}.compression.quantization:1 imports {PACKAGE}.compression.pruning.sparsegpt"
    ]
    lazy = "def f():\n    from benchmark_illusion.evaluation import text\n"
    assert stage_violations(one(f"{PACKAGE}.data.spans", lazy)) == [
        f"{PACKAGE}.data.spans:2 imports {PACKAGE}.evaluation.text"
    ]


def step_calls(script: Path) -> set[str]:
    """The `<stage>.steps` functions a rule's script calls: imported by name from the module
    (`from x.steps import f`), or through the module (`from x import steps as s`, `s.f(...)`)."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    names, mods = {}, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if node.module.endswith(".steps"):
                    names[alias.asname or alias.name] = node.module
                elif alias.name == "steps":
                    mods[alias.asname or alias.name] = f"{node.module}.steps"
    out = set()
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Name) and f.id in names:
            out.add(f"{names[f.id]}.{f.id}")
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods:
            out.add(f"{mods[f.value.id]}.{f.attr}")
    return out


def test_every_rule_script_calls_the_steps_of_its_stage_and_every_stage_has_them():
    """A rule's script is a thin adapter: it calls a function of a `<stage>/steps.py` (and no
    package code that would be a step in hiding); each stage with rules keeps its file steps in
    that one module."""
    scripts = sorted((ROOT / "workflow/scripts").glob("*.py"))
    calls = {s.name: step_calls(s) for s in scripts}
    assert calls and all(calls.values()), {k: v for k, v in calls.items() if not v}
    stages = {c.split(".")[1] for called in calls.values() for c in called}
    assert stages == {"data", "models", "compression", "evaluation", "concepts", "metrics"}
    for stage in stages:
        assert (SRC / PACKAGE / stage / "steps.py").is_file(), stage
    assert not (SRC / PACKAGE / "pipeline.py").exists()  # no stage's steps outside its stage


def test_step_calls_see_a_script_without_a_step(tmp_path):
    bare = tmp_path / "bare.py"
    bare.write_text("from benchmark_illusion.metrics import aggregate\naggregate.connect('x')\n")
    assert step_calls(bare) == set()
    good = tmp_path / "good.py"
    good.write_text("from benchmark_illusion.metrics.steps import make_figures as m\nm(1, 2)\n")
    assert step_calls(good) == {"benchmark_illusion.metrics.steps.m"}
    via = tmp_path / "via.py"
    via.write_text("from benchmark_illusion.data import steps as d\nd.select_items_file(1)\n")
    assert step_calls(via) == {"benchmark_illusion.data.steps.select_items_file"}
