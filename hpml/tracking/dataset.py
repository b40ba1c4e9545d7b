"""The run's data as an MLflow dataset input (name, source, digest), so the runs trained on the
same data can be found; the data module says what its data is
(:meth:`hpml.data.base.HpmlDataModule.description`), this module makes MLflow's objects of it."""

from __future__ import annotations

import mlflow
import numpy as np
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.meta_dataset import MetaDataset
from mlflow.data.sources import LocalArtifactDatasetSource
from mlflow.types import Schema, TensorSpec

from hpml.data.base import DataDescription, HpmlDataModule

# One input per run: MLflow keeps one input per dataset and run (the val and test splits come
# from the same files), under the context its own autologgers give training data.
CONTEXT = "train"
SOURCE_NAME_TAG = "mlflow.source.name"  # what MLflow's code sources name their code by


def log_dataset(datamodule: HpmlDataModule) -> None:
    """Record the prepared ``datamodule``'s data as the active run's input, if it can say:
    metadata only (MLflow stores no copy of the data, just where it is and its digest), its
    schema a batch of inputs and its class labels, as tensors of any batch size."""
    description = datamodule.description()
    if description is None:
        return
    spec = datamodule.spec
    dtype = np.dtype(np.int64 if spec.modality == "tokens" else np.float32)
    inputs = TensorSpec(dtype, (-1, *spec.input_shape), spec.modality)
    schema = Schema([inputs, TensorSpec(np.dtype(np.int64), (-1,), "label")])
    dataset = MetaDataset(
        source(description), name=description.name, digest=description.digest, schema=schema
    )
    mlflow.log_input(dataset, context=CONTEXT)


def source(description: DataDescription) -> DatasetSource:
    """The files' path as a local source; for generated data, the generating class and the
    config that decides its samples (a code source: there are no files to point at)."""
    if description.path is not None:
        return LocalArtifactDatasetSource(str(description.path))
    return CodeDatasetSource({SOURCE_NAME_TAG: description.generator, **description.config})
