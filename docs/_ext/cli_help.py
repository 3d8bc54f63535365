"""Sphinx directive ``.. fedspectral-cli::``: one section per command of ``fedspectral``,
its one-line help and its full ``--help`` text, rendered from the argparse parsers
themselves (:func:`fedspectral.cli.command_parser`), so the page cannot drift from the
code."""

from __future__ import annotations

import os

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class FedspectralCli(SphinxDirective):
    has_content = False

    def run(self) -> list[nodes.Node]:
        from fedspectral.cli import COMMANDS, build_parser, command_parser

        os.environ["COLUMNS"] = "78"  # argparse wraps help text to the terminal width
        lines = ["Usage", "-----", "", ".. code-block:: text", ""]
        lines += ["   " + ln for ln in build_parser().format_help().splitlines()]
        for name, _module, help_ in COMMANDS:
            parser, _ = command_parser(name)
            title = f"``fedspectral {name}``"
            lines += [
                "",
                title,
                "-" * len(title),
                "",
                help_.rstrip(".") + ".",
                "",
                ".. code-block:: text",
                "",
            ]
            lines += ["   " + ln for ln in parser.format_help().splitlines()]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="fedspectral.cli"), node)
        return node.children


def setup(app):
    app.add_directive("fedspectral-cli", FedspectralCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
