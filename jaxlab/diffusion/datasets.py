"""Small datasets for diffusion training on a CPU: sklearn's 8x8 digits (images) and 2-D mixtures."""

from __future__ import annotations

import numpy as np


def digits_images() -> np.ndarray:
    """The 1797 8x8 digits of scikit-learn as float32 (n, 8, 8, 1) images scaled to [-1, 1].

    The pixel values 0..16 map linearly to -1..1; the labels are :func:`digits_labels`.
    """
    from sklearn.datasets import load_digits

    images = load_digits().images.astype(np.float32)
    return (images / 8.0 - 1.0)[..., None]


def digits_labels() -> np.ndarray:
    """The class (0-9) of each image of :func:`digits_images`."""
    from sklearn.datasets import load_digits

    return load_digits().target.astype(np.int32)
