"""Train a tiny model with pytorch-ignite on synthetic data.

Training runs entirely through ignite: ``create_supervised_trainer`` makes the
trainer, ``create_supervised_evaluator`` the evaluator, which an event handler
runs after every epoch, and the script once more at the end. There is no
training loop in the file: the loops are ignite's.

Usage:
    python ignite_train.py
"""

import torch
import torch.nn as nn
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.metrics import Loss
from torch.utils.data import DataLoader, TensorDataset
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of ignite_train.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.ignite_train")

SEED = 0
EPOCHS = 3
BATCH_SIZE = 16
FEATURES = 32


def synthetic(samples, seed):
    """A deterministic regression set: y = x @ w + noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=generator)
    w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(SEED))
    return TensorDataset(x, x @ w + 0.1 * torch.randn(samples, 1, generator=generator))


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader = DataLoader(synthetic(256, SEED + 1), batch_size=BATCH_SIZE)
    val_loader = DataLoader(synthetic(64, SEED + 2), batch_size=BATCH_SIZE)

    model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.MSELoss()
    trainer = create_supervised_trainer(model, optimizer, criterion)
    evaluator = create_supervised_evaluator(model, metrics={"loss": Loss(criterion)})

    @trainer.on(Events.EPOCH_COMPLETED)
    def log_validation(engine):
        itt.task_begin(_autoitt_domain, "log_validation.evaluator")
        try:
            with itt.library(evaluator, "run", _autoitt_domain, "eval"):
                evaluator.run(val_loader)
        finally:
            itt.task_end(_autoitt_domain)
        print(f"Epoch {engine.state.epoch}/{EPOCHS}: train loss {engine.state.output:.6f}, "
              f"val loss {evaluator.state.metrics['loss']:.6f}")

    itt.resume()
    itt.task_begin(_autoitt_domain, "trainer")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()), itt.library(trainer, "run", _autoitt_domain, "train"):
            trainer.run(train_loader, max_epochs=EPOCHS)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()
    itt.resume()
    itt.task_begin(_autoitt_domain, "main.evaluator")
    torch.profiler.itt.range_push("evaluation")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()), itt.library(evaluator, "run", _autoitt_domain, "eval"):
            evaluator.run(val_loader)
    finally:
        torch.profiler.itt.range_pop()
        itt.task_end(_autoitt_domain)
        itt.pause()
    print(f"Final val loss {evaluator.state.metrics['loss']:.6f}")


if __name__ == "__main__":
    main()
