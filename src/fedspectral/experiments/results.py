"""The result writers, re-exported from :mod:`fedspectral.results` (where they now
live, below the federated engines that write through them)."""

from fedspectral.results import (
    round_row,
    save_figure,
    versions,
    write_csv,
    write_json,
    write_results,
    write_text,
)

__all__ = [
    "round_row",
    "save_figure",
    "versions",
    "write_csv",
    "write_json",
    "write_results",
    "write_text",
]
