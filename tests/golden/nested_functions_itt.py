"""Module-level training script: helper functions, no ``main()``.

Batches are built by a loop at module level, ``train_one_epoch`` holds the
step loop and ``evaluate`` runs an inference-mode evaluation loop.
"""

import torch
import torch.nn as nn
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of nested_functions.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.nested_functions")

SEED = 0
NUM_FEATURES = 4
BATCH_SIZE = 8
NUM_BATCHES = 5
LEARNING_RATE = 0.05


def train_one_epoch(model, batches, optimizer):
    model.train()
    total = 0.0
    itt.task_begin(_autoitt_domain, "step_loop")
    try:
        for x, y in batches:
            itt.task_begin(_autoitt_domain, "step")
            try:
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                total += loss.item()
            finally:
                itt.task_end(_autoitt_domain)
    finally:
        itt.task_end(_autoitt_domain)
    return total / len(batches)


def evaluate(model, batches):
    model.eval()
    total = 0.0
    with torch.inference_mode():
        itt.task_begin(_autoitt_domain, "eval_loop")
        try:
            for x, y in batches:
                itt.task_begin(_autoitt_domain, "eval")
                try:
                    total += nn.functional.mse_loss(model(x), y).item()
                finally:
                    itt.task_end(_autoitt_domain)
        finally:
            itt.task_end(_autoitt_domain)
    return total / len(batches)


if __name__ == "__main__":
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    # Data preparation: build a list of synthetic (x, y) batches.
    generator = torch.Generator().manual_seed(SEED)
    true_w = torch.randn(NUM_FEATURES, 1, generator=generator)
    batches = []
    for _ in range(NUM_BATCHES):
        x = torch.randn(BATCH_SIZE, NUM_FEATURES, generator=generator)
        y = x @ true_w + 0.1 * torch.randn(BATCH_SIZE, 1, generator=generator)
        batches.append((x, y))

    model = nn.Linear(NUM_FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)

    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            for epoch in range(2):
                itt.task_begin(_autoitt_domain, "epoch")
                try:
                    train_loss = train_one_epoch(model, batches, optimizer)
                    eval_loss = evaluate(model, batches)
                    print(f"Epoch {epoch + 1}: train loss {train_loss:.6f} eval loss {eval_loss:.6f}")
                finally:
                    itt.task_end(_autoitt_domain)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()

    print("Training completed.")
