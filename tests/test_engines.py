"""Training engines: a library object whose one method runs the training or evaluation loop (pytorch-ignite).

Detection on small scripts written for these shapes (real libcst, nothing run);
the runtime against the real ``ignite`` (in-process, a recorder standing in for
``itt``); end to end, the sample that trains only through ignite, profiled with
the built-in collector.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from instrumenter.runtime import libraries
from tests.conftest import SAMPLES
from tests.itt_recorder import StandInItt
from tests.test_profile import autoitt
from transforms import detect, instrument_source
from transforms._parsing import parse_source

IGNITE_FACTORIES = textwrap.dedent(
    """\
    from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer

    trainer = create_supervised_trainer(model, optimizer, loss)
    evaluator = create_supervised_evaluator(model, metrics=metrics)


    @trainer.on(Events.EPOCH_COMPLETED)
    def validate(engine):
        evaluator.run(val_loader)


    trainer.run(train_loader, max_epochs=3)
    evaluator.run(val_loader)
    """)


def _regions(source: str, **overrides):
    return detect(parse_source(textwrap.dedent(source).encode(), "t.py"), **overrides)


def _roles(source: str, **overrides):
    return [(r.line, r.role, r.label) for r in _regions(source, **overrides).regions]


# -- detection ---------------------------------------------------------------------------------------------

def test_an_ignite_trainer_run_trains_and_an_evaluator_run_evaluates():
    assert _roles(IGNITE_FACTORIES) == [(9, "eval", "validate.evaluator"), (12, "train-call", "trainer"),
                                        (13, "eval", "evaluator@13")]


def test_the_reason_names_the_factory_that_made_the_engine():
    reasons = [r.reason for r in _regions(IGNITE_FACTORIES).regions]
    assert reasons[1] == ("trainer.run() trains inside pytorch-ignite: an engine made by "
                          "create_supervised_trainer() (line 3)")


def test_an_evaluation_in_an_event_handler_runs_inside_the_trainers_region():
    regions = _regions(IGNITE_FACTORIES).regions
    assert [(r.label, r.outermost) for r in regions] == [("validate.evaluator", False), ("trainer", True),
                                                         ("evaluator@13", True)]


def test_a_handler_added_with_add_event_handler_runs_inside_the_trainers_region():
    source = IGNITE_FACTORIES.replace("@trainer.on(Events.EPOCH_COMPLETED)\n", "").replace(
        "trainer.run(", "trainer.add_event_handler(Events.EPOCH_COMPLETED, validate)\ntrainer.run(")
    assert [r.outermost for r in _regions(source).regions] == [False, True, True]


ENGINE_OF_OWN_FUNCTIONS = """\
import torch
from ignite.engine import Engine


def train_step(engine, batch):
    optimizer.zero_grad()
    loss = criterion(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.item()


def eval_step(engine, batch):
    with torch.no_grad():
        return model(batch[0])


trainer = Engine(train_step)
evaluator = Engine(process_function=eval_step)
trainer.run(loader, max_epochs=2)
evaluator.run(loader)
"""


def test_an_engine_of_a_function_that_updates_parameters_trains():
    regions = _regions(ENGINE_OF_OWN_FUNCTIONS).regions
    assert [(r.line, r.role) for r in regions] == [(20, "train-call"), (21, "eval")]
    assert regions[0].reason.endswith("whose process function updates parameters: loss.backward()")
    assert "runs the model without updating it: model()" in regions[1].reason


def test_an_engine_whose_function_is_not_the_files_gets_a_note_naming_the_role_option():
    detection = _regions("from ignite.engine import Engine\nfrom steps import step\n\n"
                         "engine = Engine(step)\nengine.run(loader)\n")
    assert detection.regions == ()
    assert any("engine.run(): an engine made by Engine(step), but whether it trains or evaluates cannot be told"
               in note.message and "--role 5=train-call" in note.message for note in detection.notes)


def test_a_role_given_on_the_command_line_decides_for_an_engine():
    source = "from ignite.engine import Engine\nfrom steps import step\n\nengine = Engine(step)\nengine.run(loader)\n"
    assert _roles(source, role_overrides={5: "train-call"}) == [(5, "train-call", "engine")]


@pytest.mark.parametrize("source", [
    "import threading\n\nworker = threading.Thread(target=f)\nworker.run()\n",
    "import subprocess\n\nsubprocess.run(['ls'])\n",
    "from ignite.engine import Engine\n\nclass Trainer:\n    pass\n\ntrainer = Trainer()\ntrainer.run(loader)\n",
])
def test_run_of_anything_but_an_engine_the_script_made_is_not_an_engine_call(source):
    assert _roles(source) == []


def test_the_copy_tells_the_runtime_which_role_an_engine_run_has():
    copy = instrument_source(IGNITE_FACTORIES.encode(), "t.py").output.decode()
    assert 'with itt.library(trainer, "run", _autoitt_domain, "train"):' in copy
    assert 'with itt.library(evaluator, "run", _autoitt_domain, "eval"):' in copy


def test_an_engines_steps_are_step_labels():
    assert instrument_source(IGNITE_FACTORIES.encode(), "t.py").step_labels == (libraries.STEP,)


# -- the runtime, on the real ignite ---------------------------------------------------------------------------

@pytest.fixture
def ignite():
    return pytest.importorskip("ignite.engine")


def _engine(ignite, seen):
    def process(engine, batch):
        seen.append(("batch", batch))
        return batch
    return ignite.Engine(process)


def test_a_trainer_run_records_its_epochs_and_steps(ignite):
    itt, trainer = StandInItt(), _engine(ignite, [])
    with libraries.attach(itt, trainer, "run", None, "train"):
        trainer.run([1, 2], max_epochs=2)
    names = [name for kind, name in itt.calls if kind == "begin"]
    assert names == ["epoch", "step", "step", "epoch", "step", "step"]
    assert len([c for c in itt.calls if c[0] == "end"]) == len(names)


def test_an_evaluation_in_an_epoch_completed_handler_is_inside_the_epoch(ignite):
    itt, seen = StandInItt(), []
    trainer, evaluator = _engine(ignite, seen), _engine(ignite, seen)

    @trainer.on(ignite.Events.EPOCH_COMPLETED)
    def validate(engine):
        with libraries.attach(itt, evaluator, "run", None, "eval"):
            evaluator.run([7])

    with libraries.attach(itt, trainer, "run", None, "train"):
        trainer.run([1], max_epochs=1)
    assert itt.calls == [("begin", "epoch"), ("begin", "step"), ("end", None),
                         ("begin", "eval_loop"), ("begin", "eval"), ("end", None), ("end", None),
                         ("end", None)]


def test_the_users_handlers_keep_their_order_and_ours_are_removed_after_the_run(ignite):
    itt, order = StandInItt(), []
    trainer = _engine(ignite, [])
    trainer.add_event_handler(ignite.Events.ITERATION_STARTED, lambda: order.append("first"))
    trainer.add_event_handler(ignite.Events.ITERATION_STARTED, lambda: order.append(itt.calls[-1]))
    before = {event: list(handlers) for event, handlers in trainer._event_handlers.items()}
    with libraries.attach(itt, trainer, "run", None, "train"):
        trainer.run([1], max_epochs=1)
    assert order == ["first", ("begin", "step")]  # our step began before the user's handlers ran
    assert {event: list(handlers) for event, handlers in trainer._event_handlers.items() if handlers} == \
        {event: handlers for event, handlers in before.items() if handlers}


def test_an_exception_in_the_run_ends_every_task_and_removes_the_handlers(ignite):
    itt = StandInItt()

    def process(engine, batch):
        raise KeyError("stop")

    trainer = ignite.Engine(process)
    with pytest.raises(KeyError, match="stop"):
        with libraries.attach(itt, trainer, "run", None, "train"):
            trainer.run([1], max_epochs=1)
    assert sum(kind == "begin" for kind, _ in itt.calls) == sum(kind == "end" for kind, _ in itt.calls) == 2
    assert not any(trainer._event_handlers.get(e) for e in (ignite.Events.ITERATION_STARTED,
                                                           ignite.Events.EPOCH_STARTED))


def test_an_engine_run_without_a_role_stays_one_task_and_says_why(ignite, capsys):
    itt, trainer = StandInItt(), _engine(ignite, [])
    with libraries.attach(itt, trainer, "run", None):
        trainer.run([1], max_epochs=1)
    assert itt.calls == []
    assert "Engine.run(): whether it trains or evaluates was not given: the call is one task" in capsys.readouterr().err


# -- end to end --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ignite_profile(tmp_path_factory):
    pytest.importorskip("ignite")
    folder = tmp_path_factory.mktemp("ignite")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", str(folder / "out"),
                   str(SAMPLES / "ignite_train.py"), cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_a_script_that_trains_only_through_ignite_gets_a_step_per_iteration_and_an_eval_per_batch(ignite_profile):
    summary, _ = ignite_profile
    counts = {t["name"]: t["count"] for t in summary["tasks"] if t["domain"] == "autoitt.ignite_train"}
    # samples/ignite_train.py: 3 epochs of 256 / 16 batches; 64 / 16 validation batches after each and at the end
    assert counts == {"trainer": 1, "epoch": 3, "step": 48, "log_validation.evaluator": 3, "main.evaluator": 1,
                      "eval_loop": 4, "eval": 16}
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 48)]


@pytest.mark.slow
def test_a_script_that_trains_only_through_ignite_prints_what_it_prints_without_autoitt(ignite_profile, tmp_path):
    import subprocess
    import sys

    _, stderr = ignite_profile
    plain = subprocess.run([sys.executable, str(SAMPLES / "ignite_train.py")], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300)
    assert plain.returncode == 0
    assert plain.stdout and plain.stdout in stderr  # --json: the script's output goes to stderr


@pytest.mark.slow
def test_an_engines_steps_are_counted_by_a_collection_window(tmp_path):
    pytest.importorskip("ignite")
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", "--skip-steps", "5", "--steps", "10",
                   str(SAMPLES / "ignite_train.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(s["label"], s["count"]) for s in json.loads(done.stdout)["steps"]] == [("step", 10)]


def test_the_roles_the_copy_gives_are_those_the_runtime_knows():
    from transforms._markers import LIBRARY_ROLES

    assert set(LIBRARY_ROLES.values()) == set(libraries.ROLES)


def test_an_engine_that_refuses_a_handler_is_left_as_it_was_and_the_call_is_one_task(ignite, capsys):
    class Refusing(ignite.Engine):  # a class of its own: autoitt says a class's note once per process
        def add_event_handler(self, event, handler, *args, **kwargs):
            if len(sum(self._event_handlers.values(), [])) >= 2:
                raise AttributeError("laid out otherwise")
            return super().add_event_handler(event, handler, *args, **kwargs)

    itt, trainer = StandInItt(), Refusing(lambda engine, batch: batch)
    with libraries.attach(itt, trainer, "run", None, "train"):
        trainer.run([1], max_epochs=1)
    assert itt.calls == [] and not any(trainer._event_handlers.values())
    assert "Refusing.run(): no callback could be made (AttributeError: laid out otherwise)" in capsys.readouterr().err
