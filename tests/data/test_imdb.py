"""IMDB reviews: CSV parsing, train-only vocabulary, padding, caching and aclImdb conversion."""

from __future__ import annotations

import csv
import logging
import tarfile
from pathlib import Path

import pytest
import torch

from hpml.data import imdb
from hpml.data.imdb import PAD, UNK, IMDBDataModule, convert_aclimdb, tokenize
from hpml.errors import ConfigError, DatasetNotFoundError, HpmlError

N_REVIEWS = 20
FIXED_TOKENS = 6  # review, <i>, uniq<i>, it's, fine, really


def review_text(i: int) -> str:
    """Review ``i`` has ``FIXED_TOKENS + i`` tokens, so its encoded length tells which row it is."""
    return f'Review #{i}: "UNIQ{i}", it\'s fine,<br /><br />really' + " film" * i


@pytest.fixture
def csv_root(tmp_path: Path) -> Path:
    with open(tmp_path / "IMDB Dataset.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["review", "sentiment"])
        for i in range(N_REVIEWS):
            writer.writerow([review_text(i), "positive" if i % 2 else "negative"])
    return tmp_path


def rows_by_review(x: torch.Tensor) -> list[int]:
    """Which review each encoded row came from, read off its number of non-pad tokens."""
    return [int((row != PAD).sum()) - FIXED_TOKENS for row in x]


def split_tensors(dm: IMDBDataModule, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    return getattr(dm, f"{name}_set").tensors


def test_tokenize_lowercases_and_drops_line_breaks() -> None:
    assert tokenize('It\'s GREAT,<br />"really"<br />10/10') == [
        "it's",
        "great",
        "really",
        "10",
        "10",
    ]


def test_splits_labels_and_left_padding(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, seq_len=64, split=[0.6, 0.2, 0.2], cache=False)
    dm.prepare_data()
    dm.setup("fit")
    sizes = [len(getattr(dm, f"{name}_set")) for name in ("train", "val", "test")]
    assert sizes == [12, 4, 4]
    seen = []
    for name in ("train", "val", "test"):
        x, y = split_tensors(dm, name)
        assert x.dtype == torch.int64 and x.shape[1] == 64 and y.dtype == torch.int64
        for row, label, i in zip(x, y, rows_by_review(x), strict=True):
            assert int(label) == i % 2
            start = 64 - FIXED_TOKENS - i
            assert row[:start].eq(PAD).all() and row[start:].ne(PAD).all()
            assert dm.vocab[row[start]] == "review" and dm.vocab[row[-1]] in {"really", "film"}
            seen.append(i)
    assert sorted(seen) == list(range(N_REVIEWS))


def test_vocabulary_comes_from_the_training_split_only(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, seq_len=64, split=[0.6, 0.2, 0.2], cache=False)
    dm.setup("fit")
    assert dm.vocab[:2] == ["<pad>", "<unk>"]
    assert "br" not in dm.vocab and "it's" in dm.vocab
    train_x, _ = split_tensors(dm, "train")
    train_reviews = set(rows_by_review(train_x))
    for name in ("train", "val", "test"):
        x, _ = split_tensors(dm, name)
        for row, i in zip(x, rows_by_review(x), strict=True):
            uniq = row[64 - FIXED_TOKENS - i + 2]  # third token: uniq<i>
            if i in train_reviews:
                assert dm.vocab[uniq] == f"uniq{i}"
            else:
                assert uniq == UNK and f"uniq{i}" not in dm.vocab


def test_vocab_size_caps_by_frequency_with_ties_by_word(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, vocab_size=5, split=[0.6, 0.2, 0.2], cache=False)
    # "film" is most frequent; fine/it's/really/review tie at one per training review
    assert dm.vocab is None
    assert dm.spec.vocab_size == 5  # spec runs setup itself
    assert dm.vocab == ["<pad>", "<unk>", "film", "fine", "it's"]
    assert dm.spec.modality == "tokens" and dm.spec.num_classes == 2


def test_min_freq_drops_rare_words(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, min_freq=2, split=[0.6, 0.2, 0.2], cache=False)
    dm.setup("fit")
    assert not any(word.startswith("uniq") for word in dm.vocab)


def test_truncation_keeps_the_first_tokens(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, seq_len=3, split=[0.6, 0.2, 0.2], cache=False)
    dm.setup("fit")
    x, _ = split_tensors(dm, "train")
    assert x.shape == (12, 3) and x.ne(PAD).all()
    assert all(dm.vocab[t] == "review" for t in x[:, 0])
    assert all(dm.vocab[t].isdigit() and dm.vocab[u] == f"uniq{dm.vocab[t]}" for t, u in x[:, 1:])


def test_second_setup_hits_the_cache(
    csv_root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hpml.data.imdb")
    first = IMDBDataModule(data_dir=csv_root, split=[0.6, 0.2, 0.2])
    first.setup("fit")
    assert "cache miss" in caplog.text
    assert len(list((csv_root / ".cache").glob("imdb-*.pt"))) == 1

    def no_tokenising(text: str) -> list[str]:
        raise AssertionError("tokenised despite a cache")

    monkeypatch.setattr(imdb, "tokenize", no_tokenising)
    caplog.clear()
    second = IMDBDataModule(data_dir=csv_root, split=[0.6, 0.2, 0.2])
    second.setup("fit")
    assert "cache hit" in caplog.text
    assert second.vocab == first.vocab
    for name in ("train", "val", "test"):
        for a, b in zip(split_tensors(first, name), split_tensors(second, name), strict=True):
            assert torch.equal(a, b)

    other = IMDBDataModule(data_dir=csv_root, split=[0.6, 0.2, 0.2], seq_len=10)
    with pytest.raises(AssertionError, match="tokenised despite a cache"):
        other.setup("fit")  # a different knob is a different cache entry


def test_limit_caps_every_loader(csv_root: Path) -> None:
    dm = IMDBDataModule(data_dir=csv_root, limit=3, batch_size=2, seq_len=8, cache=False)
    dm.setup("fit")
    for placement in ("device", "loader"):
        dm.placement, dm._loading, dm._held = placement, None, {}
        counts = [
            sum(len(y) for _, y in loader)
            for loader in (dm.train_dataloader(), dm.test_dataloader())
        ]
        assert counts == [3, 2], placement
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (2, 8) and y.shape == (2,)


def test_missing_csv_names_the_path_and_both_ways_to_get_it(tmp_path: Path) -> None:
    dm = IMDBDataModule(data_dir=tmp_path / "imdb")
    with pytest.raises(DatasetNotFoundError) as info:
        dm.prepare_data()
    message = str(info.value)
    assert str(tmp_path / "imdb" / "IMDB Dataset.csv") in message
    assert "Kaggle" in message and "data.download=true" in message
    with pytest.raises(DatasetNotFoundError):
        _ = dm.spec


def test_csv_without_sentiment_column_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "IMDB Dataset.csv").write_text("text,label\ngreat,positive\n", encoding="utf-8")
    with pytest.raises(HpmlError, match="missing column") as info:
        IMDBDataModule(data_dir=tmp_path).setup("fit")
    assert str(tmp_path / "IMDB Dataset.csv") in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_sentiment_names_the_line(tmp_path: Path) -> None:
    rows = 'review,sentiment\n"good, very",positive\n"meh ""ok""",neutral\n'
    (tmp_path / "IMDB Dataset.csv").write_text(rows, encoding="utf-8")
    with pytest.raises(HpmlError, match=r"line 3: sentiment 'neutral'"):
        IMDBDataModule(data_dir=tmp_path).setup("fit")


@pytest.mark.parametrize(
    "knobs",
    [{"split": [0.5, 0.5]}, {"split": [0.8, 0.3, -0.1]}, {"vocab_size": 2}, {"seq_len": 0}],
)
def test_bad_knobs_are_config_errors(knobs: dict) -> None:
    with pytest.raises(ConfigError):
        IMDBDataModule(**knobs)


ACL_REVIEWS = {
    ("train", "pos"): ['Loved it, "truly".<br /><br />Go see it.', "Great film"],
    ("train", "neg"): ["Awful,\nboring"],
    ("test", "pos"): ["Fine fine fine"],
    ("test", "neg"): ['Not "good"'],
}


def write_aclimdb(root: Path) -> None:
    for (half, folder), texts in ACL_REVIEWS.items():
        directory = root / "aclImdb" / half / folder
        directory.mkdir(parents=True)
        for i, text in enumerate(texts):
            (directory / f"{i}_{7 if folder == 'pos' else 2}.txt").write_text(text, "utf-8")
    unsup = root / "aclImdb" / "train" / "unsup"
    unsup.mkdir()
    (unsup / "0_0.txt").write_text("unlabelled", "utf-8")


def test_convert_aclimdb_writes_the_csv_format(tmp_path: Path) -> None:
    write_aclimdb(tmp_path)
    csv_path = tmp_path / "out.csv"
    assert convert_aclimdb(tmp_path, csv_path) == 5
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    expected = [
        {"review": text, "sentiment": "positive" if folder == "pos" else "negative"}
        for (half, folder), texts in ACL_REVIEWS.items()
        for text in texts
    ]
    assert rows == expected
    assert not list(tmp_path.glob("*.partial"))


def test_convert_aclimdb_missing_tree_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="aclImdb"):
        convert_aclimdb(tmp_path, tmp_path / "out.csv")


def fake_download(tmp_path: Path, calls: list, keep: int | None = None):
    """torchvision's ``download_url`` without the network: it writes the tiny aclImdb tree as a
    real gzipped tar where the archive goes (its first ``keep`` bytes only, if given)."""

    def download_url(url: str, root: Path, md5: str) -> None:
        calls.append((url, md5))
        source = tmp_path / "source"
        write_aclimdb(source)
        Path(root).mkdir(parents=True, exist_ok=True)  # as download_url makes it
        archive = Path(root) / Path(url).name
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(source / "aclImdb", arcname="aclImdb")
        if keep is not None:
            archive.write_bytes(archive.read_bytes()[:keep])

    return download_url


def test_download_fetches_the_stanford_archive_and_converts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list = []
    monkeypatch.setattr(imdb, "download_url", fake_download(tmp_path, calls))
    data_dir = tmp_path / "data"
    dm = IMDBDataModule(data_dir=data_dir, download=True, split=[0.6, 0.2, 0.2], cache=False)
    dm.prepare_data()
    assert calls == [(imdb.URL, imdb.MD5)]
    dm.prepare_data()  # the CSV exists now: nothing is fetched again
    assert len(calls) == 1
    dm.setup("fit")
    assert len(dm.train_set) + len(dm.val_set) + len(dm.test_set) == 5


def test_a_truncated_archive_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imdb, "download_url", fake_download(tmp_path, [], keep=60))
    data_dir = tmp_path / "data"
    with pytest.raises(HpmlError) as info:
        IMDBDataModule(data_dir=data_dir, download=True).prepare_data()
    message = str(info.value)
    assert message.startswith(f"{data_dir / 'aclImdb_v1.tar.gz'} cannot be extracted (EOFError")
    assert "expected the gzipped tar of the Stanford aclImdb reviews" in message
    assert "data.download=true" in message and "\n" not in message


def test_a_review_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    write_aclimdb(tmp_path)
    bad = tmp_path / "aclImdb" / "test" / "neg" / "0_2.txt"
    bad.write_bytes(b"fine \xff\xfe film")
    with pytest.raises(HpmlError) as info:
        convert_aclimdb(tmp_path, tmp_path / "out.csv")
    assert str(info.value).startswith(f"{bad} is not UTF-8 text (invalid start byte at byte 5)")
    assert not (tmp_path / "out.csv").exists()
