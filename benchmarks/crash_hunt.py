"""Crash hunt: real training shapes profiled many times with the built-in collector's sampler.

Each scenario is a small, real script (Keras ``fit``, a TF ``GradientTape`` loop, PyTorch with
DataLoader workers, Lightning validate-then-fit, a Hugging Face ``Trainer``, a torchrun gloo DDP
pair, threads created and destroyed quickly, generators, deep recursion, exceptions inside the
step, shared libraries unloaded and others loaded in their place), run under ``autoitt profile
--backend builtin`` at a sampling rate.  A run fails when it does not exit 0, when its output lacks
the script's last line, or when autoitt reports an error.  The table gives failures per runs for
each scenario and rate; the goal is 0 everywhere.

Usage::

    .venv/bin/python benchmarks/crash_hunt.py                      # every scenario, 20 runs, 1000 and 10000 Hz
    .venv/bin/python benchmarks/crash_hunt.py --runs 5 --rates 1000 keras_fit reload

``tests/test_crash_hunt.py`` runs each scenario once or twice per rate, in the suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

DONE = "crash-hunt: done"


@dataclass(frozen=True)
class Scenario:
    name: str
    script: str
    #: writes any file the script needs next to it (shared libraries); None: nothing
    prepare: Optional[Callable[[Path], None]] = None
    #: the launcher, when it is not plain python (torchrun)
    launcher: Optional[str] = None
    #: seconds one run may take
    timeout: float = 180.0


def _script(code: str) -> str:
    return textwrap.dedent(code).rstrip() + f"\nprint({DONE!r})\n"


KERAS_FIT = _script("""
    import numpy as np
    import keras

    x = np.random.rand(512, 32).astype("float32")
    y = np.random.randint(0, 10, 512)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=3, batch_size=32, verbose=0)
""")

TF_TAPE = _script("""
    import numpy as np
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)
    data = tf.data.Dataset.from_tensor_slices((np.random.rand(256, 16).astype("float32"),
                                               np.random.rand(256, 1).astype("float32"))).batch(16)
    for epoch in range(2):
        for x, y in data:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
""")

TORCH_WORKERS = _script("""
    import torch

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            x = torch.randn(3, 16, 16)
            return x, (x.sum() > 0).long()

    if __name__ == "__main__":
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                    torch.nn.Linear(8 * 14 * 14, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = torch.utils.data.DataLoader(Data(), batch_size=8, num_workers=2)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
""")

#: validate, then fit: Lightning's teardown after validate() puts every signal handler back as Python's table has
#: it, which used to leave the sampling signal at its default (no samples in fit at all); each step burns 20 ms of
#: CPU, so that every step region has samples (tests/test_sampler_guest.py checks it)
LIGHTNING_VALIDATE_FIT = _script("""
    import time

    import torch
    import pytorch_lightning as pl

    def burn(seconds):
        end = time.thread_time() + seconds
        total = 0
        while time.thread_time() < end:
            for i in range(2000):
                total += i
        return total

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, index):
            burn(0.02)
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, index):
            self.log("val", self.layer(batch[0]).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def loader():
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(24, 4)), batch_size=4)

    trainer = pl.Trainer(max_epochs=1, limit_train_batches=6, limit_val_batches=2, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    model = Model()
    trainer.validate(model, loader())
    trainer.fit(model, loader())
""")

HF_TRAINER = _script("""
    import tempfile

    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, num_labels=2)
    data = [{"input_ids": torch.randint(0, 32, (8,)), "labels": torch.tensor(i % 2)} for i in range(32)]
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), num_train_epochs=2, per_device_train_batch_size=4,
                             report_to=[], logging_strategy="no", save_strategy="no", use_cpu=True,
                             disable_tqdm=True)
    Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data).train()
""")

DDP_GLOO = _script("""
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(20):
        optimizer.zero_grad()
        model(torch.randn(16, 32)).sum().backward()
        optimizer.step()
    dist.barrier()
    del model
    dist.destroy_process_group()
""")

THREAD_CHURN = _script("""
    import threading

    def work():
        total = 0
        for i in range(20000):
            total += i

    for step in range(30):
        threads = [threading.Thread(target=work) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
""")

GENERATORS_RECURSION_EXCEPTIONS = _script("""
    import sys

    sys.setrecursionlimit(10000)

    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)

    def batches():
        for i in range(200):
            try:
                yield [j * j for j in range(2000)]
            finally:
                pass

    for step, batch in enumerate(batches()):
        try:
            deep(3000)
            if step % 7 == 0:
                raise ValueError(step)
        except ValueError:
            pass
""")

#: Every Python frame shape at once, in four threads and the main one (the per-version hunt of README's
#: "Python versions": the frame walk's differences between versions are in how frames chain): generator
#: frames, deep recursion, exceptions raised through frames, a class's methods, a coroutine driven by hand.
PYTHON_FRAMES = _script("""
    import sys, threading

    sys.setrecursionlimit(10000)

    def deep(n):
        if n == 0:
            raise LookupError("bottom")
        return deep(n - 1)

    def pipeline(count):
        for i in range(count):
            try:
                yield sum(j * j for j in range(300))
            finally:
                pass

    class Model:
        def step(self, batch):
            try:
                deep(400 + batch % 200)
            except LookupError:
                pass
            return [x for x in pipeline(20)]

    async def coroutine(model, batch):
        return model.step(batch)

    def work(steps):
        model = Model()
        for batch in range(steps):
            runner = coroutine(model, batch)
            try:
                runner.send(None)
            except StopIteration:
                pass

    threads = [threading.Thread(target=work, args=(60,)) for _ in range(4)]
    for t in threads:
        t.start()
    work(120)
    for t in threads:
        t.join()
""")

RELOAD = _script("""
    import ctypes, _ctypes, os

    for i in range(200):
        lib = ctypes.CDLL(os.path.abspath("liba.so" if i % 2 == 0 else "libb.so"))
        for step in range(3):
            lib.work(200000)
        _ctypes.dlclose(lib._handle)
""")

#: two libraries of different layout whose work() sits at the same offset: after one is closed, the other is
#: loaded where it was, and an unwinder that kept the first one's tables would read unmapped memory
LIB_A = ("int work(int n) { volatile int s = 0; for (int i = 0; i < n; i++) { s += i * 3; if (s & 1) s ^= n; } "
         "return s; }\n" + "\n".join(
             f"__attribute__((used)) static int pad{k}(int n) {{ volatile int s = {k}; "
             f"for (int i = 0; i < n; i++) s ^= i + {k}; return s; }}" for k in range(400)))
LIB_B = ("int work(int n) { volatile long s = 7; for (int i = 0; i < n; i++) { s = s * 31 + i; if (s & 2) s -= n; } "
         "return (int)s; }\n")


def build_reload_libraries(folder: Path) -> None:
    """Compiles liba.so and libb.so into folder (needs cc)."""
    for name, source in (("liba", LIB_A), ("libb", LIB_B)):
        (folder / f"{name}.c").write_text(source)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(folder / f"{name}.so"),
                        str(folder / f"{name}.c")], check=True)


SCENARIOS: Dict[str, Scenario] = {s.name: s for s in [
    Scenario("keras_fit", KERAS_FIT),
    Scenario("tf_gradient_tape", TF_TAPE),
    Scenario("torch_dataloader_workers", TORCH_WORKERS),
    Scenario("lightning_validate_fit", LIGHTNING_VALIDATE_FIT),
    Scenario("hf_trainer", HF_TRAINER),
    # torchrun beside this interpreter: autoitt looks a launcher up on PATH, which need not hold the venv's bin
    Scenario("torchrun_gloo_ddp", DDP_GLOO, launcher=f"{Path(sys.executable).parent / 'torchrun'} --nproc_per_node 2"),
    Scenario("thread_churn", THREAD_CHURN),
    Scenario("generators_recursion_exceptions", GENERATORS_RECURSION_EXCEPTIONS),
    Scenario("library_reload", RELOAD, prepare=build_reload_libraries),
    Scenario("python_frames", PYTHON_FRAMES),
]}


@dataclass
class Outcome:
    ok: bool
    returncode: int
    seconds: float
    why: str = ""


def run_once(scenario: Scenario, rate: int, folder: Path) -> Outcome:
    """Profiles the scenario once in folder (which holds train.py and what prepare wrote)."""
    command = [sys.executable, "-m", "instrumenter", "profile", "--backend", "builtin", "--sample-rate", str(rate),
               "-r", "out"]
    if scenario.launcher:
        command += ["--launcher", scenario.launcher]
    command.append("train.py")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("INTEL_LIBITTNOTIFY", "AUTOITT_"))}
    shutil.rmtree(folder / "out", ignore_errors=True)
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True,
                              timeout=scenario.timeout)
    except subprocess.TimeoutExpired:
        return Outcome(False, -1, time.monotonic() - start, f"timed out after {scenario.timeout:.0f} s")
    seconds = time.monotonic() - start
    output = done.stdout + done.stderr
    if done.returncode != 0:
        return Outcome(False, done.returncode, seconds, output[-2000:])
    if DONE not in output:
        return Outcome(False, 0, seconds, "the script's last line is missing:\n" + output[-2000:])
    return Outcome(True, 0, seconds)


def prepared(scenario: Scenario, parent: Path) -> Path:
    """A folder holding the scenario's train.py and what it needs."""
    folder = Path(tempfile.mkdtemp(prefix=f"{scenario.name}-", dir=parent))
    (folder / "train.py").write_text(scenario.script)
    if scenario.prepare:
        scenario.prepare(folder)
    return folder


def hunt(names: Sequence[str], runs: int, rates: Sequence[int], show: int = 2) -> List[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="autoitt-crash-hunt-") as parent:
        for name in names:
            scenario = SCENARIOS[name]
            folder = prepared(scenario, Path(parent))
            for rate in rates:
                outcomes = [run_once(scenario, rate, folder) for _ in range(runs)]
                failures = [o for o in outcomes if not o.ok]
                row = {"scenario": name, "rate": rate, "runs": runs, "failures": len(failures),
                       "median_s": sorted(o.seconds for o in outcomes)[len(outcomes) // 2]}
                rows.append(row)
                print(f"{name:34s} {rate:6d} Hz  {len(failures)}/{runs} failed  (median {row['median_s']:.1f} s)",
                      flush=True)
                for failure in failures[:show]:
                    print(textwrap.indent(f"exit {failure.returncode}: {failure.why}", "    "), flush=True)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help=f"scenarios to run (default: all): {', '.join(SCENARIOS)}")
    parser.add_argument("--runs", type=int, default=20, help="runs per scenario and rate (default 20)")
    parser.add_argument("--rates", default="1000,10000", help="sampling rates, comma-separated (default 1000,10000)")
    args = parser.parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    rows = hunt(names, args.runs, [int(r) for r in args.rates.split(",")])
    return 1 if any(row["failures"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
