"""hpml.config_tree: the one flattener, and what each of its three users makes of its leaves."""

from __future__ import annotations

from omegaconf import OmegaConf

from hpml.config_tree import leaves
from hpml.fused.plan import differing_keys
from hpml.tracking.records import MAX_PARAM_CHARS, flatten

TREE = {
    "seed": 1,
    "model": {"net": {"depth": 11, "widths": [8, 16]}, "optimizer": {"lr": 0.1}},
    "data": {"seed": "${seed}", "empty": {}, "name": None},
}


def test_leaves_are_dotted_keys_in_order_lists_whole_and_empty_nodes_gone() -> None:
    assert list(leaves(TREE)) == [
        ("seed", 1),
        ("model.net.depth", 11),
        ("model.net.widths", [8, 16]),
        ("model.optimizer.lr", 0.1),
        ("data.seed", "${seed}"),
        ("data.name", None),
    ]
    assert list(leaves(5)) == [("", 5)]


def test_mlflow_params_are_the_leaves_as_text_cut_to_mlflows_limit() -> None:
    flat = flatten(TREE | {"long": "x" * (MAX_PARAM_CHARS + 10)})
    assert flat["model.net.widths"] == "[8, 16]" and flat["data.name"] == "None"
    assert len(flat["long"]) == MAX_PARAM_CHARS and flat["long"].endswith("...")
    assert list(flat)[:-1] == [key for key, _ in leaves(TREE)]


def test_fusion_compares_leaves_as_written_not_resolved() -> None:
    a = OmegaConf.create(TREE)
    b = OmegaConf.create(TREE | {"seed": 2, "model": {"net": {"depth": 11, "widths": [8, 32]}}})
    # data.seed reads ${seed} in both: the same as written; a key only one job has differs
    assert differing_keys([a, b]) == ["model.net.widths", "model.optimizer.lr", "seed"]
