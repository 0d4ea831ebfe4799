"""Data loading: named datasets (``loaders``), the standard file formats
(``formats``: IDX, LIBSVM/svmlight, ARFF) and HOG features (``hog``)."""

from launch.data import formats, hog, loaders
from launch.data.loaders import Dataset, describe_sources, load_dataset

__all__ = ["Dataset", "describe_sources", "formats", "hog", "load_dataset",
           "loaders"]
