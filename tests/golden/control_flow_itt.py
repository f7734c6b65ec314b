"""Training loops that exercise ``continue``, ``break``, ``return`` and for/else.

* ``train`` skips every third batch with ``continue`` and stops early with
  ``break`` once a step budget is exhausted.
* ``train_until_converged`` returns from inside its step loop when the loss
  drops below a threshold or a maximum number of steps is reached.
* ``find_first_large_batch`` uses a ``for``/``else`` loop over the data.
"""

import torch
import torch.nn as nn
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of control_flow.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.control_flow")

SEED = 0
NUM_BATCHES = 12
BATCH_SIZE = 8
NUM_FEATURES = 4
LEARNING_RATE = 0.05
SKIP_EVERY = 3
STEP_LIMIT = 6
LOSS_THRESHOLD = 0.05
MAX_STEPS = 50
LARGE_NORM = 100.0


def make_batches():
    """Synthetic linear-regression mini-batches."""
    generator = torch.Generator().manual_seed(SEED)
    true_w = torch.randn(NUM_FEATURES, 1, generator=generator)
    batches = []
    for _ in range(NUM_BATCHES):
        x = torch.randn(BATCH_SIZE, NUM_FEATURES, generator=generator)
        y = x @ true_w + 0.05 * torch.randn(BATCH_SIZE, 1, generator=generator)
        batches.append((x, y))
    return batches


def train(model, batches, optimizer, criterion):
    """One pass that skips some batches and stops at ``STEP_LIMIT`` updates."""
    steps_taken = 0
    itt.resume()
    itt.task_begin(_autoitt_domain, "train.step_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            for i, (x, y) in enumerate(batches):
                itt.task_begin(_autoitt_domain, "train.step")
                try:
                    if (i + 1) % SKIP_EVERY == 0:
                        # Skip every third batch (e.g. a held-out or corrupted shard).
                        continue
                    if steps_taken >= STEP_LIMIT:
                        print(f"  step limit reached at batch {i}")
                        break
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    steps_taken += 1
                    print(f"  batch {i}: loss {loss.item():.6f}")
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()
    return steps_taken


def train_until_converged(model, batches, optimizer, criterion):
    """Keep cycling over the batches until the loss is small enough."""
    step = 0
    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            while True:
                itt.task_begin(_autoitt_domain, "epoch")
                try:
                    itt.task_begin(_autoitt_domain, "train_until_converged.step_loop")
                    try:
                        for x, y in batches:
                            itt.task_begin(_autoitt_domain, "train_until_converged.step")
                            try:
                                optimizer.zero_grad()
                                loss = criterion(model(x), y)
                                loss.backward()
                                optimizer.step()
                                step += 1
                                if loss.item() < LOSS_THRESHOLD:
                                    print(f"  converged at step {step}: loss {loss.item():.6f}")
                                    return step
                                if step >= MAX_STEPS:
                                    print(f"  stopped at max steps {step}: loss {loss.item():.6f}")
                                    return step
                            finally:
                                itt.task_end(_autoitt_domain)
                    finally:
                        itt.task_end(_autoitt_domain)
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()


def find_first_large_batch(batches):
    """Return the index of the first batch with a large input norm, if any."""
    for i, (x, _) in enumerate(batches):
        if x.norm().item() > LARGE_NORM:
            print(f"Found large batch at index {i}")
            break
    else:
        print("No unusually large batches found")
        i = -1
    return i


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    batches = make_batches()
    find_first_large_batch(batches)

    model = nn.Linear(NUM_FEATURES, 1)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    print("Warm-up pass:")
    steps = train(model, batches, optimizer, criterion)
    print(f"Warm-up took {steps} steps")

    print("Training until convergence:")
    steps = train_until_converged(model, batches, optimizer, criterion)
    print(f"Convergence phase took {steps} steps")
    print("Training completed.")


if __name__ == "__main__":
    main()
