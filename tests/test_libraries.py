"""Training inside library calls gets epochs, steps and evals, through the libraries' own callbacks.

End to end: real Keras (TensorFlow CPU), PyTorch Lightning, Hugging Face
``transformers`` (a tiny BERT built from a config, no download), trl (its
SFTTrainer on a tiny GPT-2 with a word-level tokenizer made in the script) and
Stable-Baselines3 (PPO on gymnasium's CartPole) on a few batches, profiled with
the built-in collector; the steps recorded are checked against the run's own count. In-process: what the callback
does to the user's objects and lists, with a recorder standing in for ``itt``.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from instrumenter.runtime import libraries
from tests.itt_recorder import StandInItt
from tests.test_profile import autoitt
from transforms import Mode, instrument_source

KERAS_FIT = textwrap.dedent(
    """\
    import numpy as np
    import keras

    x = np.random.rand(40, 4).astype("float32")
    y = np.random.rand(40, 1).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    mine = []
    model.fit(x, y, batch_size=8, epochs=2, validation_data=(x[:16], y[:16]), verbose=0, callbacks=mine)
    model.evaluate(x, y, batch_size=8, verbose=0)
    print("callbacks still", mine)
    """)

LIGHTNING_FIT = textwrap.dedent(
    """\
    import torch
    import pytorch_lightning as pl


    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, index):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, index):
            self.log("val", self.layer(batch[0]).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)


    def loader():
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(40, 4)), batch_size=4)


    mine = []
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=5, limit_val_batches=2, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=mine)
    before = trainer.callbacks
    trainer.fit(Model(), loader(), loader())
    print("callbacks still", mine, trainer.callbacks is before)
    """)

HF_TRAIN = textwrap.dedent(
    """\
    import tempfile

    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    config = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, max_position_embeddings=16, num_labels=2)
    data = [{"input_ids": torch.randint(0, 32, (6,)), "labels": torch.tensor(i % 2)} for i in range(20)]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=4,
                             per_device_eval_batch_size=4, eval_strategy="epoch", save_strategy="no",
                             report_to=[], logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data,
                      eval_dataset=data[:8])
    trainer.train()
    metrics = trainer.evaluate()
    print("evaluated", sorted(metrics)[0])
    """)

TRL_SFT = textwrap.dedent(
    """\
    import tempfile

    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran"]
    vocab = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2, **{w: i + 3 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                        eos_token="[EOS]")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=32, n_embd=16, n_layer=1, n_head=2))
    dataset = Dataset.from_dict({"text": [" ".join(words[(i + j) % 8] for j in range(6)) for i in range(24)]})


    class Steps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            print("optimizer step", state.global_step, flush=True)


    args = SFTConfig(output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=4, max_length=16,
                     save_strategy="no", report_to=[], logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[Steps()])
    trainer.train()
    """)

SB3_PPO = textwrap.dedent(
    """\
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback


    class Iterations(BaseCallback):
        def _on_rollout_start(self):
            print("iteration", flush=True)

        def _on_step(self):
            return True


    mine = [Iterations()]
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=256, callback=mine)
    print("timesteps", model.num_timesteps, "callbacks still", len(mine))
    """)


def _profile(tmp_path, script, *options):
    (tmp_path / "train.py").write_text(script)
    done = autoitt("profile", "--json", "--backend", "builtin", "-r", "out", *options, "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    counts = {t["name"]: t["count"] for t in summary["tasks"] if t["domain"] == "autoitt.train"}
    return summary, counts, done.stderr, tmp_path / "out"


@pytest.fixture(scope="module")
def keras_run(tmp_path_factory):
    return _profile(tmp_path_factory.mktemp("keras"), KERAS_FIT)


@pytest.mark.slow
def test_keras_fit_records_its_epochs_steps_and_evals(keras_run):
    summary, counts, _, _ = keras_run
    assert counts["fit"] == 1 and counts["epoch"] == 2 and counts["step"] == 10
    # two validation runs of 2 batches, then evaluate()'s 5 batches
    assert counts["eval_loop"] == 3 and counts["eval"] == 2 * 2 + 5 and counts["evaluate"] == 1
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 10)]


@pytest.mark.slow
def test_keras_fit_steps_are_drawn_in_the_step_plot(keras_run):
    from xml.etree import ElementTree

    _, _, _, folder = keras_run
    polyline = ElementTree.parse(folder / "steps.svg").getroot().find("{http://www.w3.org/2000/svg}polyline")
    assert len(polyline.get("points").split()) == 10


@pytest.mark.slow
def test_keras_fit_leaves_the_users_callbacks_list_as_it_was(keras_run):
    _, _, stderr, _ = keras_run
    assert "callbacks still []" in stderr


@pytest.mark.slow
def test_lightning_fit_records_its_epochs_steps_and_validation(tmp_path):
    summary, counts, stderr, _ = _profile(tmp_path, LIGHTNING_FIT)
    assert counts["fit"] == 1 and counts["epoch"] == 2 and counts["step"] == 10
    assert counts["eval_loop"] == 2 and counts["eval"] == 2 * 2
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 10)]
    assert "callbacks still [] True" in stderr  # the trainer holds the user's own list again


@pytest.mark.slow
def test_hugging_face_train_records_its_epochs_steps_and_evaluations(tmp_path):
    summary, counts, stderr, _ = _profile(tmp_path, HF_TRAIN)
    assert counts["train"] == 1 and counts["epoch"] == 2 and counts["step"] == 10
    # an evaluation per epoch, then evaluate(): 2 batches each
    assert counts["eval_loop"] == 3 and counts["eval"] == 3 * 2 and counts["evaluate"] == 1
    assert "evaluated epoch" in stderr


@pytest.mark.slow
def test_a_trl_trainer_records_its_epochs_and_optimizer_steps(tmp_path):
    summary, counts, stderr, _ = _profile(tmp_path, TRL_SFT)
    printed = stderr.count("optimizer step")  # the run's own count, from its own callback
    assert printed == 2 * (24 // 4)
    assert counts["train"] == 1 and counts["epoch"] == 2 and counts["step"] == printed
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", printed)]


@pytest.mark.slow
def test_stable_baselines3_learn_records_a_step_per_rollout_and_update(tmp_path):
    summary, counts, stderr, _ = _profile(tmp_path, SB3_PPO)
    iterations = stderr.count("iteration")  # the run's own count, from its own callback
    assert iterations == 256 // 64
    assert counts["learn"] == 1 and counts["step"] == iterations
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", iterations)]
    assert "timesteps 256 callbacks still 1" in stderr  # the user's list is as it was


@pytest.mark.slow
def test_a_collection_window_counts_library_steps(tmp_path):
    summary, _, _, _ = _profile(tmp_path, KERAS_FIT, "--skip-steps", "2", "--steps", "3")
    assert [(s["label"], s["count"]) for s in summary["steps"]] == [("step", 3)]


# -- in-process: what attaching does to the user's objects ----------------------------------------------

@pytest.fixture(scope="module")
def keras():
    return pytest.importorskip("keras")


def _keras_model(keras):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.mark.slow
def test_keras_callbacks_given_positionally_are_joined_in_a_new_list(keras):
    import numpy as np

    model, itt, mine = _keras_model(keras), StandInItt(), []
    with libraries.attach(itt, model, "fit", None):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), 2, 1, 0, mine)  # batch_size, epochs, verbose, callbacks
    assert mine == [] and itt.calls.count(("begin", "step")) == 2
    assert "fit" not in vars(model)  # the instance is as it was


@pytest.mark.slow
def test_keras_callbacks_given_through_kwargs_are_joined(keras):
    import numpy as np

    model, itt = _keras_model(keras), StandInItt()
    options = {"epochs": 1, "verbose": 0, "callbacks": (keras.callbacks.History(),)}
    with libraries.attach(itt, model, "fit", None):
        model.fit(np.ones((4, 2)), np.ones((4, 1)), batch_size=4, **options)
    assert itt.calls.count(("begin", "epoch")) == 1 and len(options["callbacks"]) == 1


@pytest.mark.slow
def test_a_users_callback_sees_the_stack_it_sees_without_autoitt(keras):
    import inspect

    import numpy as np

    model, itt, seen = _keras_model(keras), StandInItt(), []

    class Stack(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append([(frame.filename, frame.function) for frame in inspect.stack()])

    def fit():
        model.fit(np.ones((4, 2)), np.ones((4, 1)), batch_size=4, epochs=1, verbose=0, callbacks=[Stack()])

    fit()
    with libraries.attach(itt, model, "fit", None):
        fit()
    assert itt.calls.count(("begin", "step")) == 1  # autoitt's callback was in the call
    assert seen[1] == seen[0]  # and nothing of autoitt's is under the fit


@pytest.mark.slow
def test_an_exception_inside_the_call_ends_every_task_the_callback_opened(keras):
    import numpy as np

    model, itt = _keras_model(keras), StandInItt()

    class Stop(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise KeyError("stop")

    with pytest.raises(KeyError, match="stop"):
        with libraries.attach(itt, model, "fit", None):
            model.fit(np.ones((4, 2)), np.ones((4, 1)), batch_size=2, epochs=1, verbose=0, callbacks=[Stop()])
    begun = sum(1 for kind, _ in itt.calls if kind == "begin")
    assert begun == sum(1 for kind, _ in itt.calls if kind == "end") > 0


@pytest.mark.slow
def test_a_wrong_call_fails_as_it_would_without_autoitt(keras):
    model, itt = _keras_model(keras), StandInItt()
    with pytest.raises(TypeError) as with_autoitt:
        with libraries.attach(itt, model, "fit", None):
            model.fit(no_such_argument=1)
    with pytest.raises(TypeError) as without:
        model.fit(no_such_argument=1)
    assert str(with_autoitt.value) == str(without.value)


def test_an_object_of_another_library_stays_one_task_and_says_so_once(capsys):
    class Estimator:
        def fit(self, x):
            return x

    itt, estimator = StandInItt(), Estimator()
    for _ in range(2):
        with libraries.attach(itt, estimator, "fit", None):
            assert estimator.fit(3) == 3
    assert itt.calls == []
    said = "Estimator.fit(): not a Keras, Lightning, Hugging Face, ignite or Stable-Baselines3 object"
    assert capsys.readouterr().err.count(said) == 1


def test_a_library_whose_callbacks_cannot_be_imported_leaves_the_call_as_it_is(capsys):
    class Model:
        def fit(self, x, callbacks=None):
            return x, callbacks

    Model.__module__ = "tf_keras.src.models"  # a Keras autoitt recognises, not installed here
    itt, model = StandInItt(), Model()
    with libraries.attach(itt, model, "fit", None):
        assert model.fit(3) == (3, None)
    assert itt.calls == [] and "fit" not in vars(model)
    assert "Model.fit(): no callback could be made (ModuleNotFoundError" in capsys.readouterr().err


@pytest.fixture(scope="module")
def ppo():
    sb3 = pytest.importorskip("stable_baselines3")
    return lambda: sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("given", ["none", "function", "callback", "list"])
def test_stable_baselines3_gets_autoitts_callback_beside_the_users_in_any_form(ppo, given):
    from stable_baselines3.common.callbacks import BaseCallback

    seen = []

    class Mine(BaseCallback):
        def _on_step(self):
            seen.append("callback")
            return True

    def function(locals_, globals_):
        seen.append("function")
        return True

    users = {"none": None, "function": function, "callback": Mine(), "list": [Mine()]}[given]
    model, itt = ppo(), StandInItt()
    with libraries.attach(itt, model, "learn", None):
        model.learn(total_timesteps=64, callback=users)
    assert itt.calls == [("begin", "step"), ("end", None)] * 2  # 64 timesteps: two rollouts of 32, each updated
    assert len(seen) == (0 if given == "none" else 64)  # the user's callback ran at every environment step
    assert given != "list" or len(users) == 1  # the user's list is as it was
    assert "learn" not in vars(model)


@pytest.mark.slow
def test_the_lightning_trainer_gets_its_own_callbacks_list_back():
    pl = pytest.importorskip("pytorch_lightning")
    mine = []
    trainer = pl.Trainer(callbacks=mine, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    before = trainer.callbacks
    with libraries.attach(StandInItt(), trainer, "fit", None):
        assert len(trainer.callbacks) == len(before) + 1 and mine == []
    assert trainer.callbacks is before


# -- the copy ----------------------------------------------------------------------------------------------

def test_the_copy_runs_a_library_call_inside_the_library_context():
    source = b"model.fit(x, y)\nmodel.evaluate(x, y)\n"
    copy = instrument_source(source, "t.py").output.decode()
    assert 'with itt.library(model, "fit", _autoitt_domain):' in copy
    assert 'with itt.library(model, "evaluate", _autoitt_domain):' in copy


def test_the_copy_runs_stable_baselines3s_learn_inside_the_library_context():
    copy = instrument_source(b"model.learn(total_timesteps=1000)\n", "t.py").output.decode()
    assert 'with itt.library(model, "learn", _autoitt_domain):' in copy


def test_a_trainer_made_in_the_call_stays_one_task_with_a_note():
    result = instrument_source(b"Trainer(max_epochs=2).fit(model)\n", "t.py")
    assert b"itt.library(" not in result.output
    assert any(".fit() stays one task: its object is not a name" in note.message for note in result.plan.notes)


def test_library_steps_are_step_labels_so_windows_and_step_tables_count_them():
    result = instrument_source(b"model.fit(x, y)\n", "t.py", Mode(steps=3))
    assert result.step_labels == (libraries.STEP,)
    assert b'step_tasks=("step",)' in result.output


def test_a_library_call_that_stays_one_task_says_why_in_the_summary(tmp_path):
    """Two calls of another library's trainer: one autoitt gives no callback (its method is not one it covers),
    one whose object takes none at run time (not an object of a library autoitt has callbacks for)."""
    (tmp_path / "trainerlib.py").write_text(
        "class Trainer:\n    def run(self):\n        return 1\n\n    def fit(self, x):\n        return x\n")
    (tmp_path / "train.py").write_text(
        "from trainerlib import Trainer\n\ntrainer = Trainer()\ntrainer.run()\nmodel = Trainer()\nmodel.fit(3)\n")
    done = autoitt("profile", "--backend", "builtin", "-r", "out", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = " ".join(done.stdout.split())  # the summary, its lines joined
    assert ("`trainer` (train.py:4) ran as one task, its epochs and steps not marked: trainer.run() stays one task: "
            "autoitt knows no callbacks for it") in shown
    assert ("`fit` (train.py:6) ran as one task, no epoch or step recorded inside it: its object is not of a library "
            "autoitt has callbacks for") in shown
    assert "autoitt: Trainer.fit(): not a Keras, Lightning, Hugging Face, ignite or Stable-Baselines3 object" \
        in done.stderr
