"""Where a reproduction's report goes, checked before any work: the report's files can
be written, ``--report-only`` has finished runs to report, and a finished report is never
replaced by a mostly pending one (:func:`check_report_folder`, :func:`report_folder`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedspectral.experiments.reproduce.plan import Plan
from fedspectral.inputs import check_output_file

__all__ = ["REPORT_FILES", "check_report_folder", "report_folder"]


#: the files :func:`write_report` writes in a plan's output folder
REPORT_FILES = (
    "REPORT.md",
    "summary.json",
    "tables.json",
    "table2.csv",
    "dp.csv",
    "convergence.png",
)


def _plan_words(scale: Any, tier: Any, overrides: Any, finished: Any, planned: Any) -> str:
    sets = " ".join(f"--set {o}" for o in overrides) if overrides else "no --set"
    return f"scale {scale}, tier {tier}, {sets}: {finished} of {planned} runs finished"


def _old_report(out: Path) -> dict[str, Any] | None:
    """The ``tables.json`` of the report already in ``out`` (``None``: none there);
    ``ValueError`` when the file is not one."""
    import json

    path = out / "tables.json"
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        old = None
    if not isinstance(old, dict) or not isinstance(old.get("runs_finished"), int):
        raise ValueError(  # noqa: TRY004 - a bad file, not a bad argument type
            f"{str(path)!r} is not the tables.json of a report; remove it or give another --out"
        )
    return old


def report_folder(plan: Plan, finished: int) -> tuple[Path, str | None]:
    """Where the report of ``plan`` with ``finished`` finished runs goes, and why when it
    is not ``plan.out``.  A report already in ``plan.out`` is replaced only by one of the
    same plan (scale, tier, ``--set``, number of runs) with at least as many finished
    runs, or by a complete report of another plan; otherwise the new report goes beside
    it, in ``plan.out / "report-<scale>-<tier>"``, so that a forgotten ``--quick``, an
    added ``--set`` or ``--tier full`` never replaces a finished report with a mostly
    pending one."""
    out = plan.report_out
    old = _old_report(out)
    if old is None:
        return out, None
    same = (
        old.get("scale") == plan.scale.name
        and old.get("tier", plan.tier) == plan.tier
        and list(old.get("overrides") or []) == list(plan.overrides)
        and old.get("runs_planned") == len(plan.runs)
    )
    complete = finished == len(plan.runs)
    if (same and finished >= old["runs_finished"]) or (not same and complete):
        return out, None
    theirs = _plan_words(
        old.get("scale"),
        old.get("tier", "?"),
        old.get("overrides"),
        old["runs_finished"],
        old.get("runs_planned"),
    )
    ours = _plan_words(plan.scale.name, plan.tier, plan.overrides, finished, len(plan.runs))
    why = (
        f"{str(out)!r} holds the report of {'this' if same else 'another'} plan ({theirs}); "
        f"this one ({ours}) would replace it with a {'smaller' if same else 'partial'} one"
    )
    import hashlib

    digest = hashlib.sha256("\n".join(plan.overrides).encode()).hexdigest()[:8]
    suffix = f"-set-{digest}" if plan.overrides else ""
    return out / f"report-{plan.scale.name}-{plan.tier}{suffix}", why


def check_report_folder(plan: Plan, finished: int, report_only: bool) -> None:
    """Before any work: the report's files can be written (each one
    :func:`fedspectral.inputs.check_output_file`: a ``summary.json`` that is a folder is
    named before ``REPORT.md`` is rewritten), and ``--report-only`` has finished runs to
    report and would not replace a report it must keep (:func:`report_folder`); else a
    ``ValueError`` saying what the folder holds and what to do."""
    for name in REPORT_FILES:
        check_output_file(plan.report_out / name, "the report file")
    ours = _plan_words(plan.scale.name, plan.tier, plan.overrides, finished, len(plan.runs))
    if report_only and finished == 0:
        raise ValueError(
            f"--report-only: {str(plan.out)!r} holds no finished run of this plan "
            f"({ours}); nothing to report (is it the folder of another plan: --quick, "
            f"--tier, --set, --out?)"
        )
    _, why = report_folder(plan, finished)
    if report_only and why is not None:
        raise ValueError(
            f"--report-only: {why}; the report is kept. Check --quick, --tier and --set, "
            f"or give another --out"
        )
