"""Class-based training: a small ``Trainer`` wrapping model, optimizer and loops."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of trainer_class.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.trainer_class")

SEED = 0
NUM_FEATURES = 4
TRAIN_SAMPLES = 48
TEST_SAMPLES = 16
BATCH_SIZE = 8
LEARNING_RATE = 0.05
EPOCHS = 3


class Trainer:
    """Owns the model and optimizer, and runs training/evaluation loops."""

    def __init__(self, model, lr=LEARNING_RATE):
        self.model = model
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)

    def _train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = self.criterion(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, loader):
        self.model.train()
        total_loss = 0.0
        itt.task_begin(_autoitt_domain, "step_loop")
        try:
            for x, y in loader:
                itt.task_begin(_autoitt_domain, "step")
                try:
                    total_loss += self._train_step(x, y)
                finally:
                    itt.task_end(_autoitt_domain)
        finally:
            itt.task_end(_autoitt_domain)
        return total_loss / len(loader)

    def fit(self, epochs, train_loader, test_loader):
        itt.resume()
        itt.task_begin(_autoitt_domain, "epoch_loop")
        torch.profiler.itt.range_push("training")
        try:
            with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
                for epoch in range(epochs):
                    itt.task_begin(_autoitt_domain, "epoch")
                    try:
                        train_loss = self._run_epoch(train_loader)
                        eval_loss = self.evaluate(test_loader)
                        print(
                            f"Epoch {epoch + 1}/{epochs}: train loss {train_loss:.6f} "
                            f"eval loss {eval_loss:.6f}"
                        )
                    finally:
                        itt.task_end(_autoitt_domain)
        finally:
            torch.profiler.itt.range_pop()
            itt.task_end(_autoitt_domain)
            itt.pause()

    def evaluate(self, loader):
        self.model.eval()
        total_loss = 0.0
        with torch.no_grad():
            itt.task_begin(_autoitt_domain, "eval_loop")
            try:
                for x, y in loader:
                    itt.task_begin(_autoitt_domain, "eval")
                    try:
                        total_loss += self.criterion(self.model(x), y).item()
                    finally:
                        itt.task_end(_autoitt_domain)
            finally:
                itt.task_end(_autoitt_domain)
        return total_loss / len(loader)


def make_loader(num_samples, true_w, generator):
    x = torch.randn(num_samples, NUM_FEATURES, generator=generator)
    y = x @ true_w + 0.1 * torch.randn(num_samples, 1, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=False)


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    generator = torch.Generator().manual_seed(SEED)
    true_w = torch.randn(NUM_FEATURES, 1, generator=generator)
    train_loader = make_loader(TRAIN_SAMPLES, true_w, generator)
    test_loader = make_loader(TEST_SAMPLES, true_w, generator)

    trainer = Trainer(nn.Linear(NUM_FEATURES, 1))
    trainer.fit(EPOCHS, train_loader, test_loader)
    print("Training completed.")


if __name__ == "__main__":
    main()
