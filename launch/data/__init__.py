"""Data loading: named datasets (``loaders``) and the standard file
formats (``formats``: IDX, LIBSVM/svmlight, ARFF)."""

from launch.data import formats, loaders
from launch.data.loaders import Dataset, describe_sources, load_dataset

__all__ = ["Dataset", "describe_sources", "formats", "load_dataset",
           "loaders"]
