"""The tiny torch training scripts several test modules instrument or run, one copy each, named for its shape.

Text only: importing this module imports no framework, so a test module may import it on the version matrix's
Pythons without torch (scripts/version_matrix.sh). There tests/conftest.py skips each test that runs one of these
scripts, reading the script through the name the test uses; a test that only instruments or strips one runs.
"""

from __future__ import annotations

#: The smallest torch training autoitt instruments: a model, an optimizer, three steps at module level.
TORCH_TRAIN = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.ones(4)).sum()
    loss.backward()
    optimizer.step()
"""

#: TORCH_TRAIN seeded, zeroing its gradients each step, on a batch of 8, printing "done" when it ends.
TORCH_TRAIN_SEEDED = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = model(torch.ones(8, 4)).sum()
    loss.backward()
    optimizer.step()
print("done")
"""
