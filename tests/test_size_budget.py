"""The size budget of STYLE.md, counted per folder: the core (tensors, ops, autograd, graphs,
capture, passes, codegen, kernels and the top-level modules) within 20k lines, and each
folder within its own budget, so that a folder that grows shows up here and is either
trimmed or given a larger budget on purpose."""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dualgraph"
CORE_BUDGET = 20_000
# lines per folder of the package ("." is the top-level modules): today's size plus room
BUDGETS = {".": 1_900, "autograd": 700, "capture": 3_200, "codegen": 2_000, "graph": 1_600,
           "kernels": 2_900, "ops": 6_300,
           "passes": 2_900,   # the lowering rule table, each rule's printed before/after
           "export": 2_500, "nn": 4_600, "optim": 1_500, "utils": 500}
CORE = (".", "autograd", "capture", "codegen", "graph", "kernels", "ops", "passes")


def lines_per_folder() -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        folder = parts[0] if len(parts) > 1 else "."
        counts[folder] = counts.get(folder, 0) + len(path.read_text().splitlines())
    return counts


def test_every_folder_has_a_budget_and_keeps_to_it():
    counts = lines_per_folder()
    table = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    assert set(counts) == set(BUDGETS), f"a folder without a budget, or the reverse: {table}"
    over = {k: (v, BUDGETS[k]) for k, v in counts.items() if v > BUDGETS[k]}
    assert not over, f"over budget (lines, budget): {over}; all folders: {table}"


def test_the_core_stays_within_twenty_thousand_lines():
    counts = lines_per_folder()
    core = sum(counts[k] for k in CORE)
    assert core <= CORE_BUDGET, f"the core has {core} lines (budget {CORE_BUDGET})"
