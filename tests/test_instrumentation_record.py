"""``instrumentation.json``: the facts the rewrite decided, recorded once for every later stage to read."""

from __future__ import annotations

import json
import textwrap

from instrumenter.profile.instrumentation import Instrumentation
from instrumenter.cli.profiling import prepare
from instrumenter.sources.project import load_project
from transforms import Mode, RegionTasks

SCRIPT = textwrap.dedent(
    """\
    import torch

    def evaluate(model):
        for batch in range(2):
            model(torch.ones(4))

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for batch in range(3):
            optimizer.zero_grad()
            model(torch.ones(4)).sum().backward()
            optimizer.step()
        evaluate(model)
    """)

KERAS = textwrap.dedent(
    """\
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(tf.ones((8, 4)), tf.ones((8, 1)), epochs=1)
    """)


def _recorded(tmp_path, source: str) -> Instrumentation:
    script = tmp_path / "train.py"
    script.write_text(source)
    folder = tmp_path / "out"
    folder.mkdir()
    prepare(load_project(script, Mode(launched=True)), folder)
    return Instrumentation.load(folder)


def test_each_loop_regions_task_names_are_recorded_as_the_copy_marks_them(tmp_path):
    recorded = _recorded(tmp_path, SCRIPT)
    assert {(t.role, t.around, t.each) for t in recorded.tasks} == {
        ("epoch", "epoch_loop", "epoch"), ("step", "step_loop", "step"), ("eval", "eval_loop", "eval")}
    copy = (tmp_path / "out" / "train_itt.py").read_text()
    for task in recorded.tasks:
        assert f'"{task.around}"' in copy and f'"{task.each}"' in copy


def test_a_call_regions_one_task_is_recorded_with_no_iteration_task(tmp_path):
    recorded = _recorded(tmp_path, KERAS)
    (call,) = recorded.tasks
    assert (call.around, call.each) == (call.label, None)
    assert f'"{call.around}"' in (tmp_path / "out" / "train_itt.py").read_text()


def test_a_record_written_before_task_names_were_saved_names_them_as_that_rewrite_did(tmp_path):
    _recorded(tmp_path, SCRIPT)
    path = tmp_path / "out" / "instrumentation.json"
    data = json.loads(path.read_text())
    saved = [RegionTasks(**task) for task in data["files"][0].pop("tasks")]
    assert Instrumentation.from_json(data).tasks == saved


def test_collection_starts_paused_when_a_copy_resumes_it_and_not_when_nothing_is_marked(tmp_path):
    assert _recorded(tmp_path, SCRIPT).start_paused
    (tmp_path / "plain").mkdir()
    assert not _recorded(tmp_path / "plain", "print('no training here')\n").start_paused
