"""What counts as a training region, one idiom per test, and the loops JSON contract."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from click.testing import CliRunner

from instrumenter.cli import cli
from tests.conftest import INPUTS, SAMPLES
from transforms import detect, parse_source


def regions(code: str):
    source = parse_source(textwrap.dedent(code).encode(), "t.py")
    return [(r.line, r.role) for r in detect(source).regions]


def roles(code: str):
    return [role for _, role in regions(code)]


# -- step loops -------------------------------------------------------------------

def test_loss_backward_makes_a_step_loop():
    assert roles("""
        for x in data:
            loss = model(x)
            loss.backward()
    """) == ["step"]


def test_accelerator_backward_makes_a_step_loop():
    assert roles("""
        for batch in loader:
            accelerator.backward(loss_fn(model(batch)))
    """) == ["step"]


def test_grad_scaler_backward_makes_a_step_loop():
    assert roles("""
        for x in loader:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    """) == ["step"]


def test_step_on_a_name_bound_to_torch_optim_is_an_update():
    assert roles("""
        import torch.optim as optim
        trainer_state = optim.AdamW(params)
        for x in loader:
            trainer_state.step()
    """) == ["step"]


def test_step_on_a_name_that_names_an_optimizer_is_an_update():
    assert roles("""
        for x in loader:
            opt_g.step()
    """) == ["step"]


def test_scheduler_step_alone_is_not_an_update():
    assert roles("""
        for x in range(10):
            scheduler.step()
            lr_sched.step()
    """) == []


def test_tf1_session_run_of_minimize_op_is_a_step():
    assert roles("""
        import tensorflow.compat.v1 as tf
        update = tf.train.AdamOptimizer(0.1).minimize(loss)
        for i in range(10):
            sess.run([update, loss], feed_dict={x: 1})
    """) == ["step"]


def test_tf1_session_run_of_train_op_name_is_a_step():
    assert roles("""
        for i in range(10):
            s.run(train_op, feed_dict=feed)
    """) == ["step"]


def test_session_run_of_a_plain_tensor_is_not_a_step():
    assert roles("""
        for i in range(10):
            print(s.run(loss, feed_dict=feed))
    """) == []


def test_gradient_tape_apply_gradients_is_a_step():
    assert roles("""
        for x, y in dataset:
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """) == ["step"]


def test_train_on_batch_is_a_step():
    assert roles("""
        for x, y in batches:
            model.train_on_batch(x, y)
    """) == ["step"]


def test_calling_a_train_step_like_function_is_a_step():
    assert roles("""
        for x, y in batches:
            metrics = train_step(x, y)
    """) == ["step"]


def test_update_through_a_same_file_function_is_followed():
    assert regions("""
        def update(model, x):
            model(x).backward()

        for x in data:
            update(model, x)
    """) == [(5, "step")]


def test_update_through_a_method_called_on_self_is_followed():
    assert roles("""
        class Trainer:
            def _do(self, x):
                self.opt.step()
            def run(self, data):
                for x in data:
                    self._do(x)
    """) == ["step"]


def test_call_following_is_bounded():
    chain = "\n".join(f"def f{i}():\n    f{i + 1}()\n" for i in range(10))
    code = chain + "\ndef f10():\n    loss.backward()\n\nfor i in range(3):\n    f0()\n"
    assert roles(code) == []


def test_recursive_functions_do_not_hang_detection():
    assert roles("""
        def a(n):
            return b(n)
        def b(n):
            return a(n)
        for i in range(3):
            a(i)
    """) == []


# -- epoch, eval, train-call --------------------------------------------------------

def test_loop_around_a_step_loop_is_an_epoch():
    assert regions("""
        for epoch in range(3):
            for x in loader:
                loss.backward()
    """) == [(2, "epoch"), (3, "step")]


def test_loop_calling_a_function_with_a_step_loop_is_an_epoch():
    assert regions("""
        def train_one_epoch():
            for x in loader:
                optimizer.step()

        for e in range(3):
            train_one_epoch()
    """) == [(3, "step"), (6, "epoch")]


def test_loop_over_epochs_running_fit_is_an_epoch_around_a_train_call():
    assert roles("""
        for epoch in range(3):
            model.fit(x, y, epochs=1)
    """) == ["epoch", "train-call"]


def test_loop_over_epochs_that_only_prints_is_left_alone():
    assert roles("""
        for epoch, loss in enumerate(history.history["loss"]):
            print(f"{epoch}: {loss:.3f}")
    """) == []


def test_no_grad_loop_with_forward_passes_is_eval():
    assert roles("""
        import torch
        with torch.no_grad():
            for x in loader:
                out = model(x)
    """) == ["eval"]


def test_loop_after_model_eval_is_eval():
    assert roles("""
        model.eval()
        for x in loader:
            out = model(x)
    """) == ["eval"]


def test_loop_in_an_evaluate_function_is_eval():
    assert roles("""
        def evaluate(model, loader):
            total = 0
            for x in loader:
                total += model(x)
            return total
    """) == ["eval"]


def test_data_preparation_loop_is_left_alone():
    assert roles("""
        batches = []
        for i in range(10):
            batches.append(i * 2)
        for b in batches:
            print(b)
    """) == []


def test_keras_fit_is_a_train_call_on_its_call_line():
    assert regions("""
        import keras
        model = keras.Sequential()
        history = model.fit(
            x, y)
    """) == [(4, "train-call")]


def test_hugging_face_trainer_train_is_a_train_call():
    assert roles("""
        trainer = Trainer(model=model, args=args)
        trainer.train()
    """) == ["train-call"]


def test_lightning_trainer_fit_is_a_train_call():
    assert roles("""
        trainer.fit(model, datamodule=dm)
    """) == ["train-call"]


def test_estimator_train_is_a_train_call():
    assert roles("""
        estimator.train(input_fn=train_input_fn, steps=100)
    """) == ["train-call"]


def test_torch_model_train_mode_switch_is_not_a_train_call():
    assert roles("""
        model.train()
        model.eval()
    """) == []


def test_fit_method_defined_in_the_file_is_followed_not_marked_as_library_call():
    assert regions("""
        class Trainer:
            def fit(self, data):
                for x in data:
                    self.optimizer.step()

        t = Trainer()
        t.fit(data)
    """) == [(4, "step")]


# -- shapes and directives ---------------------------------------------------------------

def test_while_true_with_break_is_a_step_loop():
    assert roles("""
        while True:
            optimizer.step()
            if done():
                break
    """) == ["step"]


def test_loops_inside_main_guard_are_found():
    assert roles("""
        if __name__ == "__main__":
            for x in data:
                loss.backward()
    """) == ["step"]


def test_async_for_loops_are_found():
    assert roles("""
        async def train():
            async for x in stream:
                loss.backward()
    """) == ["step"]


def test_skip_directive_excludes_a_loop():
    assert roles("""
        for x in data:  # autoitt: skip
            loss.backward()
    """) == []


def test_role_directive_forces_a_role():
    assert roles("""
        for x in data:  # autoitt: step
            custom_update(x)
    """) == ["step"]


def test_directive_on_the_line_above_applies():
    assert roles("""
        # autoitt: eval
        for x in data:
            run(x)
    """) == ["eval"]


def test_loop_inside_tf_function_gets_no_markers():
    source = parse_source(textwrap.dedent("""
        import tensorflow as tf

        @tf.function
        def train(dataset):
            for x in dataset:
                optimizer.apply_gradients(grads(x))

        train(ds)
    """).encode(), "t.py")
    detection = detect(source)
    assert [(r.line, r.role, r.label) for r in detection.regions] == [(9, "train-call", "train")]
    assert any("@tf.function" in note.message for note in detection.notes)


def test_torch_compile_decorated_step_is_marked_at_the_calling_loop():
    assert regions("""
        import torch

        @torch.compile
        def step_fn(x):
            loss = model(x)
            loss.backward()
            opt.step()

        for x in data:
            step_fn(x)
    """) == [(10, "step")]


# -- labels and nesting ----------------------------------------------------------------------

def test_labels_are_unique_per_script():
    source = parse_source(textwrap.dedent("""
        def pretrain():
            for x in a:
                loss.backward()
        def finetune():
            for x in b:
                loss.backward()
            for x in c:
                loss.backward()
    """).encode(), "t.py")
    labels = [r.label for r in detect(source).regions]
    assert labels == ["pretrain.step", "step@6", "step@8"]


def test_label_override_by_line():
    source = parse_source(b"for x in a:\n    loss.backward()\n", "t.py")
    assert [r.label for r in detect(source, {1: "warmup"}).regions] == ["warmup"]


def test_only_the_outermost_region_resumes_collection():
    source = parse_source(textwrap.dedent("""
        def train_one_epoch():
            for x in loader:
                optimizer.step()

        for e in range(3):
            train_one_epoch()
    """).encode(), "t.py")
    assert [(r.line, r.outermost) for r in detect(source).regions] == [(3, False), (6, True)]


# -- the loops command and its JSON ---------------------------------------------------------

EXPECTED_SAMPLE_ROLES = {
    SAMPLES / "torch_train.py": [("main", "epoch"), ("main", "step"), ("main", "eval")],
    SAMPLES / "tf1_session.py": [("main", "epoch"), ("main", "step")],
    SAMPLES / "tf2_gradient_tape.py": [("evaluate", "eval"), ("main", "epoch"), ("main", "step")],
    SAMPLES / "keras_fit.py": [("main", "train-call"), ("main", "eval")],
    SAMPLES / "ignite_train.py": [("main.log_validation", "eval"), ("main", "train-call"), ("main", "eval")],
    INPUTS / "while_loops.py": [("main", "step"), ("main", "step")],
    INPUTS / "control_flow.py": [("train", "step"), ("train_until_converged", "epoch"), ("train_until_converged", "step")],
    INPUTS / "trainer_class.py": [("Trainer._run_epoch", "step"), ("Trainer.fit", "epoch"), ("Trainer.evaluate", "eval")],
    INPUTS / "grad_accum.py": [("main", "epoch"), ("main", "step")],
    INPUTS / "gan.py": [("main", "epoch"), ("main", "step"), ("main", "eval")],
    INPUTS / "nested_functions.py": [("train_one_epoch", "step"), ("evaluate", "eval"), (None, "epoch")],
}


@pytest.mark.parametrize("script", list(EXPECTED_SAMPLE_ROLES), ids=lambda p: p.name)
def test_loops_json_gives_the_expected_roles(script):
    result = CliRunner().invoke(cli, ["loops", str(script), "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert [(item["function"], item["role"]) for item in found] == EXPECTED_SAMPLE_ROLES[script]
    lines = script.read_text().splitlines()
    for item in found:
        assert set(item) == {"line", "end_line", "role", "function", "label", "reason", "path"}
        assert item["line"] <= item["end_line"]
        keyword = lines[item["line"] - 1].strip()
        if item["role"] == "train-call":
            assert ".fit(" in keyword or ".train(" in keyword or ".run(" in keyword
        elif "inside a library" in item["reason"] or "inside pytorch-ignite" in item["reason"]:
            assert re.search(r"\.(evaluate|validate|test|predict|run)\(", keyword)
        else:
            assert keyword.startswith(("for ", "while ", "async for "))


def test_loops_human_output_lists_lines_roles_and_reasons():
    result = CliRunner().invoke(cli, ["loops", str(SAMPLES / "torch_train.py")])
    assert result.exit_code == 0
    assert "loss.backward()" in result.stdout
    assert "torch.no_grad()" in result.stdout


def test_loop_around_a_non_training_loop_is_classified_by_its_own_body():
    assert regions("""
        for batch in loader:
            for p in params:
                print(p)
            loss.backward()
    """) == [(2, "step")]


def test_a_step_loop_in_a_while_else_clause_does_not_make_an_epoch():
    assert regions("""
        while waiting():
            poll()
        else:
            for x in loader:
                loss.backward()
    """) == [(5, "step")]


# -- roles from the command line ---------------------------------------------------

ROLE_SCRIPT = """\
import torch
model = torch.nn.Linear(4, 1)
for batch in range(3):
    out = model(torch.ones(4))
for x in data:
    loss.backward()
results = model.score_all(3)
"""


def _loops_json(tmp_path, *roles):
    script = tmp_path / "t.py"
    script.write_text(ROLE_SCRIPT)
    result = CliRunner().invoke(cli, ["loops", "--json", str(script), *(f"--role={r}" for r in roles)])
    return result, {region["line"]: (region["role"], region["reason"]) for region in json.loads(result.stdout or "[]")}


def test_role_sets_the_role_of_a_loop_autoitt_did_not_take(tmp_path):
    _, found = _loops_json(tmp_path, "3=eval")
    assert found[3] == ("eval", "set by --role")


def test_role_overrides_what_detection_decided(tmp_path):
    _, found = _loops_json(tmp_path, "5=epoch")
    assert found[5] == ("epoch", "set by --role")


def test_role_skip_leaves_a_region_unmarked(tmp_path):
    _, without = _loops_json(tmp_path)
    assert without[5] == ("step", "updates parameters: loss.backward()")  # the same listing finds it unless skipped
    _, found = _loops_json(tmp_path, "5=skip")
    assert 5 not in found


def test_role_train_call_marks_a_call_autoitt_did_not_recognise(tmp_path):
    _, found = _loops_json(tmp_path, "7=train-call")
    assert found[7] == ("train-call", "set by --role")


def test_role_on_a_line_without_a_loop_or_call_is_a_note(tmp_path):
    script = tmp_path / "t.py"
    script.write_text(ROLE_SCRIPT)
    result = CliRunner().invoke(cli, ["loops", str(script), "--role", "1=eval"])
    assert result.exit_code == 0
    assert "--role 1=eval: no call starts on line 1" in " ".join(result.output.split())


@pytest.mark.parametrize("value", ["3=bogus", "x=eval", "3"])
def test_a_bad_role_is_a_usage_error(tmp_path, value):
    result, _ = _loops_json(tmp_path, value)
    assert result.exit_code == 2 and "LINE=ROLE" in result.output


def test_instrument_applies_roles_too(tmp_path):
    from transforms import Mode, instrument_source

    result = instrument_source(ROLE_SCRIPT.encode(), "t.py", Mode(roles=((3, "eval"),)))
    assert [(r.line, r.role) for r in result.regions] == [(3, "eval"), (5, "step")]
