"""Training idioms of the field beyond issue 12's (issue 22): trainer classes whose loop calls a subclass's
step, DeepSpeed engines and RLHF loops, compiled steps (JAX, tf.distribute), reinforcement-learning loops,
and generation or sampling loops that are not evaluations. pytorch-ignite's engines: tests/test_engines.py.

Small scripts written for these shapes, through the real detection (nothing runs). One behaviour per test;
each reason states its rule.
"""

from __future__ import annotations

import textwrap

from transforms import detect, parse_source


def detection(code: str, **overrides):
    return detect(parse_source(textwrap.dedent(code).encode(), "t.py"), **overrides)


def regions(code: str, **overrides):
    return [(r.line, r.role) for r in detection(code, **overrides).regions]


def reason(code: str, line: int) -> str:
    return next(r.reason for r in detection(code).regions if r.line == line)


def notes(code: str):
    return {note.line: note.message for note in detection(code).notes}


# -- trainer classes (detectron2, minGPT) --------------------------------------------------------------------

TRAINER_BASE = """\
class TrainerBase:
    def train(self, start_iter, max_iter):
        for self.iter in range(start_iter, max_iter):
            self.before_step()
            self.run_step()
            self.after_step()

    def run_step(self):
        raise NotImplementedError


class SimpleTrainer(TrainerBase):
    def run_step(self):
        losses = sum(self.model(next(self.data)).values())
        self.optimizer.zero_grad()
        losses.backward()
        self.optimizer.step()
"""


def test_a_base_trainers_loop_is_the_step_when_a_subclass_step_updates_parameters():
    assert regions(TRAINER_BASE) == [(3, "step")]
    assert reason(TRAINER_BASE, 3) == "updates parameters: calls SimpleTrainer.run_step(): losses.backward()"


def test_a_method_inherited_from_a_base_of_the_file_is_followed():
    code = TRAINER_BASE + """

class Loop(SimpleTrainer):
    def run(self):
        for epoch in range(3):
            self.train(0, 10)
"""
    assert (22, "epoch") in regions(code)


def test_a_trainer_made_in_the_call_that_trains_is_a_train_call():
    code = "from detectron2.engine import DefaultTrainer\n\nDefaultTrainer(cfg).train()\n"
    assert regions(code) == [(3, "train-call")]
    assert reason(code, 3) == "DefaultTrainer(cfg).train() trains inside a library"


def test_detectron2s_inference_on_dataset_is_an_evaluation():
    code = "from detectron2.evaluation import inference_on_dataset\n\nresults = inference_on_dataset(model, loader, ev)\n"
    found = detection(code).regions
    assert [(r.line, r.role, r.label) for r in found] == [(3, "eval", "inference_on_dataset")]


def test_detectron2s_trainer_test_is_an_evaluation():
    assert regions("from detectron2.engine import DefaultTrainer\n\nDefaultTrainer.test(cfg, model)\n") == [
        (3, "eval")]


MINGPT = """\
from mingpt.trainer import Trainer

trainer = Trainer(config, model, dataset)
trainer.run()
"""


def test_run_of_an_imported_trainer_class_trains_as_one_task():
    assert [(r.line, r.role, r.label) for r in detection(MINGPT).regions] == [(4, "train-call", "trainer")]
    assert notes(MINGPT)[4] == "trainer.run() stays one task: autoitt knows no callbacks for it"


def test_run_of_a_lightning_trainer_is_not_taken_for_a_loop_of_its_own():
    assert regions("import lightning as L\n\ntrainer = L.Trainer()\ntrainer.run()\n") == []


# -- DeepSpeed and RLHF -------------------------------------------------------------------------------------

def test_a_deepspeed_engines_backward_makes_the_loop_a_step():
    code = """\
    import deepspeed
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=params)
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()
    """
    assert regions(code) == [(3, "step")]


def test_pipeline_parallel_train_batch_is_a_step():
    assert regions("for it in range(steps):\n    loss = engine.train_batch()\n") == [(1, "step")]


def test_a_loop_running_a_deepspeed_engine_with_gradients_off_evaluates():
    code = """\
    import torch

    def evaluate(model_engine, loader):
        model_engine.eval()
        for batch in loader:
            with torch.no_grad():
                out = model_engine(batch)
    """
    assert regions(code) == [(5, "eval")]
    assert "model_engine()" in reason(code, 5)


def test_an_rlhf_loop_around_a_ppo_training_call_is_the_step():
    code = """\
    for epoch in range(epochs):
        for batch in prompt_loader:
            experience = trainer.generate_experience(batch)
            actor_loss, critic_loss = trainer.train_rlhf(experience)
    """
    assert regions(code) == [(1, "epoch"), (2, "step")]


def test_a_trainers_step_given_rollouts_updates_parameters():
    code = "for batch in loader:\n    stats = ppo_trainer.step(queries, responses, rewards)\n"
    assert regions(code) == [(1, "step")]


def test_stable_baselines_learn_trains_inside_a_library():
    code = "from stable_baselines3 import PPO\n\nmodel = PPO('MlpPolicy', env)\nmodel.learn(total_timesteps=10_000)\n"
    assert [(r.line, r.role, r.label) for r in detection(code).regions] == [(4, "train-call", "learn")]


# -- compiled steps -----------------------------------------------------------------------------------------

def test_a_loop_calling_a_jitted_update_is_the_step():
    code = """\
    import jax
    import optax

    @jax.jit
    def update(params, opt_state, batch):
        grads = jax.grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(params, updates), opt_state

    for batch in loader:
        params, opt_state = update(params, opt_state, batch)
    """
    assert regions(code) == [(10, "step")]


def test_a_step_rebound_to_its_jitted_self_whose_body_takes_gradients_is_the_step():
    code = """\
    import jax

    def step(params, batch):
        grads = jax.grad(loss_fn)(params, batch)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)

    step = jax.jit(step)
    for batch in loader:
        params = step(params, batch)
    """
    assert regions(code) == [(8, "step")]
    assert reason(code, 8) == "updates parameters: calls step(): jax.grad() (gradients)"


TF_DISTRIBUTED = """\
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy()


def replica_step(x):
    with tf.GradientTape() as tape:
        loss = model(x)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


@tf.function
def distributed_step(x):
    strategy.run(replica_step, args=(x,))


for x in dataset:
    distributed_step(x)
"""


def test_a_tf_function_running_its_update_through_strategy_run_is_the_step_of_its_loop():
    assert regions(TF_DISTRIBUTED) == [(16, "step")]
    assert reason(TF_DISTRIBUTED, 16) == ("updates parameters: calls distributed_step() -> replica_step(): "
                                          "optimizer.apply_gradients()")


def test_a_tf_function_epoch_is_a_train_call_and_its_loop_over_steps_per_epoch_a_step():
    code = """\
    import tensorflow as tf

    @tf.function
    def train_epoch(iterator):
        def step_fn(inputs):
            with tf.GradientTape() as tape:
                loss = compute(inputs)
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        for _ in tf.range(steps_per_epoch):
            strategy.run(step_fn, args=(next(iterator),))

    for epoch in range(epochs):
        train_epoch(train_iterator)
    """
    assert regions(code) == [(12, "epoch"), (13, "train-call")]
    assert reason(code, 12) == "calls train_epoch() which has a step loop at line 9"


# -- reinforcement learning ---------------------------------------------------------------------------------

OFF_POLICY = """\
import torch

for global_step in range(total_timesteps):
    actions = actor(torch.Tensor(obs))
    next_obs, rewards, terminations, truncations, infos = envs.step(actions)
    obs = next_obs
    if global_step > learning_starts:
        qf_loss = loss_fn(qf(rb.sample(batch_size)))
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        if global_step % policy_frequency == 0:
            for _ in range(policy_frequency):
                actor_loss = -qf(data).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
"""


def test_an_environment_loop_that_updates_after_learning_starts_is_the_step():
    assert regions(OFF_POLICY) == [(3, "step")]
    assert reason(OFF_POLICY, 3) == "steps an environment (envs.step()) and updates parameters: qf_loss.backward()"


def test_an_update_loop_inside_the_environment_step_is_part_of_it_with_a_note():
    assert notes(OFF_POLICY)[13] == ("loop inside the environment-interaction step loop at line 3: its updates are "
                                     "part of that loop's step, left unmarked")


PPO = """\
import torch

for iteration in range(num_iterations):
    for step in range(num_steps):
        with torch.no_grad():
            action, logprob, _, value = agent.get_action_and_value(next_obs)
        next_obs, reward, done, infos = envs.step(action.numpy())
    for epoch in range(update_epochs):
        for start in range(0, batch_size, minibatch_size):
            loss = compute_loss(agent, start)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""


def test_an_on_policy_iteration_of_rollout_then_updates_is_the_step():
    assert regions(PPO) == [(3, "step")]
    assert set(notes(PPO)) == {4, 8, 9}


def test_the_innermost_loop_that_steps_an_environment_and_updates_is_the_step():
    code = "for seed in range(3):\n" + textwrap.indent(OFF_POLICY.split("\n", 2)[2], "    ")
    assert regions(code) == [(1, "epoch"), (2, "step")]


def test_a_role_given_to_a_loop_inside_an_environment_step_decides():
    assert (13, "step") in regions(OFF_POLICY, role_overrides={13: "step"})


# -- generation and sampling are not evaluation -------------------------------------------------------------

def test_a_diffusion_sampling_loop_is_not_an_evaluation():
    code = """\
    import torch

    @torch.no_grad()
    def sample(model, shape):
        x = torch.randn(shape)
        for t in reversed(range(T)):
            x = model(x, torch.full((shape[0],), t))
        return x
    """
    assert regions(code) == []
    assert notes(code)[6] == ("not an evaluation: model() runs on its own output (x): generation or sampling step by "
                              "step, not an evaluation over data; left unmarked (--role 6=eval marks it)")


def test_a_token_by_token_generation_loop_is_not_an_evaluation():
    code = """\
    import torch

    @torch.no_grad()
    def generate(model, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits = model(idx)
            idx = torch.cat((idx, logits[:, -1:].argmax(-1)), dim=1)
        return idx
    """
    assert regions(code) == []


def test_a_greedy_decoder_loop_is_not_an_evaluation():
    code = """\
    import torch

    def translate(model, src):
        model.eval()
        with torch.no_grad():
            ys = start
            for i in range(max_len - 1):
                out = model.decode(ys, memory)
                ys = torch.cat([ys, out.argmax(-1)], dim=1)
        return ys
    """
    assert regions(code) == []


def test_a_counted_evaluation_that_fetches_its_batches_stays_an_evaluation():
    code = """\
    import torch

    @torch.no_grad()
    def estimate_loss():
        for k in range(eval_iters):
            X, Y = get_batch("val")
            logits, loss = model(X, Y)
            losses[k] = loss.item()
    """
    assert regions(code) == [(5, "eval")]


def test_a_recurrent_evaluation_handing_its_hidden_state_back_stays_an_evaluation():
    code = """\
    import torch

    def evaluate(source):
        model.eval()
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, bptt):
                data, targets = get_batch(source, i)
                output, hidden = model(data, hidden)
    """
    assert regions(code) == [(6, "eval")]


def test_a_generation_loop_given_the_eval_role_is_marked():
    code = """\
    import torch

    @torch.no_grad()
    def sample(model, x):
        for t in range(T):
            x = model(x)
    """
    assert regions(code, role_overrides={5: "eval"}) == [(5, "eval")]
