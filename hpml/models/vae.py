"""The VAE of study 3 as a LightningModule: loss = BCE reconstruction + KL divergence."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from hpml.data.spec import DataSpec
from hpml.errors import IncompatibleError
from hpml.models.base import HpmlModule, Measured


class VAEModule(HpmlModule):
    """Logs ``<stage>/loss``, ``<stage>/bce`` and ``<stage>/kld``, each per sample, per epoch."""

    modality = "image"

    def build_net(self, net: Callable[..., nn.Module], data: DataSpec) -> nn.Module:
        if data.value_range != (0.0, 1.0):
            raise IncompatibleError(
                "the VAE's BCE loss needs pixels in [0, 1], but the data is normalised; "
                "use unnormalised data (data=mnist keeps data.normalize=false)"
            )
        return net(in_features=data.num_features)

    def measure(
        self, output: tuple[Tensor, Tensor, Tensor], batch: tuple[Tensor, Tensor], stage: str
    ) -> Measured:
        (logits, mu, logvar), x = output, batch[0]
        # per sample: BCE summed over pixels, KL divergence to N(0, I) (Kingma & Welling)
        bce = F.binary_cross_entropy_with_logits(logits, x.flatten(1), reduction="sum") / len(x)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(x)
        return {"loss": bce + kld, "bce": bce, "kld": kld}
