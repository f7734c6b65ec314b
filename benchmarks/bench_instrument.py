"""How much does ``instrument_source`` cost next to a bare libcst round trip?

Builds a large, deterministic, real-world-sized training script from many
varied chunks (PyTorch, TF1 sessions, TF2 GradientTape, gradient accumulation,
while loops, eval loops, Trainer classes, data prep, ...), then times in this
one process, best of ``--repeat`` runs after one warm-up:

  (a) baseline   ``libcst.parse_module(data).bytes``
  (b) rewrite    ``transforms.instrument_source(data, "big_train.py")``
  (c) detect     ``transforms.parse_source`` + ``transforms.detect``
  (d) no loops   a same-sized file without loops through ``instrument_source``
                 (the pre-check: no libcst parse when nothing is to be inserted)

and breaks (b) into its stages, replicated from ``transforms._instrument``,
``transforms._rewrite``, ``transforms._codegen`` and ``transforms._strip``;
then the same (b)/(a) on each ``samples/*.py`` (real scripts of about 100
lines). The target is
(b)/(a) <= 2.0. Only ratios against the baseline measured in the same process
mean anything; nothing here asserts on absolute times.

Usage:  .venv/bin/python benchmarks/bench_instrument.py [--lines N] [--repeat R] [--write PATH] [--no-samples]
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib.metadata
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import libcst as cst

import transforms
from transforms import LineMap, Mode, Outcome, detect, instrument_source, make_plan, parse_source
from transforms import _rewrite
from transforms._linemap import count_lines

TARGET = 2.0
NAME = "big_train.py"

# ---------------------------------------------------------------------------
# The synthetic script
# ---------------------------------------------------------------------------
# Placeholders: __I__ chunk index (unique names), __K__ 1..7, __H__ hidden size.

HEADER = '''\
"""A large synthetic training script for benchmarking autoitt.

It mixes PyTorch, TensorFlow 1 (sessions) and TensorFlow 2 (GradientTape)
training code, evaluation loops, a few trainer classes and plenty of code
that is not training at all (data preparation, logging, configuration).
Generated deterministically by benchmarks/bench_instrument.py.
"""

import argparse
import functools
import json
import logging
import math
import os
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
import tensorflow.compat.v1 as tf1
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

LOGGER = logging.getLogger(__name__)

# ----------------------------------------------------------------------------
# Global configuration
# ----------------------------------------------------------------------------
SEED = 0
EPOCHS = 3
BATCH_SIZE = 32
LEARNING_RATE = 1e-3
NUM_FEATURES = 16
NUM_CLASSES = 4
'''

CHUNKS: List[str] = [
    # 0: classic PyTorch epoch/step loop
    '''
def train_torch___I__(model, loader, epochs=__K__, device="cpu"):
    """Train ``model`` for a few epochs with SGD and cross-entropy (variant __I__)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * __K__, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    model.to(device)
    model.train()
    for epoch in range(epochs):
        running_loss = 0.0
        seen = 0
        for step, (inputs, targets) in enumerate(loader):
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            running_loss += loss.item() * inputs.size(0)
            seen += inputs.size(0)
            if step % 50 == 0:
                # Progress every 50 steps.
                LOGGER.info(
                    "epoch %d step %d: loss %.4f",
                    epoch,
                    step,
                    running_loss / max(seen, 1),
                )
        print(f"[__I__] epoch {epoch + 1}/{epochs}: loss {running_loss / max(seen, 1):.4f}")
    return model
''',
    # 1: TF1 session loop
    '''
def train_tf1___I__(session, train_op, loss_op, x_ph, y_ph, batches, epochs=__K__):
    """TF1 graph-mode training: fetch ``train_op`` with a feed dict each step."""
    history = []
    for epoch in range(epochs):
        epoch_losses = []
        for x_batch, y_batch in batches:
            _, loss_value = session.run(
                [train_op, loss_op],
                feed_dict={x_ph: x_batch, y_ph: y_batch},
            )
            epoch_losses.append(loss_value)
        mean_loss = float(np.mean(epoch_losses)) if epoch_losses else math.nan
        history.append(mean_loss)
        print("tf1 __I__ epoch", epoch, "loss", mean_loss)
    return history


def build_tf1_graph___I__(num_features=NUM_FEATURES, hidden=__H__):
    x_ph = tf1.placeholder(tf.float32, shape=[None, num_features], name="x___I__")
    y_ph = tf1.placeholder(tf.float32, shape=[None, 1], name="y___I__")
    weights = tf1.Variable(tf1.random_normal([num_features, hidden], stddev=0.1))
    out_w = tf1.Variable(tf1.random_normal([hidden, 1], stddev=0.1))
    hidden_out = tf.nn.relu(tf.matmul(x_ph, weights))
    prediction = tf.matmul(hidden_out, out_w)
    loss_op = tf1.reduce_mean(tf1.square(prediction - y_ph))
    train_op = tf1.train.GradientDescentOptimizer(0.05).minimize(loss_op)
    return x_ph, y_ph, train_op, loss_op
''',
    # 2: TF2 GradientTape + apply_gradients
    '''
def train_tf2___I__(model, dataset, epochs=__K__, learning_rate=1e-3):
    """Custom TF2 loop: GradientTape, then ``apply_gradients``."""
    optimizer = tf.keras.optimizers.Adam(learning_rate=learning_rate)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
    for epoch in range(epochs):
        for step, (x_batch, y_batch) in enumerate(dataset):
            with tf.GradientTape() as tape:
                logits = model(x_batch, training=True)
                loss_value = loss_fn(y_batch, logits)
                loss_value += sum(model.losses)
            grads = tape.gradient(loss_value, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            train_acc.update_state(y_batch, logits)
        print(f"tf2 __I__ epoch {epoch}: acc {float(train_acc.result()):.3f}")
        train_acc.reset_state()
    return model
''',
    # 3: gradient accumulation
    '''
def train_accumulate___I__(model, loader, optimizer, accum_steps=__K__ + 1, max_norm=1.0):
    """Gradient accumulation: step the optimizer every ``accum_steps`` batches."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for index, batch in enumerate(loader):
        outputs = model(**batch)
        loss = outputs.loss / accum_steps
        loss.backward()
        total += loss.item()
        if (index + 1) % accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return total
''',
    # 4: while loop with break
    '''
def train_until___I__(model, batches, optimizer, max_steps=100 * __K__, patience=5):
    """Train until ``max_steps`` or until the loss stops improving."""
    step = 0
    best = float("inf")
    bad_rounds = 0
    data_iter = iter(batches)
    while True:
        try:
            batch = next(data_iter)
        except StopIteration:
            data_iter = iter(batches)
            continue
        loss = model.compute_loss(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if loss.item() < best - 1e-4:
            best, bad_rounds = loss.item(), 0
        else:
            bad_rounds += 1
        if step >= max_steps or bad_rounds > patience:
            break
    return step, best
''',
    # 5: eval loops under torch.no_grad()
    '''
def evaluate___I__(model, loader, criterion=None):
    """Mean loss and accuracy of ``model`` over ``loader``."""
    criterion = criterion or nn.CrossEntropyLoss()
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for inputs, targets in loader:
            outputs = model(inputs)
            total_loss += criterion(outputs, targets).item() * inputs.size(0)
            correct += (outputs.argmax(dim=1) == targets).sum().item()
            count += inputs.size(0)
    return total_loss / max(count, 1), correct / max(count, 1)


@torch.no_grad()
def predict___I__(model, loader):
    predictions = []
    for (inputs,) in loader:
        logits = model(inputs)
        predictions.extend(logits.argmax(dim=-1).tolist())
    return predictions
''',
    # 6: a Trainer class
    '''
class Trainer__I__:
    """Owns model, optimizer and scheduler; ``fit`` runs epochs of ``_run_epoch``."""

    def __init__(self, model, lr=LEARNING_RATE * __K__, weight_decay=0.01):
        self.model = model
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=lr,
            weight_decay=weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=10, gamma=0.5)
        self.history: List[Dict[str, float]] = []

    def _train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, loader):
        self.model.train()
        total_loss = 0.0
        for x, y in loader:
            total_loss += self._train_step(x, y)
        self.scheduler.step()
        return total_loss / max(len(loader), 1)

    def validate(self, loader):
        self.model.eval()
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += self.criterion(self.model(x), y).item()
        return total / max(len(loader), 1)

    def fit(self, epochs, train_loader, val_loader):
        for epoch in range(epochs):
            train_loss = self._run_epoch(train_loader)
            val_loss = self.validate(val_loader)
            self.history.append({"epoch": epoch, "train": train_loss, "val": val_loss})
            print(
                f"Trainer__I__ epoch {epoch + 1}/{epochs}: "
                f"train {train_loss:.4f} val {val_loss:.4f}"
            )
        return self.history
''',
    # 7: data preparation, no training (loops that are not training)
    '''
@dataclass
class DataConfig__I__:
    """Where the data of experiment __I__ lives and how it is split."""

    root: str = "data/exp___I__"
    splits: Dict[str, float] = field(default_factory=lambda: {"train": 0.8, "val": 0.1, "test": 0.1})
    columns: List[str] = field(default_factory=lambda: ["f%d" % k for k in range(NUM_FEATURES)])
    shuffle: bool = True


def load_rows___I__(config: DataConfig__I__) -> List[Dict[str, float]]:
    rows = []
    for name in sorted(os.listdir(config.root)) if os.path.isdir(config.root) else []:
        if not name.endswith(".json"):
            continue
        with open(os.path.join(config.root, name)) as handle:
            record = json.load(handle)
        rows.append({column: float(record.get(column, 0.0)) for column in config.columns})
    if config.shuffle:
        random.Random(SEED + __I__).shuffle(rows)
    return rows


def normalise___I__(rows, columns):
    means = {c: sum(r[c] for r in rows) / max(len(rows), 1) for c in columns}
    spreads = {
        c: math.sqrt(sum((r[c] - means[c]) ** 2 for r in rows) / max(len(rows) - 1, 1)) or 1.0
        for c in columns
    }
    for row in rows:
        for column in columns:
            row[column] = (row[column] - means[column]) / spreads[column]
    return rows, means, spreads
''',
    # 8: printing / reporting loops
    '''
def report___I__(history, width=__H__):
    """Print a small table of the history; no training here."""
    print("=" * width)
    print(f"{'epoch':>6} {'train':>10} {'val':>10}")
    for epoch, record in enumerate(history):
        print(f"{epoch:>6} {record['train']:>10.4f} {record['val']:>10.4f}")
    best = min(history, key=lambda r: r["val"]) if history else None
    if best is not None:
        print(f"best val {best['val']:.4f}")
    counter = 0
    while counter < len(history):
        counter += 1
    lines = [json.dumps(record, sort_keys=True) for record in history if record]
    squares = {k: k * k for k in range(__K__ * 3)}
    return "\\n".join(lines), squares
''',
    # 9: @tf.function train_step and the loop that calls it
    '''
@tf.function
def tf_train_step___I__(model, optimizer, loss_fn, x, y):
    with tf.GradientTape() as tape:
        predictions = model(x, training=True)
        loss = loss_fn(y, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def fit_compiled___I__(model, dataset, val_dataset, epochs=__K__):
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.01)
    loss_fn = tf.keras.losses.MeanSquaredError()
    for epoch in range(epochs):
        epoch_loss, batches = 0.0, 0
        for x, y in dataset:
            epoch_loss += float(tf_train_step___I__(model, optimizer, loss_fn, x, y))
            batches += 1
        val_losses = [float(loss_fn(y, model(x, training=False))) for x, y in val_dataset]
        print(f"compiled __I__ epoch {epoch}: {epoch_loss / max(batches, 1):.4f} / {np.mean(val_losses):.4f}")
''',
    # 10: model definition, decorators, comprehensions, multi-line calls
    '''
class Net__I__(nn.Module):
    """A small MLP; ``forward`` has no loops worth marking."""

    def __init__(self, num_features=NUM_FEATURES, hidden=__H__, num_classes=NUM_CLASSES, depth=__K__):
        super().__init__()
        self.layers = nn.ModuleList(
            [nn.Linear(num_features if k == 0 else hidden, hidden) for k in range(depth)]
        )
        self.head = nn.Linear(hidden, num_classes)
        self.dropout = nn.Dropout(p=0.1)

    def forward(self, x):
        for layer in self.layers:
            x = self.dropout(F.relu(layer(x)))
        return self.head(x)

    @property
    def num_parameters(self):
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


@functools.lru_cache(maxsize=None)
def make_loader___I__(num_samples=256, batch_size=BATCH_SIZE, seed=SEED + __I__):
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(num_samples, NUM_FEATURES, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (num_samples,), generator=generator)
    return DataLoader(
        TensorDataset(features, labels),
        batch_size=batch_size,
        shuffle=False,
        drop_last=False,
    )
''',
    # 11: GAN-style two optimizers + Keras fit + nested helper
    '''
def train_gan___I__(generator, discriminator, loader, epochs=__K__, latent=__H__):
    opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()

    def noise(n):
        return torch.randn(n, latent)

    for epoch in range(epochs):
        for real, _ in loader:
            fake = generator(noise(real.size(0)))
            opt_d.zero_grad()
            d_loss = bce(discriminator(real), torch.ones(real.size(0), 1)) + bce(
                discriminator(fake.detach()), torch.zeros(real.size(0), 1)
            )
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            g_loss = bce(discriminator(fake), torch.ones(real.size(0), 1))
            g_loss.backward()
            opt_g.step()


def keras_baseline___I__(x_train, y_train, x_val, y_val):
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(NUM_FEATURES,)),
            tf.keras.layers.Dense(__H__, activation="relu"),
            tf.keras.layers.Dense(NUM_CLASSES),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x_train, y_train, validation_data=(x_val, y_val), epochs=__K__, verbose=0)
    return model, history
''',
]

FOOTER = '''

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--seed", type=int, default=SEED)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    model = Net0()
    loader = make_loader_0()
    train_torch_0(model, loader, epochs=args.epochs)
    print(evaluate_5(model, loader))


if __name__ == "__main__":
    main()
'''

# Same kind of text, without a single loop (not even in comprehensions' place:
# only straight-line code), so detection finds nothing to insert.
FLAT_CHUNK = '''
def configure___I__(options=None, scale=__K__):
    """Straight-line configuration code for component __I__ (no loops)."""
    options = dict(options or {})
    options.setdefault("name", "component___I__")
    options.setdefault("hidden", __H__ * scale)
    options.setdefault("dropout", 0.1 * scale)
    # Derived values, computed once.
    width = options["hidden"] // 2 + __K__
    ratio = math.sqrt(width) / (1.0 + options["dropout"])
    path = os.path.join("runs", options["name"], "config.json")
    summary = {
        "name": options["name"],
        "width": width,
        "ratio": round(ratio, 4),
        "path": path,
    }
    LOGGER.info(
        "configured %s: width=%d ratio=%.3f",
        options["name"],
        width,
        ratio,
    )
    return summary


@functools.lru_cache(maxsize=None)
def constant___I__(value=__I__):
    return value * 2 + __K__ if value % 2 else value // 2 - __K__


class Settings__I__:
    """A plain holder."""

    def __init__(self, seed=SEED + __I__):
        self.seed = seed
        self.name = f"settings-{seed}"
        self.data = {"seed": seed, "scale": __K__}

    def describe(self):
        text = json.dumps(self.data, sort_keys=True)
        return f"{self.name}: {text}"
'''


def _fill(template: str, index: int) -> str:
    return (
        template.replace("__I__", str(index))
        .replace("__K__", str(index % 7 + 1))
        .replace("__H__", str(16 * (index % 4 + 1)))
    )


def build_training_script(min_lines: int) -> str:
    """Chunks in a fixed rotation until ``min_lines``; chunk ``i`` names its functions ``*_i``."""
    parts = [HEADER]
    lines = HEADER.count("\n") + FOOTER.count("\n")
    index = 0
    while lines < min_lines or index < len(CHUNKS):
        chunk = _fill(CHUNKS[index % len(CHUNKS)], index)
        parts.append("\n" + chunk)
        lines += chunk.count("\n") + 1
        index += 1
    parts.append(FOOTER)
    return "".join(parts)


def build_flat_script(min_lines: int, min_bytes: int) -> str:
    """Same header, only loop-free chunks, at least as long (lines and bytes)."""
    header = HEADER.replace("It mixes", "Unlike its training twin, it has no loops; it mixes")
    parts = [header]
    lines, size, index = header.count("\n"), len(header), 0
    while lines < min_lines or size < min_bytes:
        chunk = "\n" + _fill(FLAT_CHUNK, index)
        parts.append(chunk)
        lines += chunk.count("\n")
        size += len(chunk)
        index += 1
    return "".join(parts)


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def interleaved(functions: Dict[str, Callable[[], object]], repeat: int) -> Dict[str, List[float]]:
    """Wall times (seconds) of each function over ``repeat`` rounds, after one warm-up round.

    Each round runs every function once, in turn, so that a change of machine
    load (other jobs on a shared box) hits all of them alike instead of
    skewing one measurement against another; it also gives per-round ratios.
    """
    times: Dict[str, List[float]] = {label: [] for label in functions}
    for round_ in range(repeat + 1):
        for label, function in functions.items():
            gc.collect()
            start = time.perf_counter()
            function()
            elapsed = time.perf_counter() - start
            if round_:
                times[label].append(elapsed)
    return times


BASELINE_STAGE = "(a) libcst round trip, same rounds"


def stage_breakdown(data: bytes, repeat: int) -> Dict[str, float]:
    """Best time of each stage of ``instrument_source``, run in order.

    Mirrors ``transforms._instrument.instrument`` step by step (same calls,
    same order, the same objects alive): ``parse_source``, ``detect``,
    ``make_plan``; ``_rewrite.rewrite_module`` split into its libcst parse, the
    parse of the lines to insert, the ``_StatementRewriter`` walk,
    ``_add_header`` and the code generation (``_codegen.generate_copy``) that
    notes the inserted lines; then the safety check: compile() of the copy,
    ``_strip.strip_module`` and the comparison of its bytes (generated reusing
    the copy's code, ``_codegen.generate_reusing``) with the input;
    then the line map. Plus a baseline round trip in every round. When
    ``instrument`` changes its steps, update this function.
    """
    from transforms import _codegen, _strip

    mode = Mode()
    stem = NAME.rsplit(".", 1)[0]
    script = NAME.rsplit("/", 1)[-1]
    stages: Dict[str, List[float]] = {}

    def timed(label: str, function: Callable[[], object]):
        start = time.perf_counter()
        value = function()
        stages.setdefault(label, []).append(time.perf_counter() - start)
        return value

    for run in range(repeat + 1):  # run 0 is the warm-up
        gc.collect()
        timed(BASELINE_STAGE, lambda: cst.parse_module(data).bytes)
        gc.collect()
        source = timed("ast.parse (parse_source)", lambda: parse_source(data, NAME))
        detection = timed("detect", lambda: detect(source, mode.label_overrides))
        plan = timed("make_plan", lambda: make_plan(detection, mode, script, stem))
        module = timed("libcst parse_module", lambda: cst.parse_module(data))
        statements = timed("parse the lines to insert",
                           lambda: _rewrite._parse_statements(plan, module.config_for_parsing))
        rewriter = _rewrite._StatementRewriter(plan, module, statements)
        updated = timed("_StatementRewriter walk", lambda: rewriter.rewrite(module))
        if rewriter.applied != len(plan.edits):
            raise AssertionError(f"applied {rewriter.applied} of {len(plan.edits)} edits: stage_breakdown is out of date")
        instrumented, header = timed("_add_header", lambda: _rewrite._add_header(updated, plan, statements))
        untouched, inserted = frozenset(rewriter.untouched), rewriter.inserted
        del rewriter, updated
        code, lines, shared = timed("codegen of the copy, noting inserted lines",
                                    lambda: _codegen.generate_copy(instrumented, inserted, header, untouched))
        output = code.encode(module.encoding)
        timed("safety: compile() of the copy", lambda: compile(output, NAME, "exec", dont_inherit=True))
        stripped = timed("safety: strip_module", lambda: _strip.strip_module(instrumented, untouched))
        if not timed("safety: stripped bytes == input",
                     lambda: _codegen.generate_reusing(stripped, instrumented, shared) == data):
            raise AssertionError("the stripped copy differs from the original: stage_breakdown is out of date")
        timed("line map", lambda: LineMap.from_inserted(count_lines(code), count_lines(data.decode(module.encoding)),
                                                        lines))
        # instrument frees both trees before it returns (the ast one once its
        # Result is dropped); freeing them here also keeps the next run's heap
        # (and so its GC work) the same as instrument sees.
        start = time.perf_counter()
        del source, detection, plan, module, statements, instrumented, inserted, code, output, stripped, shared
        stages.setdefault("free the trees", []).append(time.perf_counter() - start)
        if run == 0:
            stages.clear()
    return {label: min(times) for label, times in stages.items()}


def sample_ratios(repeat: int) -> List[Tuple[str, int, int, List[float], List[float], float]]:
    """(name, lines, regions, (a) times, (b) times, best _add_header) for each sample script that gets markers.

    The samples are real, typical-sized training scripts (around 100 lines),
    where fixed per-file costs weigh more than on the large synthetic file.
    """
    root = Path(__file__).resolve().parent.parent / "samples"
    rows = []
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        result = instrument_source(data, path.name)
        if result.outcome is not Outcome.INSTRUMENTED:
            continue
        times = interleaved(
            {
                "a": lambda: cst.parse_module(data).bytes,
                "b": lambda: instrument_source(data, path.name),
            },
            repeat,
        )
        module = cst.parse_module(data)
        statements = _rewrite._parse_statements(result.plan, module.config_for_parsing)
        updated = _rewrite._StatementRewriter(result.plan, module, statements).rewrite(module)
        header = interleaved({"h": lambda: _rewrite._add_header(updated, result.plan, statements)}, repeat)["h"]
        rows.append((path.name, data.count(b"\n"), len(result.detection.regions), times["a"], times["b"], min(header)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000, help="minimum lines of the synthetic script (default 5000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement, best is kept (default 5)")
    parser.add_argument("--write", metavar="PATH", type=Path, help="also write the synthetic training script here")
    parser.add_argument("--no-samples", action="store_true",
                        help="skip the same ratio on the project's samples/*.py (small real scripts)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    text = build_training_script(args.lines)
    ast.parse(text)  # must be valid Python
    data = text.encode("utf-8")
    flat_text = build_flat_script(text.count("\n"), len(data))
    ast.parse(flat_text)
    flat = flat_text.encode("utf-8")
    if args.write:
        args.write.write_bytes(data)

    # Sanity: the rewrite really happens, and the loop-free file is left alone.
    result = instrument_source(data, NAME)
    assert result.outcome is Outcome.INSTRUMENTED, result.outcome
    regions = len(result.detection.regions)
    # Every 12-chunk rotation (~470 lines) holds about 25 regions; "many" is a conservative share of that.
    assert regions >= max(10, text.count("\n") // 50), f"only {regions} regions found in {text.count(chr(10))} lines"
    assert len(result.plan.edits) == regions
    roles: Dict[str, int] = {}
    for region in result.detection.regions:
        roles[region.role] = roles.get(region.role, 0) + 1
    flat_result = instrument_source(flat, "flat.py")
    assert flat_result.outcome is Outcome.NOTHING_TO_DO, flat_result.outcome
    assert cst.parse_module(data).bytes == data
    inserted = len(result.output.splitlines()) - len(text.splitlines())
    flat_outcome = flat_result.outcome.value

    def detection_only():
        return detect(parse_source(data, NAME))

    del result, flat_result
    labels = {
        "a": "(a) libcst parse_module(data).bytes",
        "b": "(b) instrument_source (rewrite)",
        "c": "(c) parse_source + detect",
        "d": "(d) instrument_source, no loops",
        "flat": "    libcst round trip of the no-loop twin",
    }
    times = interleaved(
        {
            labels["a"]: lambda: cst.parse_module(data).bytes,
            labels["b"]: lambda: instrument_source(data, NAME),
            labels["c"]: detection_only,
            labels["d"]: lambda: instrument_source(flat, "flat.py"),
            labels["flat"]: lambda: cst.parse_module(flat).bytes,
        },
        args.repeat,
    )
    base = times[labels["a"]]
    baseline = min(base)

    def per_round(label: str) -> float:
        """Median over rounds of (this / baseline of the same round): robust to load drifting."""
        return statistics.median(t / b for t, b in zip(times[label], base))

    stages = stage_breakdown(data, args.repeat)
    samples = [] if args.no_samples else sample_ratios(args.repeat * 4)

    print(f"autoitt instrument_source benchmark  (python {sys.version.split()[0]}, libcst "
          f"{importlib.metadata.version('libcst')}, best of {args.repeat} after 1 warm-up)")
    print(f"transforms from {Path(transforms.__file__).parent}")
    print(f"training script: {text.count(chr(10))} lines, {len(data) / 1024:.0f} KiB, {regions} regions "
          f"({', '.join(f'{n} {r}' for r, n in sorted(roles.items()))}), {inserted} lines inserted")
    print(f"loop-free twin:  {flat_text.count(chr(10))} lines, {len(flat) / 1024:.0f} KiB, outcome: {flat_outcome}")
    print()
    print(f"{'measurement':<42} {'best ms':>9} {'median ms':>10} {'best/(a)':>9} {'per-round':>10}")
    for label, values in times.items():
        print(f"{label:<42} {min(values) * 1e3:>9.1f} {statistics.median(values) * 1e3:>10.1f} "
              f"{min(values) / baseline:>9.2f} {per_round(label):>10.2f}")
    ratio = min(times[labels["b"]]) / baseline
    print("(best/(a): best of each over best of (a); per-round: median of the ratios within one round)")
    print()
    print(f"(b)/(a) = {ratio:.2f}   target <= {TARGET:.1f}x: {'PASS' if ratio <= TARGET else 'FAIL'}"
          f"   (per-round median {per_round(labels['b']):.2f})")
    print(f"(c)/(a) = {min(times[labels['c']]) / baseline:.2f}")
    print(f"(d)/(a) = {min(times[labels['d']]) / baseline:.2f}")
    print()
    stage_base = stages.pop(BASELINE_STAGE)
    total = sum(stages.values())
    print(f"where (b) goes (stages of one instrument_source run timed one by one, best of {args.repeat};")
    print(f" x (a) against a round trip timed in the same rounds: {stage_base * 1e3:.1f} ms)")
    print(f"{'stage':<42} {'best ms':>9} {'share':>7} {'x (a)':>7}")
    for label, seconds in stages.items():
        print(f"{label:<42} {seconds * 1e3:>9.1f} {seconds / total:>7.1%} {seconds / stage_base:>7.2f}")
    print(f"{'sum of stages':<42} {total * 1e3:>9.1f} {'':>7} {total / stage_base:>7.2f}")
    if samples:
        print()
        print(f"the same ratio on samples/*.py (typical real scripts), best of {args.repeat * 4} rounds:")
        print(f"{'sample':<24} {'lines':>5} {'regions':>7} {'(a) ms':>7} {'(b) ms':>7} {'(b)/(a)':>7} "
              f"{'per-round':>9} {'_add_header ms':>14}  target")
        for name, count, found, a_times, b_times, header in samples:
            small_ratio = min(b_times) / min(a_times)
            median_ratio = statistics.median(b / a for a, b in zip(a_times, b_times))
            print(f"{name:<24} {count:>5} {found:>7} {min(a_times) * 1e3:>7.1f} {min(b_times) * 1e3:>7.1f} "
                  f"{small_ratio:>7.2f} {median_ratio:>9.2f} {header * 1e3:>14.1f}  "
                  f"{'PASS' if small_ratio <= TARGET else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
