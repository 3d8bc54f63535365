"""Datasets as in-memory tensors, client partitions and batched augmentation."""

from fedspectral.data.augment import AugmentParams, Normalize, SimCLRAugment
from fedspectral.data.datasets import (
    DATASETS,
    DatasetInfo,
    ImageData,
    dataset_info,
    default_root,
    load_dataset,
    missing_files,
    train_val_indices,
    train_val_split,
)
from fedspectral.data.partition import (
    client_classes,
    client_weights,
    partition_by_class,
    partition_clients,
    partition_dirichlet,
    partition_iid,
    stratified_subset,
)

__all__ = [
    "DATASETS",
    "AugmentParams",
    "DatasetInfo",
    "ImageData",
    "Normalize",
    "SimCLRAugment",
    "client_classes",
    "client_weights",
    "dataset_info",
    "default_root",
    "load_dataset",
    "missing_files",
    "partition_by_class",
    "partition_clients",
    "partition_dirichlet",
    "partition_iid",
    "stratified_subset",
    "train_val_indices",
    "train_val_split",
]
