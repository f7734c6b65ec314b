"""Fit a linear model using ``while`` loops instead of ``for`` loops.

Two training phases are run on the same synthetic regression data:

* phase 1 uses ``while step < MAX_STEPS:`` with an explicit step counter;
* phase 2 uses ``while True:`` and breaks out once the counter hits a limit.
"""

import torch
import torch.nn as nn
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of while_loops.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.while_loops")

SEED = 0
NUM_SAMPLES = 32
NUM_FEATURES = 4
LEARNING_RATE = 0.05
MAX_STEPS = 10
FINETUNE_STEPS = 5
LOG_EVERY = 2


def make_data():
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=generator)
    true_w = torch.randn(NUM_FEATURES, 1, generator=generator)
    y = x @ true_w + 0.1 * torch.randn(NUM_SAMPLES, 1, generator=generator)
    return x, y


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    x, y = make_data()
    model = nn.Linear(NUM_FEATURES, 1)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    # Phase 1: bounded while loop.
    step = 0
    itt.resume()
    itt.task_begin(_autoitt_domain, "step@40_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            while step < MAX_STEPS:
                itt.task_begin(_autoitt_domain, "step@40")
                try:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    if step % LOG_EVERY == 0:
                        print(f"[phase 1] step {step}: loss {loss.item():.6f}")
                    step += 1
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()

    # Phase 2: unbounded while loop with an explicit exit condition.
    finetune_step = 0
    itt.resume()
    itt.task_begin(_autoitt_domain, "step@51_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            while True:
                itt.task_begin(_autoitt_domain, "step@51")
                try:
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    optimizer.step()
                    print(f"[phase 2] step {finetune_step}: loss {loss.item():.6f}")
                    finetune_step += 1
                    if finetune_step >= FINETUNE_STEPS:
                        break
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()

    print(f"Final loss {criterion(model(x), y).item():.6f}")
    print("Training completed.")


if __name__ == "__main__":
    main()
