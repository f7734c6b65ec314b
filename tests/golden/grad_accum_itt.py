"""Training with gradient accumulation and a step learning-rate schedule.

Gradients from ``ACCUM`` consecutive micro-batches are summed before each
optimizer update; the learning rate is decayed once per epoch by ``StepLR``.
"""

import torch
import torch.nn as nn
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of grad_accum.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.grad_accum")

SEED = 0
NUM_FEATURES = 4
MICRO_BATCH_SIZE = 4
NUM_MICRO_BATCHES = 12
ACCUM = 4
EPOCHS = 3
LEARNING_RATE = 0.1
LR_STEP_SIZE = 1
LR_GAMMA = 0.5


def make_micro_batches():
    generator = torch.Generator().manual_seed(SEED)
    true_w = torch.randn(NUM_FEATURES, 1, generator=generator)
    micro_batches = []
    for _ in range(NUM_MICRO_BATCHES):
        x = torch.randn(MICRO_BATCH_SIZE, NUM_FEATURES, generator=generator)
        y = x @ true_w + 0.05 * torch.randn(MICRO_BATCH_SIZE, 1, generator=generator)
        micro_batches.append((x, y))
    return micro_batches


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    micro_batches = make_micro_batches()
    model = nn.Linear(NUM_FEATURES, 1)
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=LR_STEP_SIZE, gamma=LR_GAMMA
    )

    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            for epoch in range(EPOCHS):
                itt.task_begin(_autoitt_domain, "epoch")
                try:
                    model.train()
                    optimizer.zero_grad()
                    running_loss = 0.0
                    itt.task_begin(_autoitt_domain, "step_loop")
                    try:
                        for i, (x, y) in enumerate(micro_batches):
                            itt.task_begin(_autoitt_domain, "step")
                            try:
                                # Scale so the accumulated gradient matches a full-batch average.
                                loss = criterion(model(x), y) / ACCUM
                                loss.backward()
                                running_loss += loss.item()
                                if (i + 1) % ACCUM == 0:
                                    optimizer.step()
                                    optimizer.zero_grad()
                                    print(f"  epoch {epoch + 1} update {(i + 1) // ACCUM}: "
                                          f"loss {running_loss:.6f}")
                                    running_loss = 0.0
                            finally:
                                itt.task_end(_autoitt_domain)
                    finally:
                        itt.task_end(_autoitt_domain)
                    lr = scheduler.get_last_lr()[0]
                    scheduler.step()
                    print(f"Epoch {epoch + 1}/{EPOCHS} done (lr {lr:.6f})")
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()

    print("Training completed.")


if __name__ == "__main__":
    main()
