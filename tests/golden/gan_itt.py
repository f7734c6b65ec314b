"""A tiny GAN on synthetic 4-d data with separate generator/discriminator steps."""

import torch
import torch.nn as nn
import ittapi.compat as itt
from instrumenter.runtime.collection import Collection as _autoitt_Collection

# autoitt: instrumented copy of gan.py; the markers are the lines using itt and _autoitt_*
itt = _autoitt_Collection(itt)
_autoitt_domain = itt.domain_create("autoitt.gan")

SEED = 0
LATENT_DIM = 2
DATA_DIM = 4
HIDDEN_DIM = 8
BATCH_SIZE = 8
NUM_BATCHES = 6
EPOCHS = 2
LEARNING_RATE = 0.01
NUM_SAMPLES_TO_SHOW = 3


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(LATENT_DIM, DATA_DIM),
            nn.ReLU(),
            nn.Linear(DATA_DIM, DATA_DIM),
        )

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(DATA_DIM, 1)

    def forward(self, x):
        return self.net(x)


def make_real_batches(generator):
    """Real data: Gaussian samples with a fixed non-zero mean."""
    mean = torch.tensor([1.0, -1.0, 0.5, 2.0])
    return [
        mean + 0.3 * torch.randn(BATCH_SIZE, DATA_DIM, generator=generator)
        for _ in range(NUM_BATCHES)
    ]


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    rng = torch.Generator().manual_seed(SEED)
    real_batches = make_real_batches(rng)

    gen = Generator()
    disc = Discriminator()
    criterion = nn.BCEWithLogitsLoss()
    opt_g = torch.optim.Adam(gen.parameters(), lr=LEARNING_RATE)
    opt_d = torch.optim.Adam(disc.parameters(), lr=LEARNING_RATE)

    ones = torch.ones(BATCH_SIZE, 1)
    zeros = torch.zeros(BATCH_SIZE, 1)

    itt.resume()
    itt.task_begin(_autoitt_domain, "epoch_loop")
    torch.profiler.itt.range_push("training")
    try:
        with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
            for epoch in range(EPOCHS):
                itt.task_begin(_autoitt_domain, "epoch")
                try:
                    itt.task_begin(_autoitt_domain, "step_loop")
                    try:
                        for step, real in enumerate(real_batches):
                            itt.task_begin(_autoitt_domain, "step")
                            try:
                                z = torch.randn(BATCH_SIZE, LATENT_DIM, generator=rng)

                                # Discriminator update: real -> 1, fake -> 0.
                                opt_d.zero_grad()
                                fake = gen(z)
                                loss_d = criterion(disc(real), ones) + criterion(disc(fake.detach()), zeros)
                                loss_d.backward()
                                opt_d.step()

                                # Generator update: try to make the discriminator say 1.
                                opt_g.zero_grad()
                                loss_g = criterion(disc(fake), ones)
                                loss_g.backward()
                                opt_g.step()

                                print(f"Epoch {epoch + 1} step {step}: "
                                      f"loss_d {loss_d.item():.6f} loss_g {loss_g.item():.6f}")
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

    # Not training: show a few generated samples.
    gen.eval()
    with torch.no_grad():
        itt.resume()
        itt.task_begin(_autoitt_domain, "eval_loop")
        torch.profiler.itt.range_push("evaluation")
        try:
            with torch.autograd.profiler.emit_itt(enabled=not torch.autograd._profiler_enabled()):
                for i in range(NUM_SAMPLES_TO_SHOW):
                    itt.task_begin(_autoitt_domain, "eval")
                    try:
                        z = torch.randn(1, LATENT_DIM, generator=rng)
                        sample = gen(z).squeeze(0)
                        values = " ".join(f"{v:.4f}" for v in sample.tolist())
                        print(f"sample {i}: {values}")
                    finally:
                        itt.task_end(_autoitt_domain)
        finally:
            torch.profiler.itt.range_pop()
            itt.task_end(_autoitt_domain)
            itt.pause()

    print("Training completed.")


if __name__ == "__main__":
    main()
