"""Training idioms beyond the plain PyTorch loop (issue 12): Keras 3 custom loops, JAX/Flax
steps under another name, TF1 Estimators, LightningCLI, updates applied by an outer loop,
and what is not an evaluation. One behaviour per test; each reason states its rule."""

from __future__ import annotations

import textwrap

from transforms import detect, parse_source


def detection(code: str):
    return detect(parse_source(textwrap.dedent(code).encode(), "t.py"))


def regions(code: str):
    return [(r.line, r.role) for r in detection(code).regions]


def roles(code: str):
    return [role for _, role in regions(code)]


def reason(code: str, line: int) -> str:
    return next(r.reason for r in detection(code).regions if r.line == line)


# -- 1. Keras 3 custom training loops ---------------------------------------------------------------

KERAS3_LOOP = """\
import keras
import tensorflow as tf

model = keras.Sequential([keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)

def test_step(x, y):
    return loss_fn(y, model(x, training=False))

for epoch in range(2):
    for x, y in train_dataset:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
    for x, y in val_dataset:
        test_step(x, y)
"""


def test_keras3_optimizer_apply_is_a_parameter_update():
    assert regions(KERAS3_LOOP)[:2] == [(10, "epoch"), (11, "step")]
    assert reason(KERAS3_LOOP, 11) == "updates parameters: optimizer.apply() (Keras 3 optimizer)"


def test_keras3_apply_on_an_optimizer_named_object_given_gradients_is_an_update():
    assert roles("""
        for x, y in batches:
            grads = tape.gradient(loss, weights)
            self.optimizer.apply(grads, weights)
    """) == ["step"]


def test_keras3_stateless_apply_is_a_parameter_update():
    assert roles("""
        for x, y in batches:
            grads = grad_fn(trainable_variables, x, y)
            trainable_variables, optimizer_variables = optimizer.stateless_apply(
                optimizer_variables, grads, trainable_variables)
    """) == ["step"]


def test_apply_on_options_named_like_an_optimizer_is_not_an_update():
    assert roles("""
        opt = parser.parse_args()
        for name in names:
            opt.apply(name)
    """) == []


def test_apply_on_a_dataframe_is_not_an_update():
    assert roles("""
        for frame in frames:
            frame.apply(normalise)
    """) == []


def test_keras_apply_gradients_of_zipped_gradients_is_still_an_update():
    assert roles("""
        for x, y in dataset:
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """) == ["step"]


def test_validation_loop_calling_a_test_step_is_eval():
    assert regions(KERAS3_LOOP)[2] == (16, "eval")
    assert reason(KERAS3_LOOP, 16) == "forward passes in eval step test_step()"


def test_validation_loop_with_training_false_is_eval():
    assert roles("""
        for x, y in val_dataset:
            logits = model(x, training=False)
            val_acc.update_state(y, logits)
    """) == ["eval"]


def test_loop_over_validation_data_running_a_model_is_eval():
    code = """
        for x, y in val_loader:
            out = net(x)
    """
    assert roles(code) == ["eval"]
    assert reason(code, 2) == "forward passes over validation data (val_loader): net()"


def test_loop_over_validation_data_running_no_model_is_not_eval():
    assert roles("""
        for x, y in val_loader:
            shapes.append(x.shape)
            print(y)
    """) == []


# -- 2. JAX / Flax steps under another name ---------------------------------------------------------

JAX_STEP = """\
import functools
import jax

def train_step(state, batch):
    grads = jax.grad(loss_fn)(state.params, batch)
    return state.apply_gradients(grads=grads)

{binding}

for epoch in range(3):
    for batch in loader:
        state = {name}(state, batch)
"""


def test_jax_jit_bound_train_step_called_in_a_loop_is_a_step():
    code = JAX_STEP.format(binding="jit_train_step = jax.jit(train_step)", name="jit_train_step")
    assert regions(code) == [(10, "epoch"), (11, "step")]
    assert reason(code, 11) == "updates parameters: calls jit_train_step() = jax.jit(train_step)"


def test_jax_pmap_bound_train_step_is_a_step():
    code = JAX_STEP.format(binding='p_train_step = jax.pmap(train_step, axis_name="batch")', name="p_train_step")
    assert regions(code) == [(10, "epoch"), (11, "step")]


def test_functools_partial_of_train_step_is_a_step():
    code = JAX_STEP.format(binding="step = functools.partial(train_step, rng=rng)", name="step")
    assert regions(code) == [(10, "epoch"), (11, "step")]
    assert reason(code, 11) == "updates parameters: calls step() = functools.partial(train_step)"


def test_pmap_of_a_partial_is_followed_to_the_function_it_wraps():
    code = JAX_STEP.format(binding='run = jax.pmap(functools.partial(train_step, lr=0.1), axis_name="b")',
                           name="run")
    assert roles(code) == ["epoch", "step"]


WRAPPED = """\
import jax

def advance(state, batch):
    return state.apply_gradients(grads=jax.grad(loss_fn)(state.params, batch))

fast = jax.jit(advance)
for batch in loader:
    state = fast(state, batch)
"""


def test_wrapped_function_is_followed_to_its_update_whatever_its_name():
    assert regions(WRAPPED) == [(7, "step")]
    # the reason names the call as written and the function it wraps
    assert reason(WRAPPED, 7) == "updates parameters: calls fast() = jax.jit(advance): state.apply_gradients()"


def test_jit_of_an_imported_train_step_is_a_step_by_its_name():
    assert roles("""
        import jax
        from steps import train_step
        compiled = jax.jit(train_step)
        for batch in loader:
            state = compiled(state, batch)
    """) == ["step"]


def test_jit_of_a_function_that_does_not_train_is_not_a_step():
    assert roles("""
        import jax

        def normalise(batch):
            return batch / 255.0

        fast = jax.jit(normalise)
        for batch in loader:
            x = fast(batch)
    """) == []


def test_flax_train_state_apply_gradients_is_a_parameter_update():
    assert roles("""
        for batch in loader:
            grads = jax.grad(loss_fn)(state.params, batch)
            state = state.apply_gradients(grads=grads)
    """) == ["step"]


def test_optax_apply_updates_is_a_parameter_update():
    assert roles("""
        import optax
        for batch in loader:
            updates, opt_state = tx.update(grads, opt_state)
            params = optax.apply_updates(params, updates)
    """) == ["step"]


def test_loop_in_a_function_compiled_by_jax_jit_binding_is_unmarked_and_its_call_marked():
    result = detection("""
        import jax

        def train_epoch(state, batches):
            for batch in batches:
                state = state.apply_gradients(grads=grads_of(state, batch))
            return state

        run_epoch = jax.jit(train_epoch)
        state = run_epoch(state, batches)
    """)
    assert [(r.line, r.role) for r in result.regions] == [(10, "train-call")]
    assert "calls jax.jit-compiled train_epoch()" in result.regions[0].reason
    assert any("inside jax.jit-compiled train_epoch" in note.message for note in result.notes)


def test_loop_in_a_jax_jit_decorated_function_stays_unmarked():
    result = detection("""
        import jax

        @jax.jit
        def train_epoch(state, batches):
            for batch in batches:
                state = state.apply_gradients(grads=grads_of(state, batch))
            return state
    """)
    assert result.regions == ()
    assert any("@jax.jit" in note.message for note in result.notes)


def test_model_compiled_in_place_is_not_taken_for_a_wrapped_step():
    assert roles("""
        import torch
        model = torch.compile(model)
        for x in data:
            print(model(x))
    """) == []


COMPILED_EVAL = """
    import torch
    class Net(torch.nn.Module):
        def forward(self, x):
            return x
    model = Net()
    runner = torch.compile(model)
    def test():
        with torch.no_grad():
            for x in test_data:
                runner(x)
"""


def test_a_model_compiled_under_another_name_evaluates_when_called_with_gradients_off():
    assert regions(COMPILED_EVAL) == [(10, "eval")]
    assert "runner()" in reason(COMPILED_EVAL, 10)


def test_a_function_compiled_under_another_name_is_no_model():
    assert roles(COMPILED_EVAL.replace("model = Net()", "def model(x):\n        return x")) == []


# -- 3. TF1 Estimator ----------------------------------------------------------------------------

def test_estimator_train_with_input_fn_passed_first_is_a_train_call():
    code = """
        model.train(train_input_fn, steps=num_steps)
    """
    assert roles(code) == ["train-call"]
    assert reason(code, 2) == ("model.train() trains inside a library: its first argument is an input function, "
                               "as TF Estimator.train(input_fn, ...)'s is (PyTorch's train(mode) takes a bool)")


def test_estimator_train_with_a_lambda_input_fn_is_a_train_call():
    assert roles("""
        classifier_model.train(lambda: input_fn(train_files), max_steps=1000)
    """) == ["train-call"]


def test_estimator_train_with_a_built_input_fn_is_a_train_call():
    assert roles("""
        linear_est.train(make_input_fn(train_df, labels))
    """) == ["train-call"]


def test_train_given_an_estimator_keyword_is_a_train_call():
    code = """
        model.train(make_input(files), steps=100)
    """
    assert roles(code) == ["train-call"]
    assert "it takes steps=, as TF Estimator.train does" in reason(code, 2)


def test_torch_train_mode_with_a_bool_is_not_a_train_call():
    assert roles("""
        model.train(False)
        model.train(True)
        model.train(mode=True)
        model.train(not evaluating)
        model.train(is_training)
        model.train()
    """) == []


# -- 4. LightningCLI -------------------------------------------------------------------------------

def test_lightning_cli_is_a_train_call():
    code = """
        from lightning.pytorch.cli import LightningCLI
        cli = LightningCLI(Model, DataModule, save_config_kwargs={"overwrite": True})
    """
    result = detection(code)
    assert [(r.line, r.role, r.label) for r in result.regions] == [(3, "train-call", "LightningCLI")]
    assert result.regions[0].reason == ("LightningCLI() trains inside Lightning: without run=False it runs "
                                        "the command line's Trainer subcommand (fit, validate, ...)")


def test_pytorch_lightning_cli_called_as_a_statement_is_a_train_call():
    assert roles("""
        from pytorch_lightning.cli import LightningCLI

        def main():
            LightningCLI(Model)
    """) == ["train-call"]


def test_lightning_cli_through_a_module_alias_is_a_train_call():
    assert roles("""
        import lightning.pytorch as pl
        pl.cli.LightningCLI(Model, DataModule)
    """) == ["train-call"]


def test_lightning_cli_with_run_false_leaves_the_train_call_to_trainer_fit():
    result = detection("""
        from lightning.pytorch.cli import LightningCLI
        cli = LightningCLI(Model, DataModule, run=False)
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    """)
    assert [(r.line, r.role, r.label) for r in result.regions] == [(4, "train-call", "fit")]


def test_a_cli_class_named_lightning_cli_not_from_lightning_is_not_a_train_call():
    assert roles("""
        class LightningCLI:
            pass
        cli = LightningCLI()
    """) == []


# -- 5. The update applied by an outer loop -------------------------------------------------------

META = """\
for epoch in range(3):
    for batch in loader:
        optimizer.zero_grad()
        for task in batch.tasks:
            loss = model(task).mean()
            loss.backward()
        optimizer.step()
"""


def test_outer_loop_that_applies_the_inner_loops_gradients_is_the_step():
    assert regions(META) == [(1, "epoch"), (2, "step")]
    assert reason(META, 2) == ("updates parameters: optimizer.step() once per iteration, after the loop at "
                               "line 4 accumulates gradients (loss.backward())")


def test_inner_loop_that_only_accumulates_gradients_is_left_unmarked_with_a_note():
    notes = [note for note in detection(META).notes if note.line == 4]
    assert len(notes) == 1
    assert "only accumulates gradients (loss.backward()) that the loop at line 2 applies" in notes[0].message


def test_update_applied_through_a_called_function_makes_the_outer_loop_the_step():
    assert regions("""
        def apply_update():
            scaler.step(optimizer)
            scaler.update()

        for batch in loader:
            for micro in split(batch):
                scaler.scale(model(micro)).backward()
            apply_update()
    """) == [(6, "step")]


def test_inner_loop_with_its_own_optimizer_step_stays_the_step():
    assert regions("""
        for batch in loader:
            for _ in range(critic_iters):
                loss_d.backward()
                opt_d.step()
            loss_g.backward()
            opt_g.step()
    """) == [(2, "epoch"), (3, "step")]


def test_scheduler_step_in_the_outer_loop_does_not_take_the_step():
    assert regions("""
        for epoch in range(3):
            for x in loader:
                loss.backward()
            scheduler.step()
    """) == [(2, "epoch"), (3, "step")]


def test_accumulation_inside_one_loop_is_unchanged():
    assert regions("""
        for i, x in enumerate(loader):
            loss.backward()
            if (i + 1) % 4 == 0:
                optimizer.step()
    """) == [(2, "step")]


def test_a_role_given_to_the_outer_loop_keeps_the_inner_loop_a_step():
    assert regions("""
        for batch in loader:  # autoitt: epoch
            for task in tasks:
                loss.backward()
            optimizer.step()
    """) == [(2, "epoch"), (3, "step")]


# -- 6. What is not an evaluation -----------------------------------------------------------------

def test_metric_reset_loop_in_an_eval_function_is_not_eval():
    assert regions("""
        def validate(self, loader):
            for metric in self.metrics:
                metric.reset()
            for x, y in loader:
                self.update(self.model(x), y)
    """) == [(5, "eval")]


def test_top_k_loop_in_an_eval_function_is_not_eval():
    assert roles("""
        def evaluate(output, target):
            for k in (1, 5):
                correct_k = correct[:k].reshape(-1).float().sum(0)
                res.append(correct_k.mul_(100.0 / batch_size))
            for k in topk:
                accuracy(output, target, k)
    """) == []


def test_file_clean_up_loop_in_a_test_function_is_not_eval():
    assert roles("""
        import os
        def test(model, tmpdir):
            for name in os.listdir(tmpdir):
                os.remove(os.path.join(tmpdir, name))
    """) == []


def test_interactive_input_loop_in_an_eval_function_is_not_eval():
    assert roles("""
        def evaluate(model):
            model.eval()
            while True:
                prompt = input("> ")
                if not prompt:
                    break
                print(model.generate(prompt))
    """) == []


def test_loop_over_helper_predictions_is_not_eval():
    assert roles("""
        import torch
        with torch.no_grad():
            for pred, target in zip(predictions, targets):
                metric.update(decode(pred), target)
    """) == []


def test_post_processing_loop_over_model_outputs_is_not_eval_even_through_a_model_method():
    assert roles("""
        def evaluate(model, x):
            outputs = model(x)
            for logits in outputs:
                texts.append(model.decode(logits.argmax(-1)))
    """) == []


def test_loop_over_top_k_values_is_not_eval_even_when_it_calls_the_model():
    assert roles("""
        def evaluate(net, x, y):
            for k in topk:
                hits[k] = (net(x).topk(k).indices == y).any()
    """) == []


def test_loop_over_constants_is_not_eval_even_when_it_calls_the_model():
    assert roles("""
        import torch
        with torch.no_grad():
            for temperature in (0.5, 1.0):
                samples.append(model(z / temperature))
    """) == []


def test_eval_loop_runs_a_forward_pass_through_a_same_file_helper():
    code = """
        def predict_batch_of(model, x):
            return model(x).argmax(-1)

        def evaluate(model, loader):
            for x, y in loader:
                correct += (predict_batch_of(model, x) == y).sum()
    """
    assert roles(code) == ["eval"]
    assert reason(code, 6) == "forward passes in evaluate(): calls predict_batch_of(): model()"


def test_self_call_in_a_lightning_validation_method_is_a_forward_pass():
    assert roles("""
        class Module(LightningModule):
            def on_validation_epoch_end(self):
                for x in self.holdout:
                    self.log("val", self(x).mean())
    """) == ["eval"]


def test_net_forward_under_no_grad_is_eval():
    assert roles("""
        import torch
        with torch.no_grad():
            for batch in loader:
                logits = net.forward(batch)
    """) == ["eval"]


def test_predict_step_call_after_model_eval_is_eval():
    assert roles("""
        model.eval()
        for i, batch in enumerate(loader):
            model.predict_step(batch, i)
    """) == ["eval"]


def test_object_of_a_file_model_class_is_a_forward_pass():
    assert roles("""
        import torch
        class Generator(torch.nn.Module):
            def forward(self, z):
                return z
        g = Generator()
        with torch.no_grad():
            for z in noise:
                show(g(z))
    """) == ["eval"]


def test_loop_under_no_grad_calling_no_model_is_not_eval():
    assert roles("""
        import torch
        with torch.no_grad():
            for p in parameters:
                p.copy_(ema(p))
    """) == []


def test_building_models_in_a_loop_is_not_a_forward_pass():
    assert roles("""
        def evaluate(configs):
            for cfg in configs:
                built.append(Model(cfg))
    """) == []


def test_a_forward_function_called_in_a_loop_is_no_sign_of_evaluating():
    assert roles("""
        for x, y in batches:
            out = forward(weights, x)
            weights -= lr * backward(out, y)
    """) == []


def test_a_forward_function_is_a_forward_pass_in_an_eval_context():
    assert roles("""
        def evaluate(weights, batches):
            for x, y in batches:
                total += (forward(weights, x).argmax(1) == y).sum()
    """) == ["eval"]


# -- a batch made inside the step ------------------------------------------------------------------------

BATCH_IN_STEP = """
    import torch
    model = GPT()
    def get_batch(split):
        return torch.randint(0, 9, (4, 8)), torch.randint(0, 9, (4, 8))
    X, Y = get_batch("train")
    while True:
        for micro_step in range(4):
            logits, loss = model(X, Y)
            X, Y = get_batch("train")
            loss.backward()
        optimizer.step()
"""


def test_a_statement_that_makes_the_steps_batch_inside_the_step_is_a_batch_region():
    assert regions(BATCH_IN_STEP) == [(7, "step"), (10, "batch")]
    assert reason(BATCH_IN_STEP, 10) == "makes the step's batch: get_batch() gives X, Y, fed to the model"


def test_next_of_an_iterator_fed_to_the_model_is_a_batch_region():
    assert regions("""
        for step in range(100):
            x, y = next(train_iter)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
    """) == [(2, "step"), (3, "batch")]


def test_a_call_named_for_batches_whose_result_feeds_no_model_call_is_left_alone():
    assert roles("""
        for step in range(100):
            seen = get_batch(step)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
    """) == ["step"]


def test_a_call_not_named_for_a_batch_is_left_alone_though_it_feeds_the_model():
    assert roles("""
        for step in range(100):
            size = get_batch_size(step)
            loss = loss_fn(model(x[:size]), y[:size])
            loss.backward()
            optimizer.step()
    """) == ["step"]


def test_a_batch_made_in_an_evaluation_loop_is_left_alone():
    assert roles("""
        with torch.no_grad():
            for k in range(10):
                X, Y = get_batch("val")
                model(X, Y)
    """) == ["eval"]
