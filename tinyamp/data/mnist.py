"""MNIST: the bundled 5,000-image subset, or the full data set from a folder.

``load_mnist()`` with no folder needs no download: tinyamp ships 5,000 real
MNIST training images (500 per digit, see ``mnist5k/PROVENANCE.md``) and
splits them, stratified by digit, into 4,000 training and 1,000 test images.
The split is a fixed function of the files, identical in every process and
under every NumPy version.

``load_mnist(root)`` (or the ``TINYAMP_DATA`` environment variable) reads the
full 60,000/10,000 MNIST from the four standard IDX files, each raw or
gzip-compressed.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import threading

import numpy as np

from .idx import PathLike, read_idx

__all__ = ["load_mnist", "ENV_VAR", "MNIST_FILES"]

ENV_VAR = "TINYAMP_DATA"

# split -> (images file, labels file), the names the MNIST distribution uses.
MNIST_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

_BUNDLED_IMAGES = "mnist-5k-images-idx3-ubyte.gz"
_BUNDLED_LABELS = "mnist-5k-labels-idx1-ubyte.gz"
_BUNDLED_PER_DIGIT = 500
_BUNDLED_TEST_PER_DIGIT = 100  # the other 400 of each digit train
_SPLIT_SEED = "tinyamp-mnist5k-v1"

# Decoded bundled split, built once per process: split -> (images, labels).
_bundled_cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
_bundled_lock = threading.Lock()


def load_mnist(
    root: PathLike | None = None,
    split: str = "train",
    *,
    flatten: bool = False,
    normalize: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST images and labels as NumPy arrays.

    Args:
        root: folder holding the full MNIST (``train-images-idx3-ubyte``,
            ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
            ``t10k-labels-idx1-ubyte``, each optionally ``.gz``). When None,
            the ``TINYAMP_DATA`` environment variable is used if set, and
            otherwise the bundled 5,000-image subset.
        split: ``"train"`` or ``"test"``.
        flatten: return images as ``(N, 784)`` instead of ``(N, 28, 28)``.
        normalize: return float32 images scaled to ``[0, 1]`` instead of uint8.

    Returns:
        ``(images, labels)``: images uint8 ``(N, 28, 28)`` (see ``flatten`` and
        ``normalize``), labels int64 ``(N,)`` with values 0..9. The arrays are
        fresh copies; changing them does not affect later calls.

    Raises:
        ValueError: an unknown ``split``, or files that are not MNIST (wrong
            image size, label values outside 0..9, count mismatch).
        FileNotFoundError: ``root`` or one of its expected files is missing.
    """
    if split not in MNIST_FILES:
        raise ValueError(
            f"load_mnist: split must be 'train' or 'test', found {split!r}"
        )
    if root is None:
        # An empty variable counts as unset, as shells make that easy to do.
        root = os.environ.get(ENV_VAR) or None

    if root is None:
        images, labels = _load_bundled(split)
        images, labels = images.copy(), labels.copy()
    else:
        images, labels = _load_folder(os.fspath(root), split)

    if flatten:
        # The width spelled out: reshape(0, -1) is ambiguous for an empty file.
        images = images.reshape(len(images), images.shape[1] * images.shape[2])
    if normalize:
        # Multiplying by a float32 reciprocal keeps the result float32.
        images = images.astype(np.float32) * np.float32(1.0 / 255.0)
    return images, labels


# ---------------------------------------------------------------- full MNIST


def _find_file(folder: str, name: str, split: str) -> str:
    """Return ``folder/name`` or ``folder/name.gz``, whichever exists."""
    for candidate in (name, name + ".gz"):
        path = os.path.join(folder, candidate)
        if os.path.isfile(path):
            return path
    expected = " and ".join(f"'{n}' (or '{n}.gz')" for n in MNIST_FILES[split])
    raise FileNotFoundError(
        f"load_mnist: MNIST file '{name}' (or '{name}.gz') not found in folder "
        f"'{folder}'. The {split} split needs {expected} there: place the full "
        f"MNIST IDX files in that folder, point {ENV_VAR} or root= at the "
        f"folder that holds them, or call load_mnist() without a root to use "
        f"the bundled 5,000-image subset."
    )


def _load_folder(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    if not os.path.isdir(folder):
        names = ", ".join(
            f"'{n}'" for pair in MNIST_FILES.values() for n in pair
        )
        raise FileNotFoundError(
            f"load_mnist: MNIST folder '{folder}' does not exist. Expected a "
            f"folder holding the four MNIST files {names} (each raw or .gz). "
            f"Create it and place the full MNIST there, set {ENV_VAR} / root= "
            f"to the folder that holds them, or call load_mnist() without a "
            f"root to use the bundled 5,000-image subset."
        )
    images_name, labels_name = MNIST_FILES[split]
    images_path = _find_file(folder, images_name, split)
    labels_path = _find_file(folder, labels_name, split)
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    return _check_pair(images, labels, images_path, labels_path)


def _check_pair(
    images: np.ndarray, labels: np.ndarray, images_path: str, labels_path: str
) -> tuple[np.ndarray, np.ndarray]:
    """Check that the two files are MNIST images and matching labels."""
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(
            f"{images_path}: expected MNIST images of shape (N, 28, 28), found "
            f"shape {images.shape}; is this an images file (idx3)?"
        )
    if images.dtype != np.uint8:
        raise ValueError(
            f"{images_path}: expected uint8 MNIST pixels, found {images.dtype}"
        )
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise ValueError(
            f"{labels_path}: expected a 1-D integer labels file (idx1), found "
            f"shape {labels.shape} of {labels.dtype}; is this a labels file?"
        )
    if len(images) != len(labels):
        raise ValueError(
            f"MNIST image/label count mismatch: {images_path} holds "
            f"{len(images)} images but {labels_path} holds {len(labels)} "
            f"labels; the files do not belong together"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        bad = labels[(labels < 0) | (labels > 9)]
        raise ValueError(
            f"{labels_path}: mislabelled file: expected digit labels 0..9, "
            f"found {bad.size} label(s) outside that range (e.g. {int(bad[0])})"
        )
    return images, labels.astype(np.int64)


# ---------------------------------------------------------- bundled subset


def _hash_keys(n: int, purpose: str) -> np.ndarray:
    """A fixed pseudo-random uint64 sort key per sample index.

    A hash rather than ``np.random``: NumPy does not promise that a seeded
    shuffle gives the same order in every release, and the train/test split
    must never move (a changed split silently invalidates reported accuracy).
    """
    keys = np.empty(n, dtype=np.uint64)
    for i in range(n):
        digest = hashlib.sha256(f"{_SPLIT_SEED}:{purpose}:{i}".encode()).digest()
        keys[i] = int.from_bytes(digest[:8], "big")
    return keys


def _build_bundled_split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    folder = importlib.resources.files(__package__) / "mnist5k"
    with importlib.resources.as_file(folder / _BUNDLED_IMAGES) as path:
        images = read_idx(path)
        images_path = str(path)
    with importlib.resources.as_file(folder / _BUNDLED_LABELS) as path:
        labels = read_idx(path)
        labels_path = str(path)
    images, labels = _check_pair(images, labels, images_path, labels_path)

    counts = np.bincount(labels, minlength=10)
    if not np.all(counts == _BUNDLED_PER_DIGIT):
        raise ValueError(
            f"{labels_path}: the bundled subset should hold {_BUNDLED_PER_DIGIT} "
            f"images per digit, found {counts.tolist()}; the package data is "
            f"damaged, reinstall tinyamp"
        )

    # Stratified selection: within each digit, the 100 samples with the
    # smallest "select" key form the test set.
    select = _hash_keys(len(labels), "select")
    is_test = np.zeros(len(labels), dtype=bool)
    for digit in range(10):
        members = np.flatnonzero(labels == digit)
        chosen = members[np.argsort(select[members], kind="stable")]
        is_test[chosen[:_BUNDLED_TEST_PER_DIGIT]] = True

    # An independent "order" key shuffles each split, so batches mix digits.
    # (Reusing the selection key would leave the order biased by digit.)
    order = np.argsort(_hash_keys(len(labels), "order"), kind="stable")
    test_idx = order[is_test[order]]
    train_idx = order[~is_test[order]]

    split = {
        "train": (images[train_idx], labels[train_idx]),
        "test": (images[test_idx], labels[test_idx]),
    }
    for arrays in split.values():
        for a in arrays:
            a.flags.writeable = False  # the cache is shared; callers get copies
    return split


def _load_bundled(split: str) -> tuple[np.ndarray, np.ndarray]:
    with _bundled_lock:
        if not _bundled_cache:
            _bundled_cache.update(_build_bundled_split())
    return _bundled_cache[split]
