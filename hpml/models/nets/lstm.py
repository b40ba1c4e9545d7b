"""Sentiment classifier of study 1: embedding, multi-layer LSTM, linear head on the last state."""

from __future__ import annotations

from typing import Annotated

import torch
from torch import Tensor, nn

from hpml.ranges import Count, Range


class LSTMClassifier(nn.Module):
    """Embedding -> LSTM -> dropout -> Linear, reading the final hidden state of the top layer.

    Sequences are left-padded (id 0), so the final step is always a real token. With
    ``bidirectional`` the top layer's forward and backward final states are concatenated.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int = 2,
        embedding_dim: Count = 128,
        hidden_size: Count = 128,
        num_layers: Count = 2,
        bidirectional: bool = False,
        dropout: Annotated[float, Range(ge=0, lt=1)] = 0.0,
        padding_idx: int = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=padding_idx)
        self.lstm = nn.LSTM(
            embedding_dim,
            hidden_size,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(hidden_size * (2 if bidirectional else 1), num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        _, (hidden, _) = self.lstm(self.embedding(tokens))
        top = hidden[-2:] if self.lstm.bidirectional else hidden[-1:]
        return self.fc(self.dropout(torch.cat(list(top), dim=1)))
