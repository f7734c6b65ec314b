"""A torch.compile training loop (the shape of PyTorch's "Introduction to torch.compile" tutorial), small and on
synthetic data: a compiled MLP with a LayerNorm, SGD with momentum, and a no-grad evaluation each epoch, which
compiles the forward a second time (an inference graph)."""
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
torch.set_num_threads(1)
# Data made without torch's operators, as if read from disk: torch.profiler's table of the whole run
# (tests/test_operator_accuracy.py) then holds the training's operators, not normal_ calls made before the loop.
rng = np.random.default_rng(0)


def batches(n, size):
    return [(torch.from_numpy(rng.standard_normal((size, 256), dtype=np.float32)),
             torch.from_numpy(rng.integers(0, 10, size))) for _ in range(n)]


train_data = batches(50, 64)
test_data = batches(4, 256)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.norm = nn.LayerNorm(512)
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


model = Classifier()
compiled = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train(epoch):
    model.train()
    for data, target in train_data:
        optimizer.zero_grad()
        loss = F.cross_entropy(compiled(data), target)
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")


def test():
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_data:
            correct += (compiled(data).argmax(1) == target).sum().item()
    print(f"accuracy {correct / (256 * len(test_data)):.3f}")


for epoch in range(1, 4):
    train(epoch)
    test()
