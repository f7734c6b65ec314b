"""The kind of file the user gave (``instrumenter.sources.kind``): a script and a notebook answer the same questions.

Every stage asks the entry's kind how to show a line, what runs and what its
copy is; these tests state that contract for both kinds, and that the place
``instrumentation.json`` gives back for a line is the one the file gave when
it was read.
"""

from __future__ import annotations

import dataclasses
import json

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from transforms import Mode, instrument, parse_source

from instrumenter.cli.profiling import _record
from instrumenter.profile.instrumentation import FileRecord
from instrumenter.sources.kind import Place
from instrumenter.sources.project import load_project

TRAINING = "for step in range(3):\n    print(step)\n"


def _notebook(tmp_path, *cells):
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=list(cells)), str(path))
    return path


def test_a_script_and_a_notebook_give_a_place_of_the_same_type(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\n" + TRAINING)
    notebook = _notebook(tmp_path, new_markdown_cell("# title"), new_code_cell("import os"), new_code_cell(TRAINING))

    script_place = load_project(script, Mode()).entry.place(2)
    notebook_place = load_project(notebook, Mode()).entry.place(2)

    assert type(script_place) is type(notebook_place) is Place


def test_a_script_line_is_shown_as_its_line():
    from instrumenter.sources.kind import Script

    place = Script(parse_source(b"import os\n" + TRAINING.encode(), "train.py")).place(2)

    assert (place, str(place)) == (Place(2), "line 2")


def test_a_notebook_line_is_shown_as_its_cell_and_the_line_in_it(tmp_path):
    cell = new_code_cell(TRAINING)
    cell.id = "train"
    notebook = _notebook(tmp_path, new_markdown_cell("# title"), new_code_cell("import os"), cell)

    place = load_project(notebook, Mode()).entry.place(3)  # the program's line 3: the training cell's line 2

    assert (place, str(place)) == (Place(2, 3, "train"), "cell 3 (id train), line 2")


def test_a_cell_without_an_id_is_shown_by_its_index_alone():
    assert str(Place(5, 3)) == "cell 3, line 5"


def test_instrumentation_json_gives_back_the_place_the_notebook_gave(tmp_path):
    cell = new_code_cell(TRAINING)
    cell.id = "train"
    notebook = _notebook(tmp_path, new_markdown_cell("# title"), new_code_cell("import os"), cell)
    entry = load_project(notebook, Mode()).entry
    saved = dataclasses.replace(_record(entry, None), cells=entry.kind.cell_starts())
    record = FileRecord.from_json(json.loads(json.dumps(saved.to_json())))

    assert [record.place(line) for line in (1, 2, 3)] == [entry.place(line) for line in (1, 2, 3)]


def test_a_script_runs_as_its_program_with_no_cells_beside_it():
    from instrumenter.sources.kind import Script

    source = parse_source(TRAINING.encode(), "train.py")
    kind = Script(source)
    line_map = instrument(source, Mode(), stem="train").line_map

    assert kind.runnable(b"code\n", line_map) == (b"code\n", line_map)
    assert (kind.program, kind.cell_starts(), kind.data) == (None, None, source.data)


def test_both_kinds_answer_every_question_of_the_file_kind_contract():
    from instrumenter.sources.kind import FileKind, Script
    from instrumenter.sources.notebook_copy import NotebookFile

    questions = {name for name in vars(FileKind) if not name.startswith("_")} | set(FileKind.__annotations__)

    assert questions == {"data", "notes", "program", "copy_suffix", "place", "note_line", "region_json", "runnable",
                         "cell_starts", "instrumented", "copy_bytes", "diff"}
    assert [(kind.__name__, name) for kind in (Script, NotebookFile) for name in sorted(questions)
            if not hasattr(kind, name)] == []
