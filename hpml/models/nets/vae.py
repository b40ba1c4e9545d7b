"""The MNIST VAE of study 3: fc1 784->400, fc21/fc22 400->20, fc3 20->400, fc4 400->784."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from hpml.ranges import Count


class VAE(nn.Module):
    """Fully connected VAE (Kingma & Welling); returns logits of the reconstruction, mu, logvar.

    Logits rather than probabilities, so the loss can use the numerically stable
    ``binary_cross_entropy_with_logits``; ``torch.sigmoid`` of them is the reconstruction.
    """

    # mu and logvar describe the same latent units: structured pruning removes them together
    # (in eval mode the reparameterisation that pairs them is not traced).
    prune_coupled = (("fc21", "fc22"),)

    def __init__(self, in_features: int = 784, hidden: Count = 400, latent: Count = 20) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, in_features)

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = torch.relu(self.fc1(x))
        return self.fc21(h), self.fc22(h)

    def decode(self, z: Tensor) -> Tensor:
        return self.fc4(torch.relu(self.fc3(z)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        mu, logvar = self.encode(x.flatten(1))
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        return self.decode(z), mu, logvar
