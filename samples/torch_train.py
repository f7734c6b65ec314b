"""Train a tiny convolutional model with PyTorch on synthetic image data.

This sample mirrors the classic "hello world" PyTorch training script:
a Conv2d + BatchNorm2d + ReLU block is trained with SGD and an MSE loss on
randomly generated (but fully deterministic) data, then evaluated on a
held-out synthetic test split.

Usage:
    python torch_train.py [--epochs N] [--train-samples N] [--log-every N]

The defaults make a run of a few seconds, 16 steps; `make demo` asks for a
longer one, so that the profile's hotspots stand on a few hundred samples.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

# ----------------------------------------------------------------------------
# Hyper-parameters and constants
# ----------------------------------------------------------------------------
SEED = 0
EPOCHS = 2
BATCH_SIZE = 8
LEARNING_RATE = 0.01
MOMENTUM = 0.9
TRAIN_SAMPLES = 64
TEST_SAMPLES = 16
IMAGE_SIZE = 16
IN_CHANNELS = 3
OUT_CHANNELS = 6
KERNEL_SIZE = 3


class SyntheticImageDataset(Dataset):
    """Deterministic random images paired with random target feature maps.

    All samples are generated once in ``__init__`` from a dedicated
    ``torch.Generator`` so the data does not depend on global RNG state.
    """

    def __init__(self, num_samples, seed):
        generator = torch.Generator().manual_seed(seed)
        out_size = IMAGE_SIZE - KERNEL_SIZE + 1
        self.data = torch.randn(
            num_samples, IN_CHANNELS, IMAGE_SIZE, IMAGE_SIZE, generator=generator
        )
        self.targets = torch.rand(
            num_samples, OUT_CHANNELS, out_size, out_size, generator=generator
        )

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        return self.data[index], self.targets[index]


class ConvNet(nn.Module):
    """A single Conv2d -> BatchNorm2d -> ReLU block."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE)
        self.bn = nn.BatchNorm2d(OUT_CHANNELS)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Train a tiny conv net on synthetic images.")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="passes over the training data")
    parser.add_argument("--train-samples", type=int, default=TRAIN_SAMPLES, help="training images")
    parser.add_argument("--log-every", type=int, default=1, help="print the loss every N batches")
    return parser.parse_args(argv)


def main():
    args = parse_args()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    train_dataset = SyntheticImageDataset(args.train_samples, seed=SEED)
    test_dataset = SyntheticImageDataset(TEST_SAMPLES, seed=SEED + 1)

    # Data preparation: compute simple per-channel statistics of the training
    # inputs. This is a plain loop over channels, not part of training.
    print("Training data statistics:")
    for channel in range(IN_CHANNELS):
        channel_values = train_dataset.data[:, channel]
        mean = channel_values.mean().item()
        std = channel_values.std().item()
        print(f"  channel {channel}: mean={mean:.6f} std={std:.6f}")

    train_loader = DataLoader(
        train_dataset, batch_size=BATCH_SIZE, shuffle=False, num_workers=0
    )
    test_loader = DataLoader(
        test_dataset, batch_size=BATCH_SIZE, shuffle=False, num_workers=0
    )

    model = ConvNet()
    criterion = nn.MSELoss()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM
    )

    for epoch in range(args.epochs):
        # Training phase
        model.train()
        for batch_index, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            if batch_index % args.log_every == 0:
                print(
                    f"Epoch {epoch + 1}/{args.epochs} batch {batch_index}: "
                    f"train loss {loss.item():.6f}"
                )

        # Evaluation phase
        model.eval()
        eval_loss = 0.0
        num_batches = 0
        with torch.no_grad():
            for data, target in test_loader:
                output = model(data)
                eval_loss += criterion(output, target).item()
                num_batches += 1
        print(f"Epoch {epoch + 1}/{args.epochs}: eval loss {eval_loss / num_batches:.6f}")

    print("Training completed.")


if __name__ == "__main__":
    main()
