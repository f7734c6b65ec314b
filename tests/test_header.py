"""The header goes where libcst's AddImportsVisitor would put the import, found without the codemod framework.

The rewrite no longer runs AddImportsVisitor (importing libcst.codemod and
libcst.matchers cost more than a whole small rewrite); these tests hold its
placement to the visitor's, on every shape of module head.
"""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from tests.conftest import SCRIPTS, script_id
from transforms._rewrite import _import_position

HEADS = {
    "nothing before": "x = 1\n",
    "docstring": '"""Doc."""\nx = 1\n',
    "docstring and imports": '"""Doc."""\nimport os\nfrom sys import argv\n\nx = 1\n',
    "shebang and comments": "#!/usr/bin/env python\n# a comment\n\nimport os\nx = 1\n",
    "future import": "from __future__ import annotations\nimport os\nx = 1\n",
    "strict flag": "__strict__ = True\nimport os\nx = 1\n",
    "concatenated docstring": '"a" "b"\nimport os\nx = 1\n',
    "bytes docstring": 'b"doc"\nimport os\nx = 1\n',
    "f-string first": 'f"{1}"\nimport os\nx = 1\n',
    "code before imports": "x = 1\nimport os\n",
    "two imports on one line": "import os; import sys\nx = 1\n",
    "import then assignment on one line": "import os; x = 1\nimport sys\n",
    "guarded import": "try:\n    import numpy\nexcept ImportError:\n    numpy = None\nimport os\n",
    "comments between imports": "import os\n\n# next\nimport sys\nx = 1\n",
    "only imports": "import os\nimport sys\n",
    "docstring then code": '"""Doc."""\nprint(1)\nimport os\n',
}


def _visitor_position(source: str) -> int:
    """Where AddImportsVisitor inserts a new import into ``source``."""
    module = cst.parse_module(source)
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "autoitt_probe", None, "probe")
    added = AddImportsVisitor(context).transform_module(module)
    empty = cst.Module([])
    return next(i for i, statement in enumerate(added.body)
                if empty.code_for_node(statement).strip() == "import autoitt_probe as probe")


@pytest.mark.parametrize("source", list(HEADS.values()), ids=list(HEADS))
def test_the_import_goes_where_add_imports_visitor_puts_it(source):
    assert _import_position(cst.parse_module(source).body) == _visitor_position(source)


@pytest.mark.parametrize("script", SCRIPTS, ids=script_id)
def test_on_every_sample_and_input_too(script):
    source = script.read_text()
    assert _import_position(cst.parse_module(source).body) == _visitor_position(source)
