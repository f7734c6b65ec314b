"""pytorch/examples' word language model (word_language_model/main.py), small and on synthetic tokens: an LSTM
trained by truncated backpropagation through time, batches cut by ``get_batch`` inside the loop, gradients
clipped, parameters updated by hand (``p.data.add_``), and an evaluation at each epoch's end."""
import math

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
ntokens, emsize, nhid, bptt, clip, lr = 200, 32, 64, 20, 0.25, 20.0
train_data = torch.randint(0, ntokens, (2400, 8))
val_data = torch.randint(0, ntokens, (400, 4))


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(ntokens, emsize)
        self.rnn = nn.LSTM(emsize, nhid, 2)
        self.decoder = nn.Linear(nhid, ntokens)

    def forward(self, input, hidden):
        output, hidden = self.rnn(self.encoder(input), hidden)
        return nn.functional.log_softmax(self.decoder(output), dim=-1).view(-1, ntokens), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(2, bsz, nhid), weight.new_zeros(2, bsz, nhid))


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


model = RNNModel()
criterion = nn.NLLLoss()


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(data_source.size(1))
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    hidden = model.init_hidden(train_data.size(1))
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)


if __name__ == "__main__":
    for epoch in range(1, 4):
        train()
        val_loss = evaluate(val_data)
        print(f"epoch {epoch} valid ppl {math.exp(min(val_loss, 50)):.1f}")
