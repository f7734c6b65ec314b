"""pytorch/examples' MNIST (mnist/main.py), small and on synthetic images: a conv net trained from a DataLoader
with two worker processes at batches of 64, and tested at each epoch's end at batches of 1000 (one test batch
weighs as much as a dozen training steps)."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(2304, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def train(model, loader, optimizer):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()


def test(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            correct += output.argmax(dim=1).eq(target).sum().item()
    return correct


if __name__ == "__main__":
    train_set = TensorDataset(torch.randn(3200, 1, 28, 28), torch.randint(0, 10, (3200,)))
    test_set = TensorDataset(torch.randn(2000, 1, 28, 28), torch.randint(0, 10, (2000,)))
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=2)
    test_loader = DataLoader(test_set, batch_size=1000, num_workers=2)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(1, 3):
        train(model, train_loader, optimizer)
        print(f"epoch {epoch}: {test(model, test_loader)} correct")
