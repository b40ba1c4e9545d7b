"""Offline data with a learnable signal: the embedded default, so every model runs anywhere.

Each image class is a figure of a few connected pen strokes in its own colour, drawn with each
sample's own shift, rotation, scale and pen width on a background of its own: a VAE has
low-dimensional structure to learn, a CNN shapes to find wherever they lie. Some images may
borrow another class's colour and backdrop, so that colour alone does not name the class and a
classifier has shapes left to learn after its first epochs. Token sequences mix a small
sentiment lexicon per class, with words of other classes as confusers, into neutral tokens.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial
from typing import Annotated, NamedTuple

import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import Dataset, TensorDataset

from hpml.data.base import DataDescription, HpmlDataModule
from hpml.data.spec import DataSpec
from hpml.errors import ConfigError, one_of, positive_int
from hpml.ranges import NonNegative, Range

MODALITIES = ("image", "tokens")
STROKES = 4  # segments per class figure: enough for digit-like variety, cheap to draw
MAX_SHIFT = 0.2  # of the half-width: about 3 pixels at 28x28
MAX_ANGLE = 0.35  # radians, about 20 degrees
SCALES = (0.75, 1.1)
PEN_WIDTHS = (0.08, 0.14)  # half-widths, of the half-width: a 2-4 pixel pen at 28x28
LEXICON = 16  # sentiment words per class, fewer when the vocabulary is small
FIELD_SIZE = 64  # most pixels a class's distance field has a side: 224x224 ones are upsampled
OWN_WORDS = 0.8  # share of a sequence's sentiment words from its own class's lexicon
OWN_COLOUR = 0.75  # share of images in their own class's colour (conf/data/synthetic.yaml)
SPLIT_SEEDS = {"train": 0, "val": 1_000_000, "test": 2_000_000}  # added to the data's seed
STAGE_SPLITS = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}


class Prototypes(NamedTuple):
    """What each class looks like: ``strokes`` (classes x STROKES x 4: segment ends ``x0, y0,
    x1, y1`` in [-1, 1]), ``fields`` (classes x 1 x side x side, side at most FIELD_SIZE: each
    pixel's distance to its class's strokes), ``colours`` (classes x channels, in [0.4, 1]) and
    ``layouts`` (classes x channels x 4 x 4, in [0, 1]: each class's backdrop before
    :meth:`backdrop` upsamples it)."""

    strokes: Tensor
    fields: Tensor
    colours: Tensor
    layouts: Tensor

    def backdrop(self, label: int, size: int) -> Tensor:
        """Class ``label``'s backdrop, ``channels x size x size``, upsampled per sample: for many
        classes at large sizes, upsampling them all up front would hold too much memory."""
        return F.interpolate(self.layouts[label : label + 1], size=(size, size), mode="bilinear")[0]


@lru_cache(maxsize=4)
def prototypes(num_classes: int, channels: int, size: int, seed: int) -> Prototypes:
    """Each class's figure (a polyline through STROKES + 1 random points), pen colour and, for
    colour images, a coarse 4x4 backdrop; cached, so a sweep's jobs in one process draw the same."""
    generator = torch.Generator().manual_seed(seed)
    points = (torch.rand(num_classes, STROKES + 1, 2, generator=generator) * 2 - 1) * 0.6
    strokes = torch.cat([points[:, :-1], points[:, 1:]], dim=2)
    colours = 0.4 + 0.6 * torch.rand(num_classes, channels, generator=generator)
    field_size = min(size, FIELD_SIZE)
    fields = torch.stack([distance_field(figure, field_size) for figure in strokes]).unsqueeze(1)
    layouts = torch.rand(num_classes, channels, 4, 4, generator=generator)
    return Prototypes(strokes, fields, colours, layouts)


@lru_cache(maxsize=4)
def pixel_centres(size: int) -> Tensor:
    """Homogeneous coordinates ``(x, y, 1)`` of a ``size x size`` image's pixel centres in
    [-1, 1] (``size x size x 1 x 3``), as ``grid_sample`` reads them; each sample warps them
    with a product and a sum, cheaper than ``F.affine_grid`` per sample (docs/metrics.md)."""
    axis = (torch.arange(size, dtype=torch.float32) + 0.5) * (2 / size) - 1
    y, x = torch.meshgrid(axis, axis, indexing="ij")
    return torch.stack([x, y, torch.ones_like(x)], dim=-1).unsqueeze(-2)


def distance_field(strokes: Tensor, size: int) -> Tensor:
    """Distance (``size x size``, in [-1, 1] units) from each pixel centre to the nearest of
    ``strokes`` (segments ``x0, y0, x1, y1``): computed once per class, then warped per sample
    (:class:`SyntheticImages`), cheaper than drawing each sample's strokes."""
    grid = pixel_centres(size)[..., :2].reshape(-1, 1, 2)
    start, end = strokes[:, :2], strokes[:, 2:]
    along = end - start
    t = ((grid - start) * along).sum(-1) / along.pow(2).sum(-1).clamp_min(1e-8)
    nearest = start + t.clamp(0, 1).unsqueeze(-1) * along
    return (grid - nearest).norm(dim=-1).amin(dim=1).reshape(size, size)


class SyntheticImages(Dataset):
    """Images in [0, 1]: the label's figure, moved, turned, scaled and pen-sized per sample on the
    class's backdrop (another class's colour and backdrop for a ``1 - own_colour`` share), plus
    noise. Sample ``i`` comes from seed ``seed + i``: the same on every run and in every
    worker."""

    def __init__(
        self,
        size: int,
        shape: tuple[int, int, int],
        num_classes: int,
        noise: float,
        seed: int,
        templates: Prototypes,
        own_colour: float = OWN_COLOUR,
    ) -> None:
        self.size, self.shape, self.num_classes = size, shape, num_classes
        self.noise, self.seed, self.templates = noise, seed, templates
        self.own_colour = own_colour

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed + index)
        label = int(torch.randint(self.num_classes, (), generator=generator))
        # the sample's factors: angle, scale, shift x and y, pen width, background level, and
        # whether (then which other class's) colour and backdrop it borrows
        u = torch.rand(8, generator=generator).tolist()
        angle = (2 * u[0] - 1) * MAX_ANGLE
        scale = SCALES[0] + u[1] * (SCALES[1] - SCALES[0])
        shift_x, shift_y = ((2 * u[2] - 1) * MAX_SHIFT, (2 * u[3] - 1) * MAX_SHIFT)
        width = PEN_WIDTHS[0] + u[4] * (PEN_WIDTHS[1] - PEN_WIDTHS[0])
        # where each output pixel lies on the class's figure: the inverse of turn, scale, shift
        cos, sin = math.cos(angle) / scale, math.sin(angle) / scale
        inverse = [
            [cos, sin, -(cos * shift_x + sin * shift_y)],
            [-sin, cos, sin * shift_x - cos * shift_y],
        ]
        channels, height, _ = self.shape
        side = min(height, FIELD_SIZE)  # ink of larger images is drawn at this side, then resized
        grid = (pixel_centres(side) * torch.tensor(inverse)).sum(-1).unsqueeze(0)
        field = self.templates.fields[label : label + 1]
        distance = F.grid_sample(field, grid, padding_mode="border", align_corners=False)
        # distances on the figure shrink by the scale; ink fades over one pixel at the pen's edge
        ink = (distance * (-scale * side / 2)).add_(width * side / 2 + 0.5).clamp_(0, 1)
        if side != height:
            ink = F.interpolate(ink, size=(height, height), mode="bilinear")
        ink = ink[0]
        if channels == 1:  # MNIST-like: white pen on black, nothing else
            image = ink
        else:  # a class colour on its backdrop, dimmed or brightened by the light
            look = label
            if u[6] >= self.own_colour and self.num_classes > 1:  # a confuser: another's look
                other = int(u[7] * (self.num_classes - 1))
                look = other + (other >= label)
            background = self.templates.backdrop(look, height) * (0.6 + 0.8 * u[5])
            image = torch.lerp(background, self.templates.colours[look].view(-1, 1, 1), ink)
        if self.noise > 0:
            image = image.add_(torch.randn(self.shape, generator=generator), alpha=self.noise)
        return image.clamp_(0.0, 1.0), label


class SyntheticTokens(Dataset):
    """Token sequences whose class shows in which sentiment words occur among neutral tokens.

    A ``signal`` share of positions holds sentiment words: each from the label's lexicon with
    probability OWN_WORDS, else from another class's (a confuser), so a model has to weigh the
    words it reads, not spot one. Id 0 is padding; class ``c``'s lexicon is ids
    ``1 + c * words ... (c + 1) * words``; neutral tokens are the ids above all lexicons.
    """

    def __init__(
        self, size: int, seq_len: int, vocab_size: int, num_classes: int, signal: float, seed: int
    ) -> None:
        self.size, self.seq_len, self.vocab_size = size, seq_len, vocab_size
        self.num_classes, self.signal, self.seed = num_classes, signal, seed
        self.words = min(LEXICON, (vocab_size - 1) // (2 * num_classes))
        self.neutral = 1 + num_classes * self.words

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed + index)
        label = int(torch.randint(self.num_classes, (), generator=generator))
        tokens = torch.randint(self.neutral, self.vocab_size, (self.seq_len,), generator=generator)
        marked = torch.rand(self.seq_len, generator=generator) < self.signal
        own = torch.rand(self.seq_len, generator=generator) < OWN_WORDS
        other = torch.randint(max(self.num_classes - 1, 1), (self.seq_len,), generator=generator)
        other = other + (other >= label).long()  # any class but the label
        lexicon = torch.where(own | (self.num_classes == 1), label, other)
        word = torch.randint(self.words, (self.seq_len,), generator=generator)
        return torch.where(marked, 1 + lexicon * self.words + word, tokens), label


class SyntheticDataModule(HpmlDataModule):
    """Images (``C x H x W``) or token sequences, sized by config; no files, no network.

    Args:
        modality: ``image`` or ``tokens``.
        noise: std of the pixel noise added to each image.
        own_colour: share of colour images drawn in their own class's colour on its backdrop;
            the others borrow another class's, so below 1 only the figure's shape is a sure cue.
        signal: share of a token sequence's positions that hold sentiment words.
        train_samples: samples of the train split (``val_samples``, ``test_samples`` likewise).
        **kwargs: :class:`~hpml.data.base.HpmlDataModule`'s (batch size, seed, ...).
    """

    def __init__(
        self,
        modality: str = "image",
        num_classes: int = 10,
        channels: int = 3,
        image_size: int = 32,
        seq_len: int = 64,
        vocab_size: int = 2000,
        noise: NonNegative = 0.3,
        own_colour: Annotated[float, Range(ge=0, le=1)] = OWN_COLOUR,
        signal: Annotated[float, Range(ge=0, le=1)] = 0.08,
        train_samples: int = 1024,
        val_samples: int = 256,
        test_samples: int = 256,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.modality = one_of("modality", modality, MODALITIES)
        self.num_classes = positive_int("num_classes", num_classes)
        self.channels = positive_int("channels", channels)
        self.image_size = positive_int("image_size", image_size)
        self.seq_len = positive_int("seq_len", seq_len)
        self.vocab_size = positive_int("vocab_size", vocab_size)
        if modality == "tokens" and vocab_size < 2 * num_classes + 1:
            raise ConfigError("vocab_size", vocab_size, f"at least {2 * num_classes + 1}")
        self.noise, self.signal = float(noise), float(signal)
        self.own_colour = float(own_colour)
        self.sizes = {
            "train": positive_int("train_samples", train_samples),
            "val": positive_int("val_samples", val_samples),
            "test": positive_int("test_samples", test_samples),
        }

    @property
    def spec(self) -> DataSpec:
        if self.modality == "tokens":
            return DataSpec("tokens", (self.seq_len,), self.num_classes, self.vocab_size)
        shape = (self.channels, self.image_size, self.image_size)
        return DataSpec("image", shape, self.num_classes, value_range=(0.0, 1.0))

    def description(self) -> DataDescription:
        """Generated data, so described by what decides its samples: the knobs of its modality,
        the split sizes and the seed; batch size, workers and ``limit`` change none of them."""
        if self.modality == "tokens":
            knobs = {"seq_len": self.seq_len, "vocab_size": self.vocab_size, "signal": self.signal}
        else:
            knobs = {
                "channels": self.channels,
                "image_size": self.image_size,
                "noise": self.noise,
                "own_colour": self.own_colour,
            }
        sizes = {f"{split}_samples": size for split, size in self.sizes.items()}
        config = {"modality": self.modality, "num_classes": self.num_classes, **knobs, **sizes}
        config["seed"] = self.seed
        return DataDescription.generated(f"synthetic_{self.modality}", type(self), config)

    def in_memory_problem(self) -> None:
        """None: generated samples are rendered once, as tensors (:func:`render`)."""
        return None

    def setup(self, stage: str | None = None) -> None:
        """Render the samples of the splits ``stage`` reads, each split once (the first
        ``limit`` of them), so no epoch draws a sample again."""
        if self.modality == "tokens":
            split = partial(
                SyntheticTokens,
                seq_len=self.seq_len,
                vocab_size=self.vocab_size,
                num_classes=self.num_classes,
                signal=self.signal,
            )
        else:
            split = partial(
                SyntheticImages,
                shape=(self.channels, self.image_size, self.image_size),
                num_classes=self.num_classes,
                noise=self.noise,
                templates=prototypes(self.num_classes, self.channels, self.image_size, self.seed),
                own_colour=self.own_colour,
            )
        for name in STAGE_SPLITS.get(stage or "", SPLIT_SEEDS):
            if getattr(self, f"{name}_set") is None:
                samples = split(size=self.sizes[name], seed=self.seed + SPLIT_SEEDS[name])
                setattr(self, f"{name}_set", render(samples, self.limit))


def render(samples: Dataset, limit: int | None) -> TensorDataset:
    """The first ``limit`` (None: all) of ``samples`` drawn once, stacked as tensors."""
    count = len(samples) if limit is None else min(limit, len(samples))  # type: ignore[arg-type]
    drawn = [samples[i] for i in range(count)]
    return TensorDataset(torch.stack([x for x, _ in drawn]), torch.tensor([y for _, y in drawn]))
