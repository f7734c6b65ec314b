"""pytorch/examples' VAE (vae/main.py), small and on synthetic data: Adam, a train loop and a no-grad test loop per epoch."""
import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

torch.manual_seed(0)
torch.set_num_threads(1)
# The data stands for MNIST read from disk: made without torch's operators, so that torch.profiler's table of
# the whole run (tests/test_operator_accuracy.py) holds the training's operators, not 65 uniform_ calls made
# before the loop, which rank among its top five.
rng = np.random.default_rng(0)
train_data = [torch.from_numpy(rng.random((64, 784), dtype=np.float32)) for _ in range(60)]
test_data = [torch.from_numpy(rng.random((256, 784), dtype=np.float32)) for _ in range(5)]


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE()
optimizer = optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, data in enumerate(train_data):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    print(f"epoch {epoch} loss {train_loss / len(train_data):.4f}")


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, data in enumerate(test_data):
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
    print(f"test loss {test_loss / len(test_data):.4f}")


if __name__ == "__main__":
    for epoch in range(1, 4):
        train(epoch)
        test(epoch)
