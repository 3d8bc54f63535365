"""The figures, re-exported from :mod:`fedspectral.plots` (where they now live, next
to :mod:`fedspectral.results`, which draws ``convergence.png`` with them)."""

from fedspectral.plots import load_results, plot_convergence, summary_table

__all__ = ["load_results", "plot_convergence", "summary_table"]
